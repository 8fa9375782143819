"""``finish``'s passes over the scheduler's interval log before its totals are taken: the
wake-ups and perf's switch-in lag.

Each runs natively (``_speedups.wake_split``, ``in_caps``, ``apply_lag``).

* A blocked interval ends at the thread's last wake-up inside it: the rest, to its
  switch-in, is runnable.
* perf writes a thread's ``IN`` record a few microseconds after the kernel started counting
  its run time; every switch-in is moved earlier by the lag the kernel's run time shows over
  the run."""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from operator import le
from typing import Any, TypeAlias

from wallflame.fold.perf.sched_thread import SchedThread
from wallflame.speedups import native
from wallflame.timeline import IntervalLog

#: The switch-in lag (``switch_in_lag``) is measured only over at least this many switch-ins:
#: below it, a listing read a scheduler tick late is most of the estimate.
LAG_MIN_SWITCH_INS = 10_000
#: A measured lag beyond this is not perf's (a listing out of step with the capture): none is
#: applied.
LAG_MAX_NS = 50_000

#: Per thread, per switch-in: the length of the off-CPU interval it ends, that interval's row
#: in the log, the length of the on-CPU interval it starts, that interval's index in
#: ``on_cpu`` (``in_caps``).
Caps: TypeAlias = "dict[int, tuple[array[int], array[int], array[int], array[int]]]"


def apply_wakes(log: IntervalLog, wakes: dict[int, list[int]]) -> int:
    """End each blocked interval at its thread's last wake-up inside it: the rest, to its
    switch-in, is runnable (logged with the same stack, the log kept in time order).
    Returns how many intervals a wake-up split."""
    for tid in wakes:
        wakes[tid].sort()
    got = native.wake_split(log.tid, log.start, log.dur, log.kind, log.sample, log.period,
                            wakes)
    if got is None:
        return 0
    for name, data in zip(("tid", "start", "dur", "kind", "sample", "period"), got[1:],
                          strict=True):
        col = array(getattr(log, name).typecode)
        col.frombytes(data)
        setattr(log, name, col)
    return int(got[0])


def in_caps(threads: dict[int, SchedThread], log: IntervalLog) -> Caps:
    """Per thread, per switch-in (``ins``, put in order): the length of the logged off-CPU
    interval it ends and that interval's index in the log (-1: none), the length of the
    on-CPU interval it starts and that interval's start's index in ``on_cpu``."""
    tids = list(threads)
    for th in threads.values():
        th.ins = array("q", sorted(th.ins))
    got = native.in_caps(tids, [threads[t].ins for t in tids],
                         [threads[t].on_cpu for t in tids], log.tid, log.start, log.dur)
    caps: Caps = {}
    for tid, parts in zip(tids, got, strict=True):
        cols = []
        for data in parts:
            col = array("q")
            col.frombytes(data)
            cols.append(col)
        caps[tid] = (cols[0], cols[1], cols[2], cols[3])
    return caps


def switch_in_lag(threads: dict[int, SchedThread], log: IntervalLog,
                  listings: dict[str, Any]) -> dict[str, Any]:
    """Move every switch-in earlier by perf's lag, measured against the kernel.

    perf writes a thread's ``IN`` record after the context switch and after scheduling
    the thread's own events in: a few microseconds after the kernel started counting the
    thread's run time (2.2-2.9 µs from the 10th to the 90th percentile against the
    ``sched_switch`` tracepoint, measured by benchmarks/lab/runnable_truth.py).  Each
    on-CPU interval starts that much late and the off-CPU interval before it (most often
    runnable: woken, not yet on a CPU) ends that much late: 5-10 points of the window
    of a thread that switches 25,000 times a second.

    The lag is one figure for the run, ``δ``: over each listed thread's span between its
    two ``schedstat`` reads, the kernel's run time minus the switches' on-CPU time, summed
    over the threads, is ``Σ clamp(δ, -on, off)`` over their switch-ins in those spans
    (``off``: the off-CPU interval the switch-in ends; ``on``: the on-CPU one it starts).
    Every switch-in of every thread then moves by ``clamp(δ, -on, off)``: the total time
    is unchanged, the timeline's spans and the totals move together.  Not applied with
    fewer than ``LAG_MIN_SWITCH_INS`` switch-ins in the spans (the reads' own timing,
    up to a scheduler tick per thread, would be most of the estimate; the lag then
    matters little) or a lag beyond ``LAG_MAX_NS``.  Returns what was measured and done
    (``meta.extra["sched"]["switch_in_lag"]``)."""
    caps = in_caps(threads, log)
    out, offs, ons = _measure(threads, caps, listings)
    if len(offs) < LAG_MIN_SWITCH_INS:
        return out
    kernel_minus = out["kernel_minus_switches_ns"]
    lag = (_level(offs, kernel_minus) if kernel_minus >= 0
           else -_level(ons, -kernel_minus))
    out["ns"] = lag
    if not lag or abs(lag) > LAG_MAX_NS:
        return out
    moved = 0
    for tid, (off, at, on, pair) in caps.items():
        moved += native.apply_lag(lag, off, at, on, pair, log.dur, threads[tid].on_cpu)
    out.update(applied=True, moved_ns=moved)
    return out


