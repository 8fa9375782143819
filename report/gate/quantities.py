"""What ``wallflame check`` judges: each run's quantities with their within-run noise, and a
side's (a series of runs') estimates.

A ``Run`` is one run directory (or capture) reduced to the totals the gate needs: on-CPU
weight per function (inclusive), off-CPU weight per wait class and per lock, the window, the
evidence counts, the work done and, when the run directory has them, the per-slice figures of
``wallflame.fold.slices`` (``RUN/slices.json``).  ``run_quantities`` turns a run into
per-quantity ``Estimate``s:

``frame:NAME``   a function's inclusive on-CPU time, per unit of work when both sides report
                 work (``per_work``), else as a share of the side's on-CPU time (``share``);
``cpu_per_work`` all on-CPU time per unit of work;
``wait:CLASS``   off-CPU seconds per second of window in a wait class;
``lock:NAME``    seconds per second of window spent waiting for one lock.

Each estimate's variance is the spread over the run's slices (batch means), never below the
sampling error its sample count implies; quantities without per-slice figures (small
functions, locks) take the sampling error scaled by the run's measured overdispersion (how
much more the slices spread than sampling explains, pooled over the functions that have
them).  Evidence lost during collection widens the variance: the lost fraction ``L`` of a run's
evidence may have differed from the rest by as much as the quantity itself, an error of at
most ``L x`` (``L min(x, 1 - x)`` for a share), taken as uniform (``widen_for_loss``).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from wallflame.locks.lockshare import lock_name
from wallflame.profile import OFF, WAIT_CLASSES, Profile
from wallflame.report.diff.normalise import evidence
from wallflame.report.gate.stats import (
    Estimate,
    batch_ratio,
    combine_runs,
    floor_variance,
    pooled_excess,
    widen_for_loss,
    within_run,
)
from wallflame.report.sublabels import rule_weights
from wallflame.waitclasses import FALLBACK

SHARE = "share"
PER_WORK = "per_work"
RATE = "s_per_s"
CPU_PER_WORK = "cpu_per_work"
WORK_FILE = "work.json"


@dataclass
class Run:
    """One run's totals (see the module docstring)."""

    label: str
    unit: str
    window_s: float
    on: int
    n_on: int
    n_off: int
    functions: dict[str, int]
    classes: dict[str, int]
    locks: dict[str, int]
    lock_class: dict[str, str]
    work: float | None
    work_unit: str
    slices: dict[str, Any] | None
    lost_on: float   # share of the on-CPU evidence lost
    lost_off: float  # share of the off-CPU evidence lost
    meta: dict[str, Any] = field(default_factory=dict)
    #: off-CPU weight per (wait class, the label of the rule that classified it)
    labels: dict[tuple[str, str], int] = field(default_factory=dict)


def read_work_file(run_dir: str) -> dict[str, Any] | None:
    """``RUN/work.json``: ``{"work": N, "unit": "requests"}`` written by whoever knows the
    work done during the window (a load generator, a benchmark), optionally with
    ``"progress": [[t_ns, work so far], ...]`` (CLOCK_MONOTONIC) for per-slice figures."""
    path = os.path.join(run_dir, WORK_FILE)
    if not os.path.exists(path):
        return None
    from wallflame.errors import InputError

    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{path}: unreadable: {e}",
                         'write {"work": N, "unit": "requests"}') from None
    w = d.get("work") if isinstance(d, dict) else None
    if not isinstance(w, int | float) or isinstance(w, bool) or not math.isfinite(w) or w < 0:
        raise InputError(f"{path}: no numeric \"work\"", 'write {"work": N, "unit": "requests"}')
    return d  # type: ignore[no-any-return]


