"""The CI gate: a current run against a baseline, judged by thresholds, never on partial data.

Verdicts and exit codes (``wallflame.errors``): ``pass`` 0, ``regression`` 1 (a threshold was
exceeded beyond the noise floor), ``inconclusive`` 7 (too few samples, lost or truncated data,
or the two runs were collected differently: their numbers cannot be compared honestly).  An
inconclusive check wins over a regression: a regression seen on partial data is reported but
not trusted.

Thresholds have defaults (``Thresholds``), can be set in ``.wallflame-check.toml`` under
``[thresholds]`` and on the command line (``-t key=value``), in that order of precedence.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wallflame.errors import EXIT_INCONCLUSIVE, EXIT_OK, EXIT_REGRESSION, InputError
from wallflame.profile import OFF, ON, WAIT_CLASSES
from wallflame.report.diff import RATE, SHARE, Change, Diff

CONFIG_NAME = ".wallflame-check.toml"
#: Losses that say how much data is missing only vaguely (a file cut short, a perf chunk, a
#: target that exited early, unreadable input): never tolerated, however small their count.
INTEGRITY = re.compile(r"truncated last|malformed|unreadable|unrecognised|chunk|bad |exited",
                       re.I)
#: Rates that adapt during collection (the snapshot rate halves when snapshots pause the
#: target too long); snapshots are weighted by the time they stand for, so a different rate
#: changes the noise floor (counted) but not the scale.
ADAPTIVE_RATES = ("pmp_hz",)
#: Kernel frames that a timer interrupt or a preemption puts on top of any stack.
PREEMPTION_FRAMES = (r"^asm_sysvec_", r"^sysvec_", r"^__sysvec_", r"^asm_common_interrupt$",
                     r"^irqentry_", r"^irq_exit", r"^exit_to_user_mode",
                     r"^preempt_schedule", r"^_?_?schedule$", r"^finish_task_switch")

PASS = "pass"
FAIL = "regression"
INCONCLUSIVE = "inconclusive"
SKIPPED = "skipped"
EXIT_CODES = {PASS: EXIT_OK, FAIL: EXIT_REGRESSION, INCONCLUSIVE: EXIT_INCONCLUSIVE}


@dataclass
class Thresholds:
    """What counts as a regression.  Every limit must also clear the noise floor.

    frame_share_pp:  on-CPU inclusive share of any one frame may grow by at most this many
                     percentage points (default 5.0; on a quiet dedicated runner 1-2 catches
                     smaller regressions: on a shared 2-core machine, runs of the same code
                     moved kernel and ``[unknown]`` frames by up to 3 points).
    wait_s_per_s:    off-CPU seconds per second of window, per wait class, may grow by at most
                     this much (default 0.25: a quarter of one thread) ...
    wait_relative:   ... or by at most this fraction of the baseline (default 1.0: double);
                     a class fails only when it exceeds both.  (Scheduler off-CPU time is
                     exact, so its sampling noise is small, but contention is not repeatable:
                     identical 4 s runs of samples/bin/mix on a shared 2-core machine waited
                     0.17 to 0.39 s per s on its mutex; these limits sit above that spread.)
    wait_classes:    the wait classes judged (default ``mutex``, ``rwlock``, ``io``: contention
                     and I/O; ``condvar``, ``poll`` and ``sleep`` are mostly waiting for work
                     or for time, which grows whenever a run is less busy).
    mutex_share_pp:  mutex wait as a share of all thread time may grow by at most this many
                     percentage points (default 10.0; the same identical runs spread over 4.4%
                     to 10.3%).
    cpu_per_work_relative: on-CPU time per unit of work (when both runs record work done in
                     ``meta.extra["work"]``) may grow by at most this fraction (default 0.10).
    ignore_frames:   regular expressions (searched) for frames ``frame_share`` does not judge;
                     default: the kernel's interrupt and preemption entry points, whose share
                     measures how busy the machine was, not the program (identical runs on a
                     shared 2-core machine moved ``asm_sysvec_apic_timer_interrupt`` by up to
                     7 points).  They are still shown in the diff.
    min_samples:     on-CPU samples each side needs, else inconclusive (default 500).
    noise_k:         changes within this many standard errors are noise (default 3.0).
    rate_tolerance:  sampling rates of the two runs may differ by this fraction before the runs
                     count as collected differently (default 0.10).
    max_loss_share:  losses of single samples (lost perf events, frameless samples, failed
                     snapshots) up to this share of a side's evidence are reported but
                     tolerated (default 0.005: they cannot move a share by more than half a
                     point, a quarter of the smallest threshold); 0 makes any loss
                     inconclusive.  Truncated or unreadable input, lost perf chunks and an
                     early target exit (``INTEGRITY``) are never tolerated.
    allowed_losses:  kinds of loss that never make the check inconclusive (default none).
    top:             how many regressed frames the summary names (default 5).
    """

    frame_share_pp: float = 5.0
    wait_s_per_s: float = 0.25
    wait_relative: float = 1.0
    wait_classes: list[str] = field(default_factory=lambda: ["mutex", "rwlock", "io"])
    mutex_share_pp: float = 10.0
    cpu_per_work_relative: float = 0.10
    ignore_frames: list[str] = field(default_factory=lambda: list(PREEMPTION_FRAMES))
    min_samples: int = 500
    noise_k: float = 3.0
    rate_tolerance: float = 0.10
    max_loss_share: float = 0.005
    allowed_losses: list[str] = field(default_factory=list)
    top: int = 5

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
        if not isinstance(new, list) and new < 0:
            raise InputError(f"{origin}: {key} must not be negative", "fix the value")
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
            raise InputError(f"-t {item!r}: expected KEY=VALUE", "e.g. -t frame_share_pp=5")
        t.set(key.strip(), value.strip(), "command line")
    return t


@dataclass
class Result:
    """One threshold's outcome: a JUnit test case and a row of the summary."""

    name: str
    status: str
    message: str
    changes: list[Change] = field(default_factory=list)


