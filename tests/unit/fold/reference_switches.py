"""The scheduler capture read and finished in Python alone: the reference the tests hold the
native paths of ``wallflame.fold.perf`` to (``_speedups.SwitchTracker``, ``perf_switches``
with ``until``, ``wake_run``, ``wake_split``, ``in_caps``, ``apply_lag``, ``clip_log``).

``PythonSched`` is a ``SampledSched`` whose switch records are applied to each thread here
(``_switch`` and what it calls), whose wake-up lines are all read by ``_wake_lines``, and
whose ``finish`` passes run in Python; everything else is the product's own code."""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from typing import Any, BinaryIO

from wallflame.fold.perf import sched_passes
from wallflame.fold.perf.sampled_switches import SampledSched
from wallflame.fold.perf.sched_clip import show
from wallflame.fold.perf.sched_reader import SW_EXIT, SW_OUT, SW_PREEMPT, SW_WIDE
from wallflame.fold.perf.sched_split import BIN_NS, add_to_bins
from wallflame.fold.perf.sched_stops import MARK_MIN_NS, known_waits
from wallflame.fold.perf.sched_thread import SchedThread
from wallflame.profile import RUNNABLE, Profile
from wallflame.strata import Donors
from wallflame.textio import line_blocks
from wallflame.timeline import LOG_BLOCKED, LOG_LEADING, LOG_RUNNABLE, IntervalLog

#: A sample further than this before its ``OUT`` is not that switch's (the tracker's rule).
MAX_SAMPLE_LEAD_NS = 10_000_000

#: One record of ``_speedups.perf_switches``: time, order in the file, kind, pid, tid, and
#: two more (a COMM record: the thread and the index of its name; a FORK: the thread and
#: the thread that made it).
_REC = struct.Struct("=qqiiiiii")


class _Records:
    """``SwitchTracker.load`` and ``until``: each switch record goes to ``_switch`` with the
    name perf gives its thread."""

    def __init__(self) -> None:
        self.recs: list[tuple[int, ...]] = []
        self.comms: list[str] = []
        self.pos = 0
        self.names: dict[int, str] = {}

    def load(self, recs: bytes, comms: list[str]) -> None:
        self.recs = list(_REC.iter_unpack(recs))
        self.comms, self.pos = comms, 0

    def until(self, sched: PythonSched, t: int | None, most: int) -> int:
        applied = read = 0
        while self.pos < len(self.recs) and (t is None or self.recs[self.pos][0] < t) and \
                read < most:
            rt, _, kind, pid, tid, a, b, _ = self.recs[self.pos]
            self.pos += 1
            read += 1
            if kind == 8:
                self.names[a] = self.comms[b]
            elif kind == 16:
                if b in self.names:
                    self.names[a] = self.names[b]
            else:
                if not applied and sched._cur is not None:
                    sched._end_sample()
                sched._skip = False
                sched._switch(kind, pid, tid, rt, self.names.get(tid, ""))
                applied += 1
        return read