def make_run(label: str, profile: Profile, meta: dict[str, Any],
             slices: dict[str, Any] | None = None, work: dict[str, Any] | None = None,
             cut: re.Pattern[str] | None = None) -> Run:
    """Reduce a loaded profile (and its run directory's extras) to a ``Run``.  ``cut``
    matches frames that are not the program's own (interrupt entry points): such a frame
    and every frame it calls are left out of the function totals, their time staying with
    the function they interrupted."""
    functions: dict[str, int] = {}
    classes = dict.fromkeys(WAIT_CLASSES, 0)
    locks: dict[str, int] = {}
    by_class: dict[str, dict[str, int]] = {}
    on = off = 0
    for key, w in profile.stacks.items():
        if key.state == OFF:
            off += w
            cls = key.wait if key.wait in classes else FALLBACK
            classes[cls] += w
            if key.lock:
                name = lock_name(key.lock)
                locks[name] = locks.get(name, 0) + w
                per = by_class.setdefault(name, {})
                per[cls] = per.get(cls, 0) + w
            continue
        on += w
        frames = key.frames
        if cut is not None:
            frames = _cut(frames, cut)
        for f in set(frames):
            functions[f] = functions.get(f, 0) + w
    n_on, n_off = evidence(profile, on, off)
    w_info = work if work is not None else meta.get("work")
    count: float | None = None
    unit = ""
    if isinstance(w_info, dict):
        raw = w_info.get("count", w_info.get("work"))
        if isinstance(raw, int | float) and not isinstance(raw, bool) and raw > 0:
            count, unit = float(raw), str(w_info.get("unit") or "units")
    if slices is not None and work is not None and isinstance(work.get("progress"), list):
        slices = _with_progress(slices, work["progress"])
    if count is not None and slices is not None and slices.get("work") and sum(slices["work"]):
        count = float(sum(slices["work"]))  # the work done within the window, not all of it
    lost = float(sum(v["count"] for v in meta.get("losses", {}).values()))
    # Which evidence the losses hit: known from the per-slice figures (lost records in the
    # perf and the scheduler scripts), else counted against all of a run's evidence.
    share_on = share_off = lost / max(1.0, n_on + n_off + lost)
    if slices is not None and isinstance(slices.get("lost"), dict):
        lost_on = min(lost, float(slices["lost"].get("perf", 0)))
        share_on = lost_on / max(1.0, n_on + lost_on)
        share_off = (lost - lost_on) / max(1.0, n_off + lost - lost_on)
    return Run(label, profile.meta.unit, profile.meta.window_ns / 1e9, on, n_on, n_off,
               functions, classes, locks,
               {k: max(v, key=lambda c: v[c]) for k, v in by_class.items()},
               count, unit, slices, share_on, share_off, meta, rule_weights(profile))


def _cut(frames: tuple[str, ...], cut: re.Pattern[str]) -> tuple[str, ...]:
    for i, f in enumerate(frames):
        if cut.search(f):
            return frames[:i]
    return frames


def _with_progress(slices: dict[str, Any], progress: list[Any]) -> dict[str, Any]:
    from wallflame.progress import work_in_slices

    pts = [(int(p[0]), float(p[1])) for p in progress
           if isinstance(p, list) and len(p) == 2
           and all(isinstance(x, int | float) and not isinstance(x, bool) for x in p)]
    work = work_in_slices(sorted(pts), int(slices["t0_ns"]), int(slices["t1_ns"]),
                          int(slices["k"]))
    return {**slices, "work": work} if work is not None else slices


def frame_measure(before: Sequence[Run], after: Sequence[Run]) -> str:
    """``per_work`` when every run reports work in the same unit, else ``share``."""
    units = {r.work_unit for r in (*before, *after) if r.work}
    if len(units) == 1 and all(r.work for r in (*before, *after)):
        return PER_WORK
    return SHARE


def _nominal(run: Run, f: int, measure: str) -> float:
    """Sampling variance of a function's value from the run's sample count."""
    if run.on <= 0 or run.n_on <= 0:
        return math.inf
    if measure == PER_WORK and run.work:
        x = f / run.work
        n_f = max(1.0, run.n_on * f / run.on)
        return x * x / n_f
    p = f / run.on
    return max(p * (1 - p), 1.0 / run.n_on) / run.n_on


def frame_estimates(run: Run, names: Sequence[str], measure: str) -> dict[str, Estimate]:
    """Each named function's value in this run, with its within-run variance
    (``within_run``: its own spread over the slices, or the run's pooled overdispersion)."""
    total = run.work if measure == PER_WORK else run.on
    if not total:
        return {}
    s = run.slices
    den = (s.get("work") if measure == PER_WORK else s["on"]) if s else None
    # every function the slices keep informs the pooled figure, judged or not
    pool = sorted(set(names) | set(s["functions"] if s else ()))
    values = [run.functions.get(n, 0) / total for n in pool]
    nominal = [_nominal(run, max(run.functions.get(n, 0), 1), measure) for n in pool]
    batches = []
    for n in pool:
        per = s["functions"].get(n) if s and den else None
        batches.append(batch_ratio(per, den) if per is not None and den is not None
                       and run.functions.get(n) else None)
    out = {}
    for n, e in zip(pool, within_run(batches, nominal, values), strict=True):
        if n in names:
            # lost on-CPU samples: the lost part may have differed from the rest by as much
            # as the quantity itself (a share: by as much as it could move)
            bound = run.lost_on * (min(e.value, 1 - e.value) if measure == SHARE else e.value)
            out[n] = widen_for_loss(e, bound)
    return out


