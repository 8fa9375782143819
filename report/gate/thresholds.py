"""How the CI gate decides: its settings (``Thresholds``), their defaults, and where they are
read: ``.wallflame-check.toml`` under ``[thresholds]``, then ``-t key=value`` on the command line,
in that order of precedence.  Method and reasons: docs/check.md.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wallflame.errors import InputError
from wallflame.profile import WAIT_CLASSES

CONFIG_NAME = ".wallflame-check.toml"
#: Kernel frames that a timer interrupt or a preemption puts on top of any stack.
PREEMPTION_FRAMES = (r"^asm_sysvec_", r"^sysvec_", r"^__sysvec_", r"^asm_common_interrupt$",
                     r"^common_interrupt$", r"^irqentry_", r"^__?irq_exit", r"^irq_exit",
                     r"softirq", r"^exit_to_user_mode", r"^preempt_schedule",
                     r"^_?_?schedule$", r"^finish_task_switch")


@dataclass
class Thresholds:
    """How the gate decides.  Method and reasons: docs/check.md.

    alpha:              family-wise false-alarm rate of one check: the chance that unchanged
                        code is judged a regression, over all quantities judged together
                        (Holm's correction; default 0.01).
    min_effect_pp:      frame shares (no work reported): increases under this many points
                        are never a regression (default 1.0).
    min_effect_relative: every quantity: increases under this fraction of the baseline are
                        never a regression (default 0.02).
    min_effect_s_per_s: wait classes: increases under this many seconds per second
                        of window are never a regression (default 0.02).
    min_frame_share:    functions judged: those with at least this share of on-CPU time on
                        either side (default 0.005).
    sensitivity:        a pass must have been able to see an increase of this fraction of
                        CPU per unit of work (when reported) or of each top frame; otherwise
                        the check is inconclusive (default 0.10).
    power:              the probability with which the "could have seen" figures are seen
                        (default 0.8).
    run_cv:             how much CPU per unit of work moves between runs of the unchanged
                        program, relative, when no side is a series (one run cannot show it;
                        a series collected in turns with the other side measures it
                        instead; for sides collected at different times it is a floor).
                        Default 0.04: 60 runs of samples/handlers over an hour on a shared
                        2-core machine spread by 4.3% (measured by benchmarks/check_gate.py;
                        other programs: docs/check.md).
    wait_run_cv:        the same for wait classes, beyond what a run's slices show (default
                        0.3: between a small program's waits and a database server's latch and
                        commit waits; docs/check.md).
    frame_run_excess:   how many times more frames' values differ between runs than their
                        slices predict (in variance), when no side is a series, and at least
                        that when the sides were not collected in turns (a series measures
                        it, and the check prints the figure).  Default 3: runs collected
                        minutes apart on a shared machine, whose load or neighbours changed
                        in between, differ 2.5-3.5x; runs back to back under the same load
                        0.4-1.1x (docs/check.md).
    wait_classes:       wait classes judged (default ``mutex``, ``rwlock``, ``lock``
                        (database row and table locks), ``io``: contention and I/O;
                        ``condvar``, ``poll`` and ``sleep`` grow whenever a program is less
                        busy); when a class fails, the lock that grew most is named (locks are
                        shown, not judged: see ``judge``), and the rule whose waits grew most
                        (``rwlock: InnoDB latch``), which names the wait where no lock was
                        identified.
    ignore_frames:      regular expressions (searched) for frames not judged, nor anything
                        they call (their time stays with the function they interrupted);
                        default: the kernel's interrupt, softirq and preemption entry points,
                        whose share measures how busy the machine was, not the program.
    rate_tolerance:     sampling rates of the runs may differ by this fraction before they
                        count as collected differently (default 0.10).
    across_machines:    judge runs from different machines (CPU model, CPU count, kernel,
                        frequency governor, virtual or not) as alike (``--across-machines``;
                        default false: such a check is inconclusive, ``same_machine``).
    max_load_difference: the share of the machine's CPUs that other processes and the
                        hypervisor (steal) took may differ this much between the sides
                        (their means) before the runs count as collected under different
                        load: inconclusive, since a program's profile moves with its
                        machine's load (default 0.25; one busy process on a 2-CPU machine
                        is about 0.45).  Runs that did not record it are not compared.
    max_loss_share:     losses up to this share of a run's evidence widen the intervals;
                        beyond it the run cannot be compared (default 0.25).  Truncated or
                        unreadable input, lost perf chunks and an early target exit are
                        never tolerated.
    allowed_losses:     kinds of loss that are never counted (default none).
    top:                how many frames the summary shows (default 8).
    """

    alpha: float = 0.01
    min_effect_pp: float = 1.0
    min_effect_relative: float = 0.02
    min_effect_s_per_s: float = 0.02
    min_frame_share: float = 0.005
    sensitivity: float = 0.10
    power: float = 0.8
    run_cv: float = 0.04
    wait_run_cv: float = 0.3
    frame_run_excess: float = 3.0
    wait_classes: list[str] = field(default_factory=lambda: ["mutex", "rwlock", "lock", "io"])
    ignore_frames: list[str] = field(default_factory=lambda: list(PREEMPTION_FRAMES))
    rate_tolerance: float = 0.10
    max_load_difference: float = 0.25
    across_machines: bool = False
    max_loss_share: float = 0.25
    allowed_losses: list[str] = field(default_factory=list)
    top: int = 8

    def set(self, key: str, value: Any, origin: str) -> None:
        """Set one threshold from config or the command line, type-checked."""
        names = {f.name: f for f in dataclasses.fields(self)}
        if key not in names:
            raise InputError(f"{origin}: unknown threshold {key!r}",
                             f"use one of: {', '.join(sorted(names))}")
        current = getattr(self, key)
        try:
            if isinstance(current, list):
                items = value if isinstance(value, list) else str(value).split(",")
                new: Any = [str(v).strip() for v in items if str(v).strip()]
            elif isinstance(current, bool):
                if str(value).strip().lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError(value)
                new = str(value).strip().lower() in ("true", "1", "yes")
            elif isinstance(current, int):
                new = int(value)
            else:
                new = float(value)
        except (TypeError, ValueError):
            raise InputError(f"{origin}: {key} = {value!r} is not a valid "
                             f"{type(current).__name__}", "fix the value") from None
        if not isinstance(new, list) and (new < 0 or not math.isfinite(new)):
            raise InputError(f"{origin}: {key} must be a finite number, not negative",
                             "fix the value")
        if key in ("alpha", "power") and not 0 < new < 1:
            raise InputError(f"{origin}: {key} must be between 0 and 1", "fix the value")
        if key == "ignore_frames":
            for pattern in new:
                try:
                    re.compile(pattern)
                except re.error as e:
                    raise InputError(f"{origin}: ignore_frames: bad pattern {pattern!r}: {e}",
                                     "fix the regular expression") from None
        if key == "wait_classes":
            bad = [c for c in new if c not in WAIT_CLASSES]
            if bad:
                raise InputError(f"{origin}: unknown wait class {bad[0]!r}",
                                 f"use: {', '.join(WAIT_CLASSES)}")
        setattr(self, key, new)


def load_thresholds(config: str | None, overrides: list[str]) -> Thresholds:
    """Defaults, then the config file (``config`` or ``./.wallflame-check.toml``), then
    ``key=value`` overrides from the command line."""
    t = Thresholds()
    path = Path(config) if config else Path(CONFIG_NAME)
    if config or path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"{path}: no such config file", "check the path") from None
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
            raise InputError(f"{path}: unreadable config: {e}", "fix the TOML") from None
        table = data.get("thresholds", {})
        if not isinstance(table, dict):
            raise InputError(f"{path}: [thresholds] must be a table", "see wallflame check -h")
        for k, v in table.items():
            t.set(str(k), v, str(path))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise InputError(f"-t {item!r}: expected KEY=VALUE", "e.g. -t alpha=0.01")
        t.set(key.strip(), value.strip(), "command line")
    return t