def _measure(threads: dict[int, SchedThread], caps: Caps, listings: dict[str, Any]
             ) -> tuple[dict[str, Any], list[int], list[int]]:
    """The kernel's run time minus the switches' on-CPU time over the listed threads' spans,
    and the off-CPU and on-CPU caps of the switch-ins in those spans."""
    rows = [{int(r["tid"]): r for r in (listings.get(when) or {}).get("threads") or []
             if isinstance(r, dict) and "tid" in r and r.get("schedstat")}
            for when in ("start", "end")]
    mono = [int((listings.get(when) or {}).get("mono_ns") or 0) for when in ("start", "end")]
    kernel_minus = 0
    offs: list[int] = []
    ons: list[int] = []
    used = 0
    for tid, a in rows[0].items():
        b, th = rows[1].get(tid), threads.get(tid)
        lo = int(a.get("schedstat_ns") or mono[0])
        hi = int((b or {}).get("schedstat_ns") or mono[1])
        if b is None or th is None or hi <= lo:
            continue
        used += 1
        kernel_minus += (int(b["schedstat"][0]) - int(a["schedstat"][0])
                         - clipped_sum(th.on_cpu, (lo, hi)))
        off, on = caps[tid][0], caps[tid][2]
        j0, j1 = bisect_left(th.ins, lo), bisect_left(th.ins, hi)
        offs.extend(off[j0:j1])
        ons.extend(on[j0:j1])
    out = {"threads": used, "switch_ins": len(offs), "kernel_minus_switches_ns": kernel_minus,
           "ns": 0, "applied": False}
    return out, offs, ons


def _level(caps: list[int], total: int) -> int:
    """The ``x >= 0`` with ``Σ min(x, c) = total`` over ``caps`` (the largest cap when they
    cannot hold ``total``)."""
    caps = sorted(caps)
    below = 0
    for i, c in enumerate(caps):
        left = len(caps) - i
        if below + c * left >= total:
            return (total - below) // left
        below += c
    return caps[-1] if caps else 0


def clipped_sum(pairs: array[int], window: tuple[int, int] | None) -> int:
    """The total length of the ``(start, end)`` pairs inside ``window``.

    A thread's on-CPU pairs come in time order, one after the other (``s0 <= e0 <= s1 ...``):
    then only the pair across each edge of the window is cut, and the ones between are
    summed by slices (a busy server's minute is millions of pairs).  Pairs not in that order
    are summed one by one."""
    lo, hi = window if window is not None else (-(1 << 62), 1 << 62)
    n = len(pairs) // 2
    if not n or not all(map(le, pairs[:-1], pairs[1:])):
        return sum(max(0, min(hi, pairs[i + 1]) - max(lo, pairs[i]))
                   for i in range(0, len(pairs), 2))
    starts, ends = pairs[0::2], pairs[1::2]
    i = bisect_left(starts, lo)  # pairs i.. start inside the window
    j = bisect_right(ends, hi)  # pairs ..j-1 end inside it
    total = sum(ends[i:j]) - sum(starts[i:j]) if j > i else 0
    for k in {i - 1, j}:  # the pairs across the edges, if any
        if 0 <= k < n and not i <= k < j:
            total += max(0, min(hi, ends[k]) - max(lo, starts[k]))
    return total
