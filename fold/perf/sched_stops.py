"""The waits a snapshot's ptrace stop showed, matched to the scheduler's unsampled intervals.

A stop interrupts the wait it finds a thread in, so the unsampled interval that ends just
before it and the one that starts just after it (the wait restarted) are that wait, whose
stack the snapshot read.

Only with sampled stacks: the long waits, few and each a large part of its thread's time,
are those the snapshots interrupt, and the sampling of one switch in N misses most of them."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from typing import Any, TypeAlias

from wallflame.fold.perf.sched_thread import Key, SchedThread

#: A snapshot's stop ends the wait it interrupts within this of the instant its registers
#: were read (0.2-1.7 ms on a busy server: the wake-up, then waiting for a CPU, before the
#: stop), and the restarted wait begins within it after.
MARK_WINDOW_NS = 5_000_000
#: An interval is matched to a stop only if its thread got a CPU once between the two (the
#: wait the stop ended: woken by the stop, it runs into the stop; the wait restarted: released,
#: it runs back into the wait), for at most this long: a thread that ran longer, or blocked
#: again in between, did something else (the wait the stop found ended, the thread took the
#: lock and held it 2 ms, then slept: the sleep is not the lock's wait; a sleep ended, the
#: thread blocked on a condition variable for less than ``MARK_MIN_NS`` and was stopped there:
#: the sleep is not the condition variable's wait).  Against a stack at every switch, a match
#: with one switch-in and up to 50 us of CPU between has the stop's wait class nearly always,
#: one with two switch-ins or more CPU far less often (measured by
#: benchmarks/lab/split_estimator.py).
MARK_MAX_CPU_NS = 50_000
#: Shorter unsampled intervals are not matched to a stop: a tracer's stop itself is one (10 us
#: to a few ms), and short waits are not where the split goes wrong.
MARK_MIN_NS = 1_000_000

#: tid -> (stop instants, their (frames, kernel state)), sorted.
Marks: TypeAlias = "dict[int, tuple[array[int], list[Key]]]"


def parse_marks(marks: list[Any]) -> Marks:
    """The snapshots' blocked threads at the instant each was stopped
    (``wallflame.stops.STOP_MARKS``: ``[tid, mono_ns, frames, kernel state]``), by thread;
    malformed entries are passed over."""
    by: dict[int, list[tuple[int, Key]]] = {}
    for m in marks:
        try:
            tid, at, frames, state = int(m[0]), int(m[1]), m[2], str(m[3])
        except (TypeError, ValueError, IndexError):
            continue
        if isinstance(frames, list) and frames:
            by.setdefault(tid, []).append((at, (tuple(str(f) for f in frames), state)))
    return {tid: (array("q", [a for a, _ in v]), [k for _, k in v])
            for tid, v in ((t, sorted(v)) for t, v in by.items())}


def known_waits(candidates: list[tuple[int, int, int, int]], marks: Marks,
                threads: dict[int, SchedThread], log_tid: array[int]
                ) -> list[tuple[int, Key]]:
    """The unsampled intervals (``(row, start, dur, clipped)``, in the log's order) that a
    snapshot's stop ended or restarted, as ``(index in candidates, the stop's key)``: for
    each stop, the last interval of its thread that ended within ``MARK_WINDOW_NS`` before
    it, and the first that started within that after it."""
    win = MARK_WINDOW_NS
    # (tid, stop, 0: the wait it ended / 1: the wait it restarted) -> (distance, candidate)
    best: dict[tuple[int, int, int], tuple[int, int]] = {}
    on: dict[int, tuple[array[int], array[int]]] = {}  # tid -> on-CPU starts, ends
    for r, (row, s, d, _) in enumerate(candidates):
        tid = log_tid[row]
        at = marks[tid][0]
        e = s + d
        if tid not in on:
            pairs = threads[tid].on_cpu
            on[tid] = (pairs[0::2], pairs[1::2])
        i = bisect_left(at, e)  # the stop just after it ended
        if i < len(at) and at[i] - e <= win and _one_run(*on[tid], e, at[i]):
            _closer(best, (tid, i, 0), at[i] - e, r)
        i = bisect_right(at, s) - 1  # the stop just before it started
        if i >= 0 and s - at[i] <= win and _one_run(*on[tid], at[i], s):
            _closer(best, (tid, i, 1), s - at[i], r)
    chosen: dict[int, tuple[int, int]] = {}  # candidate -> (tid, stop): its wait's stack
    for (tid, i, _), (_, r) in sorted(best.items()):
        chosen.setdefault(r, (tid, i))
    return [(r, marks[tid][1][stop]) for r, (tid, stop) in chosen.items()]


def _one_run(starts: array[int], ends: array[int], lo: int, hi: int) -> bool:
    """Whether a thread got a CPU at most once between ``lo`` and ``hi`` (a switch-in at
    ``lo`` counts), for at most ``MARK_MAX_CPU_NS`` in all, from its on-CPU intervals
    (``starts``, ``ends``: in time order, one after the other)."""
    i = bisect_right(ends, lo)  # the first interval that ends after lo
    total = ins = 0
    while i < len(starts) and starts[i] <= hi:
        total += max(0, min(hi, ends[i]) - max(lo, starts[i]))
        ins += starts[i] >= lo
        i += 1
    return ins <= 1 and total <= MARK_MAX_CPU_NS


def _closer(best: dict[tuple[int, int, int], tuple[int, int]], key: tuple[int, int, int],
            dist: int, row: int) -> None:
    """Keep ``row`` as ``key``'s interval if none closer is known."""
    old = best.get(key)
    if old is None or dist < old[0]:
        best[key] = (dist, row)