class PythonSched(SampledSched):
    """``SampledSched`` with the native paths in Python."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tracker = None
        self._threads = {}

    # -- reading --------------------------------------------------------------------------

    def feed(self, f: BinaryIO, switches: Any = None) -> None:
        if switches is not None:
            self._feed_merged(f, _Records(), switches)
            return
        for block in line_blocks(f):
            self.feed_lines(block.decode("utf-8", "replace").split("\n"))
        self._end_sample()

    def feed_wakes(self, f: BinaryIO) -> None:
        self.expect_wakes()
        for block in line_blocks(f):
            self._wake_lines(block.decode("utf-8", "replace").split("\n"))

    def _switch(self, kind: int, pid: int, tid: int, t: int, comm: str) -> None:
        if not self._record(bool(kind & SW_WIDE), pid, tid, t):
            return
        if kind & SW_EXIT:
            self._exit(tid, pid, comm, t)
        elif kind & SW_OUT:
            self._switch_out(tid, pid, comm, t, bool(kind & SW_PREEMPT))
        else:
            self._switch_in(tid, pid, comm, t)

    def _end_sample(self) -> None:
        cur = self._cur
        if cur is None:
            return
        self._cur = None
        pid, tid, comm, t, state, period = cur
        th = self._thread(tid, pid, comm)
        th.pending = (t, tuple(reversed(self._frames)), state, period)
        th.samples += 1
        self.samples += 1
        self.periods += period
        self._frames = []

    def _thread(self, tid: int, pid: int, comm: str) -> SchedThread:
        th = self._threads.get(tid)
        if th is None:
            th = self._threads[tid] = SchedThread(comm, pid, tid)
        elif comm:
            th.comm = comm
        return th

    def _exit(self, tid: int, pid: int, comm: str, t: int) -> None:
        th = self._thread(tid, pid, comm)
        self._ran_until(th, t)
        th.pending = None
        th.gone = True

    def _ran_until(self, th: SchedThread, t: int) -> None:
        since = th.on_since
        if since is None and not th.seen and self._existed(th.tid):
            since = self.window[0] if self.window is not None else (self.first_time or t)
        if since is not None and t > since:
            th.on_cpu.extend((since, t))
        th.on_since = None
        th.seen = True
        if th.open is not None:
            self._close(th, t, exact=False)

    def _switch_out(self, tid: int, pid: int, comm: str, t: int, preempt: bool) -> None:
        th = self._thread(tid, pid, comm)
        if th.gone:
            return
        th.switches += 1
        self._ran_until(th, t)
        sample = None
        if th.pending is not None:
            st, frames, state, period = th.pending
            th.pending = None
            if 0 <= t - st <= MAX_SAMPLE_LEAD_NS:
                sample = (frames, state, period)
        runnable = preempt or (sample is not None and sample[1].startswith("R"))
        th.open = (t, runnable, sample)

    def _switch_in(self, tid: int, pid: int, comm: str, t: int) -> None:
        th = self._threads.get(tid)
        if th is None or not th.seen:
            th = self._thread(tid, pid, comm)
            th.ins.append(t)
            th.seen = True
            th.on_since = t
            if self.first_time is not None and t > self.first_time and self._existed(tid):
                th.leading += t - self.first_time
                th.lead_start = self.first_time
                self._log.add(tid, self.first_time, t - self.first_time, LOG_LEADING, None)
            return
        th.gone = False
        th.ins.append(t)
        th.on_since = t
        if th.open is not None:
            self._close(th, t, exact=True)

    # -- finish's passes ------------------------------------------------------------------

    def _apply_wakes(self) -> None:
        wakes = self.wakes
        if not wakes:
            return
        for tid in wakes:
            wakes[tid].sort()
        log = self.log
        extra: list[tuple[int, int, int, int, int, int]] = []
        for i in range(len(log)):
            if log.kind[i] not in (LOG_BLOCKED, LOG_LEADING):
                continue
            found = wakes.get(log.tid[i])
            if not found:
                continue
            s, e = log.start[i], log.start[i] + log.dur[i]
            j = bisect_right(found, e)
            if not j or found[j - 1] <= s or found[j - 1] >= e:
                continue
            w = found[j - 1]
            log.dur[i] = w - s
            extra.append((w, log.tid[i], e - w, LOG_RUNNABLE, log.sample[i], log.period[i]))
            self.woken += 1
        if extra:
            merge_log(log, extra)

    def _in_caps(self) -> sched_passes.Caps:
        caps: sched_passes.Caps = {}
        for tid, th in self.threads.items():
            ins = th.ins = array("q", sorted(th.ins))
            n = len(ins)
            off, on = array("q", bytes(8 * n)), array("q", bytes(8 * n))
            at, pair = array("q", [-1]) * n, array("q", [-1]) * n
            pairs = th.on_cpu
            for k in range(0, len(pairs), 2):
                j = bisect_left(ins, pairs[k])
                if j < n and ins[j] == pairs[k]:
                    on[j], pair[j] = pairs[k + 1] - pairs[k], k
            caps[tid] = (off, at, on, pair)
        log = self.log
        for i, (tid, start, dur) in enumerate(zip(log.tid, log.start, log.dur, strict=True)):
            ins = self.threads[tid].ins
            j = bisect_left(ins, start + dur)
            if j < len(ins) and ins[j] == start + dur:
                c = caps[tid]
                c[0][j], c[1][j] = dur, i
        for off, at, on, pair in caps.values():  # a switch-in moves only with both intervals
            for j in range(len(off)):
                if at[j] < 0 or pair[j] < 0:
                    off[j] = on[j] = 0
        return caps

    def _switch_in_lag(self, listings: dict[str, Any]) -> dict[str, Any]:
        caps = self._in_caps()
        out, offs, ons = sched_passes._measure(self.threads, caps, listings)
        if len(offs) < sched_passes.LAG_MIN_SWITCH_INS:
            return out
        kernel_minus = out["kernel_minus_switches_ns"]
        lag = (sched_passes._level(offs, kernel_minus) if kernel_minus >= 0
               else -sched_passes._level(ons, -kernel_minus))
        out["ns"] = lag
        if not lag or abs(lag) > sched_passes.LAG_MAX_NS:
            return out
        moved = 0
        for tid, (off, at, on, pair) in caps.items():
            pairs = self.threads[tid].on_cpu
            for j in range(len(off)):
                i, k = at[j], pair[j]
                d = min(lag, off[j]) if lag > 0 else -min(-lag, on[j])
                if not d:
                    continue
                self.log.dur[i] -= d
                pairs[k] -= d
                moved += d
        out.update(applied=True, moved_ns=moved)
        return out

    def _clip(self, profile: Profile, start: int, end: int) -> None:
        log = self.log
        for th in self.threads.values():
            th.blocked = th.runnable = th.leading = th.sampled_weight = 0
            th.stacks, th.bins, th.rstacks = {}, {}, {}
            th.known, th.known_ns = {}, 0
            th.strata = None
            th.split_by = (0, 0, 0)
            th.lead_start = max(th.lead_start, start)
        stratified = max(log.period, default=0) > 1
        marks = self.marks if stratified else {}
        candidates: list[tuple[int, int, int, int]] = []
        self.known_rows = []
        outside = 0
        runnable_bins: dict[tuple[str, int], int] = {}
        for i in range(len(log)):
            s, d = log.start[i], log.dur[i]
            c = max(0, min(end, s + d) - max(start, s))
            outside += d - c
            if not c:
                continue
            th = self.threads[log.tid[i]]
            kind = log.kind[i]
            if kind == LOG_RUNNABLE:
                th.runnable += c
                add_to_bins(runnable_bins, RUNNABLE, max(s, start), min(s + d, end), 1)
                si = log.sample[i]
                if si >= 0:
                    key = log.samples[si]
                    th.rstacks[key] = th.rstacks.get(key, 0) + max(1, log.period[i]) * c
            elif kind == LOG_LEADING:
                th.leading += c
            else:
                th.blocked += c
                if stratified:
                    if th.strata is None:
                        th.strata = Donors()
                    th.strata.wait(d, c)
                si = log.sample[i]
                if si < 0:
                    if marks and d >= MARK_MIN_NS and log.tid[i] in marks:
                        candidates.append((i, s, d, c))
                    continue
                key, p = log.samples[si], log.period[i]
                if not p:
                    show(th, key, s, d, c, start, end, self._class_of)
                    continue
                th.stacks[key] = th.stacks.get(key, 0) + p * c
                th.sampled_weight += p * c
                if th.strata is not None:
                    th.strata.sample(d, key, p * c)
                add_to_bins(th.bins, self._class_of(key), max(s, start), min(s + d, end), p)
        for r, key in known_waits(candidates, marks, self.threads, log.tid) \
                if candidates else []:
            row, s, d, c = candidates[r]
            show(self.threads[log.tid[row]], key, s, d, c, start, end, self._class_of)
            self.known_rows.append((row, key))
        out = profile.meta.extra.setdefault("outside_window", {})
        out["sched_ns"] = out.get("sched_ns", 0) + outside
        for (cls, b), ns in runnable_bins.items():
            bins = self.class_bins.setdefault(cls, {})
            bins[b] = bins.get(b, 0) + ns


def merge_log(log: IntervalLog, extra: list[tuple[int, int, int, int, int, int]]) -> None:
    """Add ``(start, tid, dur, kind, sample, period)`` rows to ``log``, all in start order
    (rows that start together keep the log's order, then ``extra``'s)."""
    names = ("start", "tid", "dur", "kind", "sample", "period")
    cols = [getattr(log, name) for name in names]
    if extra:
        for col, values in zip(cols, zip(*extra, strict=True), strict=True):
            col.extend(values)
    if not cols[0]:
        return
    starts = cols[0]
    bits = len(starts).bit_length()
    mask, base = (1 << bits) - 1, min(starts)
    order = [k & mask for k in sorted([(s - base) << bits | i for i, s in enumerate(starts)])]
    for name, col in zip(names, cols, strict=True):
        setattr(log, name, array(col.typecode, map(col.__getitem__, order)))


__all__ = ["BIN_NS", "PythonSched", "merge_log"]
