"""Each thread's totals, stacks and bins from the scheduler's interval log clipped to the
window.

perf records before the window opens and goes on until it has stopped (0.6 s past the
window's end on a loaded machine), which would count as the threads' time.

The totals, the runnable bins and the rows that carry a stack (or may be a snapshot's
known wait) come from ``_speedups.clip_log``; the stacks of those rows are added here."""

from __future__ import annotations

from array import array
from collections.abc import Callable

from wallflame.fold.perf.sched_split import BIN_NS, add_to_bins
from wallflame.fold.perf.sched_stops import MARK_MIN_NS, Marks, known_waits
from wallflame.fold.perf.sched_thread import Key, SchedThread
from wallflame.profile import RUNNABLE
from wallflame.speedups import native
from wallflame.strata import N_STRATA, Donors
from wallflame.timeline import LOG_LEADING, LOG_RUNNABLE, IntervalLog

#: A wait's class from its key (``classify``, cached).
ClassOf = Callable[[Key], str]


def clip(threads: dict[int, SchedThread], log: IntervalLog, start: int, end: int,
         marks: Marks, class_of: ClassOf
         ) -> tuple[int, dict[tuple[str, int], int], list[tuple[int, Key]]]:
    """Each thread's totals again, from the logged intervals clipped to ``[start, end)``.

    With sampled stacks (a period above 1), the unsampled intervals long enough to have been
    ended or restarted by a snapshot's stop are matched to the stops (``marks``:
    ``sched_stops``), and each thread's blocked intervals are kept by stratum of their
    durations (``sched_split.split_strata``).  Returns the ns outside the window, the
    runnable time's bins (exact per interval: they need no scaling) and the log's rows a
    stop showed, with their stacks."""
    for th in threads.values():
        th.blocked = th.runnable = th.leading = th.sampled_weight = 0
        th.stacks, th.bins, th.rstacks = {}, {}, {}
        th.known, th.known_ns = {}, 0
        th.strata = None
        th.split_by = (0, 0, 0)
        th.lead_start = max(th.lead_start, start)
    stratified = max(log.period, default=0) > 1
    marks = marks if stratified else {}
    outside, totals, rbins, sampled, by_stratum = native.clip_log(
        log.tid, log.start, log.dur, log.kind, log.sample, start, end, BIN_NS,
        MARK_MIN_NS if marks else 0)
    per = array("q")
    per.frombytes(by_stratum)
    for r, (tid, blocked, runnable, leading) in enumerate(totals):
        th = threads[tid]
        th.blocked, th.runnable, th.leading = blocked, runnable, leading
        if stratified and blocked:  # a thread with a wait
            th.strata = Donors()
            part = per[r * N_STRATA:(r + 1) * N_STRATA]
            th.strata.total = {b: ns for b, ns in enumerate(part) if ns}
    rows = array("q")
    rows.frombytes(sampled)
    candidates = _stacks(threads, log, rows, start, end, marks, class_of)
    known_rows = []
    for r, key in known_waits(candidates, marks, threads, log.tid) if candidates else []:
        row, s, d, c = candidates[r]
        show(threads[log.tid[row]], key, s, d, c, start, end, class_of)
        known_rows.append((row, key))
    return int(outside), {(RUNNABLE, b): ns for b, ns in rbins}, known_rows


def _stacks(threads: dict[int, SchedThread], log: IntervalLog, rows: array[int], start: int,
            end: int, marks: Marks, class_of: ClassOf) -> list[tuple[int, int, int, int]]:
    """The stacks of the rows ``clip_log`` chose (in the window, with a sample or a
    candidate for a stop); returns the candidates as ``(row, start, dur, clipped)``."""
    candidates: list[tuple[int, int, int, int]] = []
    for i in rows:
        s, d = log.start[i], log.dur[i]
        c = max(0, min(end, s + d) - max(start, s))
        kind = log.kind[i]
        if not c or kind == LOG_LEADING:
            continue
        th = threads[log.tid[i]]
        si = log.sample[i]
        if kind == LOG_RUNNABLE:
            if si >= 0:
                key = log.samples[si]
                th.rstacks[key] = th.rstacks.get(key, 0) + max(1, log.period[i]) * c
            continue
        if si < 0:
            if marks and d >= MARK_MIN_NS and log.tid[i] in marks:
                candidates.append((i, s, d, c))
            continue
        key, p = log.samples[si], log.period[i]
        if not p:  # a stop's wait (known, finished before): its own stack
            show(th, key, s, d, c, start, end, class_of)
            continue
        th.stacks[key] = th.stacks.get(key, 0) + p * c
        th.sampled_weight += p * c
        if th.strata is not None:
            th.strata.sample(d, key, p * c)
        add_to_bins(th.bins, class_of(key), max(s, start), min(s + d, end), p)
    return candidates


def show(th: SchedThread, key: Key, s: int, d: int, c: int, start: int, end: int,
         class_of: ClassOf) -> None:
    """An interval whose own stack ``key`` a stop showed: ``c`` ns of it in the window."""
    th.known[key] = th.known.get(key, 0) + c
    th.known_ns += c
    if th.strata is not None:
        th.strata.show(d, key, c)
    # its own time in the class bins (weight 1: it stands for itself alone)
    add_to_bins(th.bins, class_of(key), max(s, start), min(s + d, end), 1)