@dataclass
class Verdict:
    status: str
    results: list[Result]
    diff: Diff
    thresholds: Thresholds

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]


def judge(diff: Diff, t: Thresholds) -> Verdict:
    results = [*quality(diff, t), frame_share(diff, t), *wait_classes(diff, t),
               mutex_share(diff, t), cpu_per_work(diff, t)]
    if any(r.status == INCONCLUSIVE for r in results):
        status = INCONCLUSIVE
    elif any(r.status == FAIL for r in results):
        status = FAIL
    else:
        status = PASS
    return Verdict(status, results, diff, t)


def quality(diff: Diff, t: Thresholds) -> list[Result]:
    """Sample counts, losses and collector agreement: the preconditions of every other test."""
    sides = (diff.before, diff.after)
    low = [f"{s.label} has {s.n_on} on-CPU samples" for s in sides if s.n_on < t.min_samples]
    samples = Result("min_samples", INCONCLUSIVE if low else PASS,
                     f"{'; '.join(low)} (need {t.min_samples})" if low else
                     f"{diff.before.n_on} and {diff.after.n_on} on-CPU samples "
                     f"(need {t.min_samples})")
    lost: list[str] = []
    minor: list[str] = []
    for side, meta in zip(sides, diff.meta, strict=True):
        counted = [(k, v["count"]) for k, v in meta["losses"].items()
                   if k not in t.allowed_losses and v["count"]]
        total = sum(n for _, n in counted)
        evidence = side.n_on + side.n_off
        tolerated = total <= t.max_loss_share * evidence and not any(
            INTEGRITY.search(k) for k, _ in counted)
        for kind, n in counted:
            text = f"{side.label}: {n} {kind}"
            (minor if tolerated else lost).append(text)
        if counted and not tolerated and total > t.max_loss_share * evidence:
            lost.append(f"{side.label}: {total} lost of {evidence + total} "
                        f"({100 * total / max(1, evidence + total):.1f}%, tolerated "
                        f"{100 * t.max_loss_share:g}%)")
    note = f" (tolerated, under {100 * t.max_loss_share:g}%: {'; '.join(minor)})" if minor else ""
    losses = Result("complete_data", INCONCLUSIVE if lost else PASS,
                    "partial data: " + "; ".join(lost) + note if lost else
                    "no losses on either side" + note)
    diffs = collector_mismatch(diff, t)
    collectors = Result("same_collectors", INCONCLUSIVE if diffs else PASS,
                        "runs collected differently: " + "; ".join(diffs) if diffs else
                        "both runs collected the same way")
    return [samples, losses, collectors]


def collector_mismatch(diff: Diff, t: Thresholds) -> list[str]:
    a, b = diff.meta
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


def pp(x: float) -> str:
    return f"{100 * x:.2f}%"


def frame_share(diff: Diff, t: Thresholds) -> Result:
    if not (diff.before.total_on and diff.after.total_on):
        return Result("frame_share", SKIPPED, "no on-CPU data on one side")
    norm = diff.with_mode(SHARE)
    ignore = re.compile("|".join(f"(?:{p})" for p in t.ignore_frames)) if t.ignore_frames \
        else None
    grew = [c for c in diff.functions(ON, True, norm, grew_by=t.frame_share_pp / 100)
            if c.significant and not (ignore and ignore.search(c.name))]
    grew.sort(key=lambda c: (-c.delta, c.name))
    if grew:
        top = grew[0]
        return Result("frame_share", FAIL,
                      f"{len(grew)} frame(s) grew by more than {t.frame_share_pp:g} points of "
                      f"on-CPU share; most: {top.name} {pp(top.a)} -> {pp(top.b)} "
                      f"({100 * top.delta:+.2f} points)", grew[:t.top])
    return Result("frame_share", PASS,
                  f"no frame's on-CPU share grew by more than {t.frame_share_pp:g} points "
                  "beyond the noise floor")