def label_growth(before: Sequence[Run], after: Sequence[Run], cls: str
                 ) -> list[tuple[str, float, float]]:
    """The rules of wait class ``cls`` whose waits grew, the most grown first: (label, seconds
    per second of window before, after).  Shown beside a failed class to name the wait (an
    InnoDB latch, a row lock) when no lock was identified; not judged."""
    def rate(runs: Sequence[Run]) -> dict[str, float]:
        window = sum(r.window_s for r in runs)
        acc: dict[str, float] = {}
        for r in runs:
            if r.unit != "ns":
                return {}
            for (c, label), w in r.labels.items():
                if c == cls:
                    acc[label] = acc.get(label, 0.0) + w / 1e9
        return {k: v / window for k, v in acc.items()} if window > 0 else {}

    a, b = rate(before), rate(after)
    grown = [(k, a.get(k, 0.0), b[k]) for k in b if b[k] > a.get(k, 0.0)]
    return sorted(grown, key=lambda x: (x[1] - x[2], x[0]))


def work_rate(runs: Sequence[Run]) -> float | None:
    """Work per second of window over the runs (``None`` unless every one reports work)."""
    if not runs or not all(r.work and r.window_s > 0 for r in runs):
        return None
    return sum(float(r.work or 0) for r in runs) / sum(r.window_s for r in runs)


def cpu_per_work(run: Run) -> Estimate | None:
    """On-CPU time per unit of work, with its spread over the slices; ``None`` without work
    per slice (a program that prints only a total: how much CPU per unit of work moves within
    a run cannot be told, and sampling error alone would understate it by far)."""
    s = run.slices
    if not run.work or run.on <= 0 or not (s and s.get("work")):
        return None
    value = run.on / run.work
    nominal = value * value / max(1, run.n_on)
    est = batch_ratio(s["on"], s["work"])
    if est is None:
        return None
    e = floor_variance(Estimate(value, est.var, est.df), nominal)
    return widen_for_loss(e, run.lost_on * value)


#: The judged wait classes summed (``wait_estimates``): a class that grew while they all
#: together fell took time from the others (a server no longer waiting for its disk waits
#: for its latches instead), which is not a regression of the waits.
WAITS_TOGETHER = "waits:judged classes together"


def wait_estimates(run: Run, classes: Sequence[str], locks: Sequence[str],
                   rate_ref: float | None = None) -> dict[str, Estimate]:
    """Wait classes and locks in seconds per second of window (``wait:C``, ``lock:N``), and
    the judged classes together (``WAITS_TOGETHER``, when more than one is judged).

    ``rate_ref`` (work per second): per unit of work instead, expressed as seconds per
    second at that rate of work (``wait / work x rate_ref``), so that a run that did twice
    the work in its window is not judged on waits that only grew with the work (the unit,
    the floor ``WAIT_EPS`` and the minimum effect stay those of seconds per second)."""
    out: dict[str, Estimate] = {}
    if run.window_s <= 0 or run.unit != "ns":
        return out
    window_ns = run.window_s * 1e9
    if rate_ref and run.work:
        window_ns = run.work / rate_ref * 1e9
    total_off = sum(run.classes.values())
    relvar: dict[str, float] = {}
    together = [0.0, 0.0]  # the judged classes summed: value, variance
    s = run.slices
    for cls in WAIT_CLASSES:
        w = run.classes.get(cls, 0)
        x = w / window_ns
        n_events = max(1.0, run.n_off * w / total_off) if total_off else 1.0
        rv = 1.0 / n_events
        per = (s.get("wait") or {}).get(cls) if s else None
        if per is not None and sum(per) > 0:
            est = batch_ratio(per, [1.0] * len(per))
            if est is not None and est.value > 0:
                rv = max(rv, est.var / est.value ** 2)
        relvar[cls] = rv
        if cls in classes:
            out[f"wait:{cls}"] = widen_for_loss(Estimate(x, x * x * rv, math.inf),
                                                run.lost_off * x)
            together[0] += x
            together[1] += x * x * rv
    if len(classes) > 1:
        out[WAITS_TOGETHER] = widen_for_loss(Estimate(together[0], together[1], math.inf),
                                             run.lost_off * together[0])
    for name in locks:
        w = run.locks.get(name, 0)
        x = w / window_ns
        rv = relvar.get(run.lock_class.get(name, "mutex"), 1.0)
        out[f"lock:{name}"] = widen_for_loss(Estimate(x, x * x * rv, math.inf),
                                             run.lost_off * x)
    return out


def side_estimates(runs: Sequence[Run], per_run: Sequence[dict[str, Estimate]],
                   excess: float) -> dict[str, Estimate]:
    """Combine a side's runs quantity by quantity (``combine_runs``); a quantity missing
    from a run counts as zero there (the function did not run)."""
    names = sorted({k for d in per_run for k in d})
    out = {}
    for name in names:
        ests = [d.get(name) or Estimate(0.0, _zero_var(d, name), math.inf) for d in per_run]
        # frames: between-run noise pooled over all frames; the rest carry their own
        # run-to-run noise already (``add_run_noise``)
        out[name] = combine_runs(ests, excess if name.startswith("frame:") else 1.0,
                                 own_spread=False)
    del runs
    return out


