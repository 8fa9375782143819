"""The CI gate: CURRENT against BASELINE, each one run or a series of runs, judged by a stated
statistical test at a stated false-alarm rate, never on data that cannot be compared.

Verdicts and exit codes (``wallflame.errors``): ``pass`` 0, ``regression`` 1, ``inconclusive``
7.  A regression is an increase of a judged quantity (``report.gate.quantities``) that Welch's
one-sided t-test finds significant after Holm's correction over every quantity judged in the
check (family-wise false-alarm rate ``alpha``) *and* that is larger than the minimum effect.
Inconclusive: evidence that cannot be compared (different collectors or rates, truncated or
unreadable data, more than ``max_loss_share`` of it lost), or a pass that could not have seen
a ``sensitivity`` (relative) increase of the main quantities.  Smaller losses and short
captures only widen the intervals.  An inconclusive check wins over a regression: a regression
seen on data that cannot be compared is reported but not trusted.

Settings have defaults (``Thresholds``), can be set in ``.wallflame-check.toml`` under
``[thresholds]`` and on the command line (``-t key=value``), in that order of precedence.
The method and its reasons: docs/check.md.
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wallflame.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION, InputError
from wallflame.profile import WAIT_CLASSES, Profile, merge_all
from wallflame.report.diff.compare import Diff
from wallflame.report.gate.quantities import (
    PER_WORK,
    SHARE,
    WAITS_TOGETHER,
    Run,
    add_run_noise,
    between_excess,
    cpu_per_work,
    frame_estimates,
    frame_measure,
    interleaved,
    label_growth,
    make_run,
    side_estimates,
    wait_estimates,
    work_rate,
)
from wallflame.report.gate.stats import Comparison, Estimate, compare, holm

CONFIG_NAME = ".wallflame-check.toml"
#: Losses that say how much data is missing only vaguely (a file cut short, a perf chunk, a
#: target that exited early, unreadable input): never tolerated, however small their count.
INTEGRITY = re.compile(r"truncated last|malformed|unreadable|unrecognised|chunk|bad |exited",
                       re.I)
#: Rates that adapt during collection (the snapshot rate halves when snapshots pause the
#: target too long); snapshots are weighted by the time they stand for.
ADAPTIVE_RATES = ("pmp_hz",)
#: Kernel frames that a timer interrupt or a preemption puts on top of any stack.
PREEMPTION_FRAMES = (r"^asm_sysvec_", r"^sysvec_", r"^__sysvec_", r"^asm_common_interrupt$",
                     r"^common_interrupt$", r"^irqentry_", r"^__?irq_exit", r"^irq_exit",
                     r"softirq", r"^exit_to_user_mode", r"^preempt_schedule",
                     r"^_?_?schedule$", r"^finish_task_switch")

#: Wait classes are compared as ``log(s/s + WAIT_EPS)``: a class that is empty on one side
#: still has a logarithm, and changes far below the minimum effect stay small.
WAIT_EPS = 0.01

PASS = "pass"
FAIL = "regression"
INCONCLUSIVE = "inconclusive"
SKIPPED = "skipped"
EXIT_CODES = {PASS: EXIT_OK, FAIL: EXIT_REGRESSION, INCONCLUSIVE: EXIT_INCONCLUSIVE}


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


@dataclass
class Judged:
    """One quantity compared: what it is, the comparison and whether it is a regression."""

    key: str
    kind: str
    unit: str
    cmp: Comparison
    min_effect: float
    regression: bool = False
    group: str = ""  # a lock's wait class
    tested: bool = False  # part of Holm's family (see ``_judge_quantities``)
    #: compared as ``log(x + log_eps)`` (multiplicative run-to-run noise), or linearly (None)
    log_eps: float | None = None

    @property
    def name(self) -> str:
        return self.key.split(":", 1)[1] if ":" in self.key else self.key.replace("_", " ")

    def _lin(self, x: float) -> float:
        if self.log_eps is None:
            return x
        v = math.exp(x) - self.log_eps
        return 0.0 if abs(v) < 1e-9 * max(1.0, self.log_eps) else v

    def _change(self, x: float) -> float:
        """A change on the test's scale as a change of the quantity."""
        if self.log_eps is None:
            return x
        return (self.a + self.log_eps) * (math.exp(x) - 1) if math.isfinite(x) else x

    @property
    def a(self) -> float:
        return self._lin(self.cmp.a.value)

    @property
    def b(self) -> float:
        return self._lin(self.cmp.b.value)

    @property
    def delta(self) -> float:
        return self.b - self.a

    @property
    def low(self) -> float:
        return self._change(self.cmp.low)

    @property
    def high(self) -> float:
        return self._change(self.cmp.high)

    @property
    def detectable(self) -> float:
        return self._change(self.cmp.detectable)

    def fmt(self, x: float, signed: bool = False) -> str:
        """A value (or, ``signed``, a change) in the quantity's own unit."""
        if not math.isfinite(x):
            return "unknown"
        sign = "+" if signed else ""
        if self.kind == SHARE:
            return f"{100 * x:{sign}.2f} points" if signed else f"{100 * x:.2f}%"
        if self.kind in (PER_WORK, "cpu_per_work"):
            return f"{x:{sign},.1f} ns/{self.unit}"
        return f"{x:{sign}.3f} s/s"

    def relative(self, x: float) -> str:
        if self.a:
            return f"{100 * x / self.a:+.1f}%"
        return "new" if self.b else "none on either side"

    def interval(self) -> str:
        return (f"{self.fmt(self.delta, True)} (95% CI {self.fmt(self.low, True)} to "
                f"{self.fmt(self.high, True)}; {self.relative(self.delta)})")

    def to_json(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return x if math.isfinite(x) else None

        c = self.cmp
        return {"name": self.name, "quantity": self.key, "kind": self.kind, "unit": self.unit,
                "before": num(self.a), "after": num(self.b), "delta": num(self.delta),
                "scale": "log" if self.log_eps is not None else "linear",
                "se": num(c.se), "df": num(c.df), "p": c.p,
                "ci95": [num(self.low), num(self.high)],
                "detectable": num(self.detectable), "regression": self.regression,
                "delta_text": self.fmt(self.delta, True), "low_text": self.fmt(self.low, True),
                "high_text": self.fmt(self.high, True),
                "detectable_text": self.fmt(self.detectable, True)}


@dataclass
class Result:
    """One test: a JUnit test case and a row of the summary."""

    name: str
    status: str
    message: str
    changes: list[Judged] = field(default_factory=list)


@dataclass
class Verdict:
    status: str
    results: list[Result]
    diff: Diff
    thresholds: Thresholds
    judged: list[Judged] = field(default_factory=list)
    method: str = ""
    runs: tuple[int, int] = (1, 1)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def top_frames(self) -> list[Judged]:
        """The frames the summary shows: regressions first, then the heaviest."""
        frames = [j for j in self.judged if j.key.startswith("frame:") and j.tested]
        frames.sort(key=lambda j: (not j.regression, -max(j.a, j.b), j.name))
        return frames[:self.thresholds.top]

    def rows(self) -> list[Judged]:
        """What every output shows with its interval: the top frames, CPU per unit of work,
        the wait classes (and the judged ones together), and the locks of a wait class
        judged a regression."""
        grew = {j.key[5:] for j in self.judged if j.regression and j.key.startswith("wait:")}
        rest = [j for j in self.judged if not j.key.startswith("frame:")
                and (j.tested or j.key == WAITS_TOGETHER
                     or (j.key.startswith("lock:") and j.group in grew and j.delta > 0))]
        return [*self.top_frames(), *rest]


def judge(before: list[Run], after: list[Run], diff: Diff, t: Thresholds) -> Verdict:
    """The verdict on two sides, each a list of runs (see the module docstring)."""
    quality = [complete_data(before, after, t), same_collectors(before, after, t),
               same_load(before, after, t)]
    judged, method = _judge_quantities(before, after, t)
    results = [*quality, *_results(judged, t, before, after), sensitivity(judged, t)]
    if any(r.status == INCONCLUSIVE for r in quality):
        status = INCONCLUSIVE
    elif any(r.status == FAIL for r in results):
        status = FAIL
    elif results[-1].status == INCONCLUSIVE:
        status = INCONCLUSIVE
    else:
        status = PASS
    return Verdict(status, results, diff, t, judged, method, (len(before), len(after)))


def ignored(t: Thresholds) -> re.Pattern[str] | None:
    """The frames ``t.ignore_frames`` leaves out (see ``make_run``'s ``cut``)."""
    return re.compile("|".join(f"(?:{p})" for p in t.ignore_frames)) if t.ignore_frames \
        else None


def judge_profiles(before: Profile | list[Profile], after: Profile | list[Profile],
                   t: Thresholds | None = None) -> Verdict:
    """``judge`` on loaded profiles (one or a series per side; no per-slice figures: the
    noise is sampling error alone)."""
    from wallflame.report.diff.compare import _meta_digest
    from wallflame.report.diff.compare import compare as diff_of

    t = t or Thresholds()
    sides = []
    for label, side in (("baseline", before), ("current", after)):
        profiles = side if isinstance(side, list) else [side]
        sides.append([make_run(label if len(profiles) == 1 else f"{label}/{i + 1}", p,
                               _meta_digest(p), cut=ignored(t))
                      for i, p in enumerate(profiles)])
    merged = [p if isinstance(p, Profile) else merge_all(p) for p in (before, after)]
    return judge(sides[0], sides[1], diff_of(merged[0], merged[1]), t)


def _estimates(runs: list[Run], names: list[str], measure: str, work: bool,
               lock_names: list[str], t: Thresholds, rate_ref: float | None = None
               ) -> list[dict[str, Estimate]]:
    """Every quantity of every run of a side (``wallflame.report.gate.quantities``); ``rate_ref``:
    waits per unit of work, at that rate of work (``wait_estimates``)."""
    per_run = []
    for r in runs:
        q = {f"frame:{k}": v for k, v in frame_estimates(r, names, measure).items()}
        cpw = cpu_per_work(r) if work else None
        if cpw is not None:
            q["cpu_per_work"] = cpw
        q.update(wait_estimates(r, t.wait_classes, lock_names, rate_ref))
        per_run.append(q)
    return per_run


def _sides(before: list[Run], after: list[Run], names: list[str], measure: str, work: bool,
           lock_names: list[str], t: Thresholds
           ) -> tuple[list[dict[str, Estimate]], float, float, float,
                      dict[str, tuple[float, float]]]:
    """Each side's estimates, with the between-run noise: the frames' excess used, the one
    measured in the series (and its degrees of freedom: 0 with one run per side) and the
    other quantities' run-to-run variation.  Sides collected at different times (not
    ``interleaved``) differ by what moves between collection times, which the spread within a side
    does not show: the priors are then floors, never lowered by a series."""
    # per unit of work, waits too: at the baseline's rate of work, in seconds per second
    rate_ref = work_rate(before) if measure == PER_WORK else None
    per_side = [_estimates(runs, names, measure, work, lock_names, t, rate_ref)
                for runs in (before, after)]
    if any("cpu_per_work" not in d for side in per_side for d in side):
        # a run without per-slice work (progress lines not spanning its window) would count
        # as zero CPU per unit of work in its series' mean: not judged at all instead
        for side in per_side:
            for d in side:
                d.pop("cpu_per_work", None)
    measured, dof = between_excess(per_side)
    apart = not interleaved(before, after)
    if not dof:  # one run per side: the prior
        excess = max(1.0, t.frame_run_excess)
    elif apart:  # the series' figure, but never below the prior
        excess = max(1.0, t.frame_run_excess, measured)
    else:
        excess = measured
    cv, per_side = add_run_noise(
        per_side, lambda k: t.run_cv if k == "cpu_per_work" else t.wait_run_cv,
        lambda k: 0.0 if k == "cpu_per_work" else WAIT_EPS, at_least_prior=apart)
    if measure == PER_WORK:
        # per unit of work, a frame moves between runs as CPU per unit of work does
        c = cv.get("cpu_per_work", (t.run_cv, 0.0))[0]
        for side in per_side:
            for d in side:
                for k, e in d.items():
                    if k.startswith("frame:"):
                        d[k] = Estimate(e.value, e.var + (c * e.value) ** 2, e.df)
    sides = [side_estimates(runs, per_run, excess)
             for runs, per_run in zip((before, after), per_side, strict=True)]
    return sides, excess, measured, dof, cv


def _judge_quantities(before: list[Run], after: list[Run], t: Thresholds
                      ) -> tuple[list[Judged], str]:
    work = frame_measure(before, after) == PER_WORK
    ignore = re.compile("|".join(f"(?:{p})" for p in t.ignore_frames)) if t.ignore_frames \
        else None
    names = sorted({n for r in (*before, *after) for n, w in r.functions.items()
                    if r.on and w >= t.min_frame_share * r.on
                    and not (ignore and ignore.search(n))})
    lock_names = sorted({n for r in (*before, *after) for n in r.locks
                         if r.lock_class.get(n) in t.wait_classes})
    measure = SHARE
    sides, excess, measured, dof, cv = _sides(before, after, names, measure, work,
                                              lock_names, t)
    judged_as = "share of on-CPU time"
    if "cpu_per_work" in sides[0] and "cpu_per_work" in sides[1]:
        fell = compare(sides[1]["cpu_per_work"], sides[0]["cpu_per_work"], t.alpha)
        if fell.p <= t.alpha and fell.delta > 0:
            # The same work with significantly less CPU: every other frame's share grows
            # although none got slower, so frames are judged per unit of work instead.
            measure = PER_WORK
            sides, excess, measured, dof, cv = _sides(before, after, names, measure, work,
                                                      lock_names, t)
            judged_as = ("on-CPU time per unit of work (CPU per unit of work fell "
                         f"significantly, p={fell.p:.2g}: shares grow when anything else "
                         "shrinks), and waits per unit of work too (as seconds per second "
                         "at the baseline's rate of work: a server that does more work "
                         "waits more per second without waiting more per request)")
    keys = sorted(sides[0].keys() & sides[1].keys())
    unit = before[0].work_unit or "unit"
    judged = []
    for key in keys:
        kind = measure if key.startswith("frame:") else (
            "cpu_per_work" if key == "cpu_per_work" else "s_per_s")
        a, b = sides[0][key], sides[1][key]
        floor = t.min_effect_relative * abs(a.value)
        if kind == SHARE:
            floor = max(floor, t.min_effect_pp / 100)
        elif kind == "s_per_s":
            floor = max(floor, t.min_effect_s_per_s)
        group = next((r.lock_class[key[5:]] for r in (*before, *after)
                      if key.startswith("lock:") and key[5:] in r.lock_class), "")
        log_eps = None if kind in (SHARE, PER_WORK) else (
            0.0 if kind == "cpu_per_work" else WAIT_EPS)
        judged.append(Judged(key, kind, unit, compare(a, b, t.alpha, 0.95, t.power), floor,
                             group=group, log_eps=log_eps))
    # Tested: every quantity but the locks (shown, not judged: which lock a wait belongs to
    # is sampled by the owner records, so a lock can go unnamed in one run and look "new" in
    # the next; the wait class holds every lock's exact wait), quantities that are zero on
    # both sides (nothing to see) and frames that cannot grow by the minimum effect (the
    # trunk, at nearly 100%).
    tested = [j for j in judged if not j.key.startswith("lock:") and j.key != WAITS_TOGETHER
              and (j.a or j.b) and not (j.kind == SHARE and j.a + j.min_effect >= 1)]
    alpha_each = t.alpha / max(1, len(tested))  # Holm's first (strictest) step
    for j in tested:
        j.tested = True
    for j in judged:
        j.cmp = compare(j.cmp.a, j.cmp.b, alpha_each, 0.95, t.power)
    for j, rej in zip(tested, holm([j.cmp.p for j in tested], t.alpha), strict=True):
        j.regression = rej and j.delta > j.min_effect
    prior = ("what the slices of each run show" if t.frame_run_excess <= 1 else
             f"{t.frame_run_excess:g}x what the slices of each run show")
    if not dof:
        between = f"one run per side: between-run noise not measured (taken to be {prior}: " \
                  "frame_run_excess)"
    else:
        between = (f"between-run noise measured over {dof:g} degrees of freedom: runs differ "
                   f"{measured:.2f}x as much as their slices predict")
        if excess > measured:
            between += (f"; the sides were not collected in turns, so what moves between "
                        f"collection times is not in that figure: taken to be {prior} "
                        "(frame_run_excess)")
    spread = [f"{k.split(':')[-1].replace('_', ' ')} {100 * c:.1f}% ({d:g} df)"
              for k, (c, d) in sorted(cv.items()) if d and c > 0 and not k.startswith("lock:")]
    priors = (f"{100 * t.run_cv:g}% for CPU per unit of work (run_cv) and "
              f"{100 * t.wait_run_cv:g}% for waits (wait_run_cv)")
    if not dof:
        run_noise = f"run-to-run spread not measurable with one run per side: taken as {priors}"
    elif not interleaved(before, after):
        run_noise = ("run-to-run spread measured in the series: " + (", ".join(spread) or
                                                                     "none above the priors")
                     + f"; sides not collected in turns: never below {priors}")
    else:
        run_noise = "run-to-run spread measured in the series: " + (", ".join(spread) or
                                                                    "none")
    method = (f"Welch's t-test, one-sided (an increase), on {len(tested)} quantities; Holm's "
              f"correction holds the chance of a false alarm at {t.alpha:g} for the whole "
              f"check; noise from the spread over each run's slices, never below sampling "
              f"error; {between}; {run_noise}; frames judged as {judged_as}")
    return judged, method


def _results(judged: list[Judged], t: Thresholds, before: list[Run] | None = None,
             after: list[Run] | None = None) -> list[Result]:
    out = []
    frames = [j for j in judged if j.key.startswith("frame:")]
    grew = sorted((j for j in frames if j.regression), key=lambda j: (-j.delta, j.name))
    if not frames:
        out.append(Result("frames", SKIPPED, "no on-CPU data"))
    elif grew:
        top = grew[0]
        out.append(Result("frames", FAIL,
                          f"{len(grew)} frame(s) grew beyond the noise; most: {top.name} "
                          f"{top.fmt(top.a)} -> {top.fmt(top.b)}, {top.interval()}", grew))
    else:
        out.append(Result("frames", PASS, f"no frame grew beyond the noise ({len(frames)} "
                          "judged)"))
    cpw = next((j for j in judged if j.key == "cpu_per_work"), None)
    if cpw is None:
        out.append(Result("cpu_per_work", SKIPPED, "work done not reported by every run in "
                          "the same unit with progress lines (docs/check.md)"))
    else:
        text = (f"on-CPU time per unit of work ({cpw.unit}): {cpw.fmt(cpw.a)} -> {cpw.fmt(cpw.b)}, "
                f"{cpw.interval()}")
        out.append(Result("cpu_per_work", FAIL if cpw.regression else PASS, text, [cpw]))
    for cls in t.wait_classes:
        j = next((x for x in judged if x.key == f"wait:{cls}"), None)
        if j is None:
            out.append(Result(f"wait_{cls}", SKIPPED, "no off-CPU data or window unknown"))
            continue
        locks = sorted((x for x in judged if x.key.startswith("lock:") and x.group == cls
                        and x.delta > 0), key=lambda x: (-x.delta, x.name))
        text = f"{cls} wait {j.fmt(j.a)} -> {j.fmt(j.b)}, {j.interval()}"
        moved = _moved_from(j, judged, t) if j.regression else ""
        if moved:
            out.append(Result(f"wait_{cls}", PASS, text + moved, [j]))
        elif j.regression:
            tail = f"; most grown lock: {locks[0].name} ({locks[0].interval()})" if locks else ""
            grown = label_growth(before or [], after or [], cls)
            if grown:
                label, x, y = grown[0]
                tail += f"; most grown wait: {cls}: {label} ({x:.3f} -> {y:.3f} s/s)"
            out.append(Result(f"wait_{cls}", FAIL, text + tail, [j, *locks[:3]]))
        else:
            out.append(Result(f"wait_{cls}", PASS, text, [j]))
    return out


def _moved_from(j: Judged, judged: list[Judged], t: Thresholds) -> str:
    """Why a wait class that grew is not a regression, or "": the judged classes together
    fell significantly (a one-sided test at ``alpha``), so the class took its time from the
    others (no more waiting for the disk, more for a latch) instead of adding to it."""
    together = next((x for x in judged if x.key == WAITS_TOGETHER), None)
    if together is None:
        return ""
    fell = compare(together.cmp.b, together.cmp.a, t.alpha)
    if fell.p > t.alpha or together.delta >= 0:
        return ""
    shrank = sorted((x for x in judged if x.key.startswith("wait:") and x.delta < 0),
                    key=lambda x: (x.delta, x.name))
    source = f", most of it {shrank[0].name} ({shrank[0].fmt(shrank[0].delta, True)})" \
        if shrank else ""
    return (f"; grew while the judged waits together fell, {together.fmt(together.a)} -> "
            f"{together.fmt(together.b)} (p={fell.p:.2g}{source}): time moved into this "
            "class from the others, not added, so not a regression")


def sensitivity(judged: list[Judged], t: Thresholds) -> Result:
    """Whether the comparison could have seen the program use ``t.sensitivity`` more CPU:
    in CPU per unit of work (when reported), or concentrated in any one of its three
    heaviest frames under half of the on-CPU time (the frames above are the program's trunk:
    their share saturates, and a change in them shows in the frames they call)."""
    cpw = next((j for j in judged if j.key == "cpu_per_work"), None)
    if cpw is not None and cpw.detectable <= t.sensitivity * cpw.a:
        return Result("sensitivity", PASS,
                      f"could have seen {100 * t.sensitivity:g}% more CPU per unit of work: "
                      f"changes from {cpw.fmt(cpw.detectable, True)} "
                      f"({cpw.relative(cpw.detectable)}) are seen")
    total = cpw.a if cpw is not None else 1.0
    frames = sorted((j for j in judged if j.key.startswith("frame:")
                     and j.a <= 0.5 * (total if j.kind == PER_WORK else 1.0)),
                    key=lambda j: (-j.a, j.name))
    if not frames:
        return Result("sensitivity", INCONCLUSIVE, "nothing to judge: no on-CPU data on "
                      "one side")
    gaps = [(j, _needed(j, t.sensitivity, total)) for j in frames[:3]]
    blind = [(j, need) for j, need in gaps if not j.detectable <= need]
    if blind:
        j, need = max(blind, key=lambda x: x[0].detectable / x[1])
        what = f"{j.name}'s share" if j.kind == SHARE else f"{j.name}'s CPU per unit of work"
        return Result("sensitivity", INCONCLUSIVE,
                      f"with these runs a change under {j.fmt(j.detectable, True)} of "
                      f"{what} would go unseen: {100 * t.sensitivity:g}% more CPU in it is "
                      f"{j.fmt(need, True)}; collect longer or add runs")
    j, need = max(gaps, key=lambda x: x[0].detectable / x[1])
    return Result("sensitivity", PASS,
                  f"could have seen {100 * t.sensitivity:g}% more CPU in any top frame: "
                  f"the least sensitive, {j.name}, shows changes from "
                  f"{j.fmt(j.detectable, True)} ({100 * t.sensitivity:g}% more CPU in it: "
                  f"{j.fmt(need, True)})")


def _needed(j: Judged, extra: float, total: float) -> float:
    """How much a frame's value grows when the program spends ``extra`` (a fraction) more
    CPU, all of it in that frame: ``extra (1 - s) / (1 + extra)`` of the on-CPU share, or
    ``extra`` of the CPU per unit of work."""
    if j.kind == SHARE:
        return extra * (1 - j.a) / (1 + extra)
    return extra * total


def complete_data(before: list[Run], after: list[Run], t: Thresholds) -> Result:
    """Losses: integrity losses and losses beyond ``max_loss_share`` make runs
    incomparable; smaller ones are named (they widen the intervals)."""
    bad: list[str] = []
    minor: list[str] = []
    for r in (*before, *after):
        counted = [(k, v["count"]) for k, v in r.meta.get("losses", {}).items()
                   if k not in t.allowed_losses and v["count"]]
        for kind, n in counted:
            if INTEGRITY.search(kind):
                bad.append(f"{r.label}: {n} {kind}")
        share = max(r.lost_on, r.lost_off) if counted else 0.0
        if share > t.max_loss_share:
            bad.append(f"{r.label}: {100 * share:.1f}% of the evidence lost (more than "
                       f"{100 * t.max_loss_share:g}%)")
        elif counted and not any(INTEGRITY.search(k) for k, _ in counted):
            minor.append(f"{r.label}: " + ", ".join(f"{n} {k}" for k, n in counted)
                         + f" ({100 * share:.1f}%)")
    if bad:
        return Result("complete_data", INCONCLUSIVE, "cannot be compared: " + "; ".join(bad))
    if minor:
        return Result("complete_data", PASS, "losses widen the intervals: " + "; ".join(minor))
    return Result("complete_data", PASS, "no losses")


def others_share(machine: Any) -> float | None:
    """The share of the machine's CPUs that neither the target nor the collect used over a
    run's window: other processes and the hypervisor's steal (``machine`` of meta.json), or
    None when the run did not record it."""
    if not isinstance(machine, dict):
        return None
    try:
        cpus = float(machine["cpus"])
        taken = float(machine["other_cpus"]) + float(machine.get("steal_cpus", 0.0))
    except (KeyError, TypeError, ValueError):
        return None
    return taken / cpus if cpus > 0 and math.isfinite(taken) else None


def same_load(before: list[Run], after: list[Run], t: Thresholds) -> Result:
    """Whether the sides were collected under the same load of the rest of the machine
    (``max_load_difference``)."""
    shares = [[others_share(r.meta.get("machine")) for r in side] for side in (before, after)]
    if any(x is None for side in shares for x in side):
        return Result("same_load", SKIPPED, "the machine's load was not recorded for every "
                      "run (runs collected by an older wallflame, or folded from files)")
    a, b = (sum(side) / len(side) for side in shares)  # type: ignore[arg-type]
    said = (f"other processes and the hypervisor took {100 * a:.0f}% of the machine's CPUs "
            f"during the baseline, {100 * b:.0f}% during the current")
    if abs(b - a) > t.max_load_difference:
        busier = "current" if b > a else "baseline"
        return Result("same_load", INCONCLUSIVE,
                      f"collected under different load: {said} (more than "
                      f"{100 * t.max_load_difference:g} points apart: max_load_difference); "
                      f"a program's profile moves with its machine's load, so the {busier}'s "
                      "could differ with no change to the code: collect both sides under the "
                      "same load")
    return Result("same_load", PASS, said)


def same_collectors(before: list[Run], after: list[Run], t: Thresholds) -> Result:
    ref = before[0]
    diffs = []
    for r in (*before[1:], *after):
        for d in collector_mismatch(ref.meta, r.meta, t):
            diffs.append(f"{ref.label} vs {r.label}: {d}")
    if diffs:
        return Result("same_collectors", INCONCLUSIVE,
                      "runs collected differently: " + "; ".join(diffs[:4]))
    return Result("same_collectors", PASS, "every run collected the same way")


def collector_mismatch(a: dict[str, Any], b: dict[str, Any], t: Thresholds) -> list[str]:
    out = []
    if a["unit"] != b["unit"]:
        out.append(f"unit {a['unit']} vs {b['unit']}")
    kinds = [sorted(k for k, v in m["samples"].items() if v) for m in (a, b)]
    if kinds[0] != kinds[1]:
        out.append(f"evidence {','.join(kinds[0]) or 'none'} vs {','.join(kinds[1]) or 'none'}")
    for key in sorted((a["rates"].keys() | b["rates"].keys()) - set(ADAPTIVE_RATES)):
        ra, rb = a["rates"].get(key), b["rates"].get(key)
        if ra is None or rb is None or abs(ra - rb) > t.rate_tolerance * max(abs(ra), abs(rb)):
            out.append(f"{key} {ra} vs {rb}")
    fa = [sorted({(s.get("format"), s.get("event")) for s in m["sources"]}, key=str)
          for m in (a, b)]
    if fa[0] != fa[1]:
        out.append("sources " + " vs ".join(",".join(str(x[0]) + (f":{x[1]}" if x[1] else "")
                                                     for x in f) for f in fa))
    return out


__all__ = ["FAIL", "INCONCLUSIVE", "PASS", "SKIPPED", "Estimate", "Judged", "Result",
           "Thresholds", "Verdict", "judge", "judge_profiles", "load_thresholds"]
