"""How well a thread's blocked time is split over wait classes when only one switch in N has
a stack: the pooled split (``_split_blocked``: every sampled interval stands for the thread's
others, in proportion to period x duration) against the split by duration strata
(``_split_stratified``), on a run that has a stack at every switch, so that the exact split
is known.

The run's intervals and stacks are read as ``wallflame finish`` reads them; then, for each N
and each of N phases (which switch of each thread's first N is sampled), one switch in N of
each thread keeps its stack (standing for N), and both splits are made from the same sample.
Printed: per N, the mean and the largest error over the phases of the per-class totals of
the threads with at least one sampled stack together, in points of their blocked time (a
thread with none has no split to compare), and the per-thread error (the class
a thread's split gets most wrong, in points of that thread's blocked time; median over the
threads, mean over phases).

    python3 benchmarks/split_estimator.py RUN [--every 10,50,200] [--known-above-ms 500]

RUN: a run directory collected with a stack at every switch (a launched command, or
``--sched-stack-hz 0``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wallflame.finish import _fold_chunks  # noqa: E402
from wallflame.fold.perf.sampled_switches import (  # noqa: E402
    _split_blocked,
    _split_stratified,
    _stratum,
    _Thread,
)
from wallflame.rundir import read_capture  # noqa: E402
from wallflame.timeline import LOG_BLOCKED  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("run", type=Path)
    ap.add_argument("--every", default="10,50,200")
    ap.add_argument("--known-above-ms", type=float, default=0,
                    help="intervals at least this long keep their stack, each for itself "
                         "(as a snapshot inside them would give it); 0: none")
    a = ap.parse_args()
    known_ns = int(a.known_above_ms * 1e6) if a.known_above_ms > 0 else 1 << 62
    raw = a.run / "raw"
    cap = read_capture(raw)
    folded = _fold_chunks(raw, cap)
    folded.folder.profiles(raw, cap, folded.done)
    sched = folded.folder.sched
    log = sched.log
    rows: dict[int, list[tuple[int, object]]] = {}
    unsampled = 0
    for i in range(len(log)):
        if log.kind[i] != LOG_BLOCKED:
            continue
        si = log.sample[i]
        if si < 0:
            unsampled += log.dur[i]
            continue
        rows.setdefault(log.tid[i], []).append((log.dur[i], log.samples[si]))
    total = sum(d for r in rows.values() for d, _ in r)
    if not total:
        print(f"{a.run}: no blocked interval with a stack", file=sys.stderr)
        return 2
    cls = sched._class_of

    def per_class(parts: list[tuple[object, int]]) -> dict[str, int]:
        out: dict[str, int] = {}
        for key, ns in parts:
            c = cls(key)  # type: ignore[arg-type]
            out[c] = out.get(c, 0) + ns
        return out

    exact = {tid: per_class([(k, d) for d, k in r]) for tid, r in rows.items()}
    together = {}
    for per in exact.values():
        for c, ns in per.items():
            together[c] = together.get(c, 0) + ns
    print(f"{a.run.name}: {len(rows)} threads, {sum(len(r) for r in rows.values()):,} blocked "
          f"intervals with a stack ({unsampled / max(total + unsampled, 1):.1%} of the blocked "
          "time without one, left out)")
    print("exact split, points: " + ", ".join(f"{c} {100 * ns / total:.1f}"
                                               for c, ns in sorted(together.items())))
    print(f"{'every':>5} {'split':>10} {'together mean':>14} {'together max':>13} "
          f"{'per thread (median)':>20}")
    for n in (int(x) for x in a.every.split(",")):
        errs: dict[str, list[float]] = {"pooled": [], "stratified": []}
        thread_errs: dict[str, list[float]] = {"pooled": [], "stratified": []}
        for phase in range(n):
            sums: dict[str, dict[str, int]] = {"pooled": {}, "stratified": {}}
            want_sum: dict[str, int] = {}  # the exact split of the threads sampled
            per_thread: dict[str, list[float]] = {"pooled": [], "stratified": []}
            for tid, r in rows.items():
                th = _Thread()
                for j, (d, key) in enumerate(r):
                    th.blocked += d
                    b = _stratum(d)
                    th.strata[b] = th.strata.get(b, 0) + d
                    known = d >= known_ns  # its stack known whatever the sampling
                    if known or (j + phase) % n == 0:
                        w = d if known else n * d
                        th.stacks[key] = th.stacks.get(key, 0) + w  # type: ignore[index]
                        sk = (key, b)
                        th.sstacks[sk] = th.sstacks.get(sk, 0) + w  # type: ignore[index]
                        th.sampled_weight += w
                if not th.sampled_weight:
                    continue  # no split to compare (finish says [unsampled], or snapshots)
                for c, ns in exact[tid].items():
                    want_sum[c] = want_sum.get(c, 0) + ns
                parts = sorted(th.stacks.items())
                for name, split in (("pooled", _split_blocked(parts, th.blocked, 0)),
                                    ("stratified", _split_stratified(th, parts))):
                    got = per_class(split)  # type: ignore[arg-type]
                    want = exact[tid]
                    for c, ns in got.items():
                        sums[name][c] = sums[name].get(c, 0) + ns
                    per_thread[name].append(max(abs(got.get(c, 0) - want.get(c, 0))
                                                for c in {*got, *want}) * 100 / th.blocked)
            base = sum(want_sum.values()) or 1
            for name in errs:
                errs[name].append(max(abs(sums[name].get(c, 0) - want_sum.get(c, 0))
                                      for c in {*want_sum, *sums[name]}) * 100 / base)
                thread_errs[name].append(statistics.median(per_thread[name] or [0.0]))
        for name in ("pooled", "stratified"):
            print(f"{n:5d} {name:>10} {statistics.fmean(errs[name]):14.2f} "
                  f"{max(errs[name]):13.2f} {statistics.fmean(thread_errs[name]):20.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