def add_run_noise(per_side: Sequence[Sequence[dict[str, Estimate]]],
                  prior_cv: Callable[[str], float], eps: Callable[[str], float],
                  at_least_prior: bool = False
                  ) -> tuple[dict[str, tuple[float, float]], list[list[dict[str, Estimate]]]]:
    """CPU per unit of work and wait classes, on a log scale, with how much they move between
    runs of the same program added (CPU frequency, caches, neighbours, contention: the slices
    of one run do not see it, and it is proportional to the quantity).

    Each run's estimate becomes ``log(x + eps)`` with variance ``log(1 + var / (x + eps)^2)``
    (a log-normal quantity's; the delta method's ``var / (x + eps)^2`` for small spreads)
    plus the run-to-run variance: measured as the variance of the logs of the
    runs of the sides' series (pooled over both sides, with its degrees of freedom) when a
    side has two or more runs, else ``prior_cv(name)^2``; with ``at_least_prior`` (sides
    collected at different times: what moves between collection times is not in the spread within
    a side), never below the prior.  Returns, per quantity, the coefficient of variation
    used and its degrees of freedom (0: the prior), and the estimates."""
    names = {k for side in per_side for d in side for k in d if not k.startswith("frame:")}
    used: dict[str, tuple[float, float]] = {}
    out = [[dict(d) for d in side] for side in per_side]
    for name in sorted(names):
        e0 = eps(name)
        ss = 0.0
        dof = 0
        for side in per_side:
            logs = [math.log(d[name].value + e0) for d in side
                    if name in d and d[name].value + e0 > 0]
            if len(logs) < 2:
                continue
            mean = sum(logs) / len(logs)
            ss += sum((v - mean) ** 2 for v in logs)
            dof += len(logs) - 1
        cv2, df = (ss / dof, float(dof)) if dof else (prior_cv(name) ** 2, math.inf)
        if dof and at_least_prior and prior_cv(name) ** 2 > cv2:
            cv2, df, dof = prior_cv(name) ** 2, math.inf, 0
        used[name] = (math.sqrt(cv2), float(dof))
        for side in out:
            for d in side:
                e = d.get(name)
                if e is None:
                    continue
                x = e.value + e0
                if x <= 0:
                    del d[name]
                    continue
                # the variance of log(x) for a log-normal quantity with this relative
                # variance: the delta method's var / x^2 for small spreads, and not
                # above it for large ones (a wait whose slices move by 150% has a log
                # variance of 1.18, not 2.25)
                within = math.log1p(e.var / x ** 2)
                var = within + cv2
                # Welch-Satterthwaite for the sum of the two parts
                parts = (within ** 2 / e.df if math.isfinite(e.df) and e.df > 0 else 0.0) \
                    + (cv2 ** 2 / df if math.isfinite(df) and df > 0 else 0.0)
                d[name] = Estimate(math.log(x), var, var ** 2 / parts if parts > 0 else math.inf)
    return used, out


def _zero_var(d: dict[str, Estimate], name: str) -> float:
    """A quantity a run did not see: zero, with the variance of a value of one sample."""
    others = [e.var for k, e in d.items() if k.split(":")[0] == name.split(":")[0] and e.var > 0]
    return min(others) if others else 0.0


def interleaved(before: Sequence[Run], after: Sequence[Run]) -> bool:
    """Whether the two sides were collected in turns (each side's first run started before
    the other side's last): then what moves between collection times is in the spread within each
    side too.  False when a run does not say when it was collected."""
    raw = [[r.meta.get("window_start_ns") for r in side] for side in (before, after)]
    if any(not isinstance(x, int) or not x for side in raw for x in side):
        return False
    a, b = ([int(x) for x in side] for side in raw)  # type: ignore[arg-type]
    return len(a) > 1 and len(b) > 1 and max(min(a), min(b)) < min(max(a), max(b))


def between_excess(series: Sequence[Sequence[dict[str, Estimate]]]) -> tuple[float, float]:
    """The between-run excess (``pooled_excess``) of the frames, over every series given."""
    per_quantity = []
    for per_run in series:
        if len(per_run) < 2:
            continue
        names = {k for d in per_run for k in d if k.startswith("frame:")}
        for name in names:
            if all(name in d for d in per_run):
                per_quantity.append([d[name] for d in per_run])
    return pooled_excess(per_quantity)


__all__ = [
    "CPU_PER_WORK",
    "PER_WORK",
    "RATE",
    "SHARE",
    "WAITS_TOGETHER",
    "WORK_FILE",
    "Run",
    "add_run_noise",
    "between_excess",
    "cpu_per_work",
    "frame_estimates",
    "frame_measure",
    "interleaved",
    "label_growth",
    "make_run",
    "read_work_file",
    "side_estimates",
    "wait_estimates",
    "work_rate",
]
