"""How well a thread's blocked time is split over wait classes when only one switch in N has
a stack, on a run that has a stack at every switch (so that the exact split is known).

The run's scheduler intervals are read as ``wallflame finish`` reads them.  Then, for each N
and each of N phases, one blocked interval in N of each thread keeps its stack (standing for
N) and the others lose it, and the split is made again by the code ``finish`` runs
(``SampledSched._clip`` and ``sched_split.blocked_split``), three ways:

* ``pooled``: every sampled interval stands for its thread's others, in proportion to period x
  duration (the split before the stops were used);
* ``marks``: the unsampled intervals a snapshot's stop ended or restarted take the snapshot's
  stack, and the rest is split as ``pooled`` (needs a run whose ``snapshots.log`` has the
  stops' instants);
* ``strata``: the default: as ``marks``, then the rest stratum by stratum of the intervals'
  durations, over the sampled and the known intervals of each stratum
  (``sched_split.split_strata``).

Printed per N: the error of the per-class totals of the threads with a stack (in points of
their blocked time; mean and largest over the phases), and the median over threads of each
thread's largest per-class error (mean over the phases).

    .venv/bin/python benchmarks/lab/split_estimator.py RUN [--every 10,50,200]

RUN: a run directory collected with a stack at every switch (a launched command, or
``--sched-stack-hz 0``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from array import array
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from wallflame import stops  # noqa: E402
from wallflame.assemble.folding import Folding  # noqa: E402
from wallflame.assemble.profile import _fold, _snapshot_format, logs  # noqa: E402
from wallflame.fold import FoldOptions  # noqa: E402
from wallflame.fold.perf import sampled_switches as ss  # noqa: E402
from wallflame.fold.perf import sched_split  # noqa: E402
from wallflame.profile import Profile  # noqa: E402
from wallflame.rundir import SNAPSHOT_LOG, read_capture  # noqa: E402
from wallflame.timeline import LOG_BLOCKED  # noqa: E402


def splits(sched: ss.SampledSched, how: str) -> dict[int, tuple[dict[str, int], int]]:
    """Per thread: blocked ns per class, and whether any stack of its own was sampled."""
    out = {}
    for tid, th in sched.threads.items():
        if not th.blocked:
            continue
        if how == "pooled":
            parts = sorted(th.stacks.items())
            split = sched_split.split_blocked(parts, th.blocked, 0) if th.sampled_weight else []
        elif how == "marks":
            strata, th.strata = th.strata, None  # the split without the strata
            split, _ = sched_split.blocked_split(th)
            th.strata = strata
        else:
            split, _ = sched_split.blocked_split(th)
        per: dict[str, int] = {}
        for key, ns in split:
            c = sched._class_of(key)
            per[c] = per.get(c, 0) + ns
        out[tid] = (per, th.sampled_weight)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("run", type=Path)
    ap.add_argument("--every", default="10,50,200")
    a = ap.parse_args()
    raw = a.run / "raw"
    cap = read_capture(raw)
    marks: list[object] = []
    for log in logs(raw, SNAPSHOT_LOG):
        one = _fold(log, _snapshot_format(cap.options.pmp_backend), [],
                    FoldOptions(stop_marks=True))
        if one is not None:
            marks.extend(one.meta.extra.pop(stops.STOP_MARKS, None) or [])
    folding = Folding.of_capture(raw, cap)
    folding.fold_rest(None)
    folding.close()
    folding.folder.profiles(raw, cap, folding.folded.done)
    sched = folding.folder.sched
    window = cap.window.on_perf_clock() or (-(1 << 62), 1 << 62)
    log = sched.log
    sample0, period0 = array("l", log.sample), array("q", log.period)
    sched.marks = {}
    sched._clip(Profile(), *window)
    exact = {tid: per for tid, (per, _) in splits(sched, "marks").items()}
    unsampled = sum(per.get("unsampled", 0) for per in exact.values())
    total = sum(sum(per.values()) for per in exact.values())
    print(f"{a.run.name}: {len(exact)} threads, {len(log):,} intervals, {len(marks)} stops of "
          f"blocked threads by the snapshots")
    together: dict[str, int] = {}
    for per in exact.values():
        for c, ns in per.items():
            together[c] = together.get(c, 0) + ns
    print("exact split, points: " + ", ".join(f"{c} {100 * ns / total:.1f}"
                                               for c, ns in sorted(together.items())))
    if unsampled:
        print(f"(blocked time without a stack even at every switch: {unsampled / total:.1%})")
    sched.set_marks(marks)
    all_marks = sched.marks
    print(f"{'every':>5} {'split':>8} {'together mean':>14} {'together max':>13} "
          f"{'per thread (median)':>20}")
    for n in (int(x) for x in a.every.split(",")):
        res: dict[str, tuple[list[float], list[float]]] = {h: ([], []) for h in
                                                            ("pooled", "marks", "strata")}
        for phase in range(n):
            seen: dict[int, int] = {}
            for i in range(len(log)):
                if log.kind[i] != LOG_BLOCKED or sample0[i] < 0:
                    continue
                k = seen.get(log.tid[i], 0)
                seen[log.tid[i]] = k + 1
                keep = (k + phase) % n == 0
                log.sample[i] = sample0[i] if keep else -1
                log.period[i] = n if keep else 0
            for how in ("pooled", "marks", "strata"):
                sched.marks = {} if how == "pooled" else all_marks
                sched._clip(Profile(), *window)
                got = splits(sched, how)
                want: dict[str, int] = {}
                have: dict[str, int] = {}
                per_thread = []
                for tid, (per, sampled) in got.items():
                    if not sampled or tid not in exact:
                        continue  # no split to compare (finish says [unsampled], or snapshots)
                    ex = exact[tid]
                    for c, ns in ex.items():
                        want[c] = want.get(c, 0) + ns
                    for c, ns in per.items():
                        have[c] = have.get(c, 0) + ns
                    base = sum(ex.values()) or 1
                    per_thread.append(max(abs(per.get(c, 0) - ex.get(c, 0))
                                          for c in {*per, *ex}) * 100 / base)
                base = sum(want.values()) or 1
                res[how][0].append(max((abs(have.get(c, 0) - want.get(c, 0))
                                        for c in {*want, *have}), default=0) * 100 / base)
                res[how][1].append(statistics.median(per_thread or [0.0]))
        for how, (tog, thr) in res.items():
            print(f"{n:5d} {how:>8} {statistics.fmean(tog):14.2f} {max(tog):13.2f} "
                  f"{statistics.fmean(thr):20.2f}")
    log.sample[:], log.period[:] = sample0, period0
    return 0


if __name__ == "__main__":
    sys.exit(main())