def wait_classes(diff: Diff, t: Thresholds) -> list[Result]:
    out = []
    windows = diff.before.window_s > 0 and diff.after.window_s > 0
    changes = {c.name: c for c in diff.class_changes(diff.with_mode(RATE))} if windows else {}
    for cls in t.wait_classes:
        name = f"wait_{cls}"
        if not (diff.before.total_off or diff.after.total_off):
            out.append(Result(name, SKIPPED, "no off-CPU data on either side"))
            continue
        if not windows:
            out.append(Result(name, SKIPPED, "window length unknown: per-second rates "
                              "need run directories"))
            continue
        c = changes[cls]
        limit = max(t.wait_s_per_s, t.wait_relative * c.a)
        verb = f"{cls} wait {c.a:.3f} -> {c.b:.3f} s per s of window ({c.delta:+.3f})"
        if c.delta > limit and c.significant:
            locks = [x for x in diff.lock_changes(diff.with_mode(RATE))
                     if x.delta > 0] if cls in ("mutex", "rwlock") else []
            tail = f"; most grown lock: {locks[0].name} ({locks[0].delta:+.3f})" if locks else ""
            out.append(Result(name, FAIL, f"{verb}, limit +{limit:.3f}{tail}",
                              [c, *locks[:t.top]]))
        else:
            noise = "" if c.significant or not c.delta else ", within noise"
            out.append(Result(name, PASS, f"{verb}, limit +{limit:.3f}{noise}", [c]))
    return out


def mutex_share(diff: Diff, t: Thresholds) -> Result:
    if not (diff.before.total_off or diff.after.total_off):
        return Result("mutex_share", SKIPPED, "no off-CPU data on either side")
    norm = diff.with_mode(SHARE)
    c = next(x for x in diff.class_changes(norm) if x.name == "mutex")
    verb = f"mutex wait {pp(c.a)} -> {pp(c.b)} of all thread time ({100 * c.delta:+.2f} points)"
    if c.delta * 100 > t.mutex_share_pp and c.significant:
        locks = [x for x in diff.lock_changes(norm) if x.delta > 0]
        tail = f"; most grown lock: {locks[0].name} ({pp(locks[0].a)} -> {pp(locks[0].b)})" \
            if locks else ""
        return Result("mutex_share", FAIL, f"{verb}, limit {t.mutex_share_pp:g} points{tail}",
                      [c, *locks[:t.top]])
    return Result("mutex_share", PASS, f"{verb}, limit {t.mutex_share_pp:g} points", [c])


def cpu_per_work(diff: Diff, t: Thresholds) -> Result:
    wa, wb = (m.get("work") for m in diff.meta)
    if not (isinstance(wa, dict) and isinstance(wb, dict)):
        return Result("cpu_per_work", SKIPPED, "work done not recorded by both runs")
    try:
        ua, ub = str(wa.get("unit", "")), str(wb.get("unit", ""))
        na, nb = float(wa["count"]), float(wb["count"])
    except (KeyError, TypeError, ValueError):
        return Result("cpu_per_work", INCONCLUSIVE, "work done recorded in an unreadable form")
    if ua != ub or na <= 0 or nb <= 0:
        return Result("cpu_per_work", INCONCLUSIVE,
                      f"work done not comparable: {na:g} {ua} vs {nb:g} {ub}")
    a, b = diff.before.total_on / na, diff.after.total_on / nb
    rel = (b - a) / a if a else 0.0
    # relative sampling error of each side's CPU total is 1/sqrt(n)
    se = sum(1 / max(1, s.n_on) for s in (diff.before, diff.after)) ** 0.5
    unit = "ns" if diff.before.unit == "ns" else diff.before.unit
    verb = (f"on-CPU time per unit of work ({ua or 'units'}): {a:.1f} -> {b:.1f} {unit} "
            f"({100 * rel:+.1f}%)")
    if rel > t.cpu_per_work_relative and rel > t.noise_k * se:
        return Result("cpu_per_work", FAIL,
                      f"{verb}, limit +{100 * t.cpu_per_work_relative:g}%")
    return Result("cpu_per_work", PASS, f"{verb}, limit +{100 * t.cpu_per_work_relative:g}%")


__all__ = ["FAIL", "INCONCLUSIVE", "OFF", "PASS", "SKIPPED", "Result", "Thresholds",
           "Verdict", "judge", "load_thresholds"]
