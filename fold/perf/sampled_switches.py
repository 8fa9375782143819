"""Scheduler capture with sampled call chains -> exact off-CPU and run-queue time per thread.

The capture is ``perf record -e sched:sched_switch -F HZ --switch-events --call-graph dwarf
-p PID`` (``wallflame.collect.perf``), read as ``perf script --ns --show-switch-events -F
comm,pid,tid,time,period,event,trace,ip,sym,dso``, chunk after chunk, by one ``SampledSched``.

* Every switch of every thread is a ``PERF_RECORD_SWITCH`` pair (``OUT`` when the thread leaves
  a CPU, ``IN`` when it gets one back; about 40 bytes each, no stack).  ``OUT preempt`` means
  the thread was still runnable: that interval is run-queue time.  Any other ``OUT`` starts a
  blocked interval.  So blocked and runnable time per thread are exact, whatever the sampling.
* Only a sample of the switches carries a call chain: the ``sched:sched_switch`` event in the
  kernel's frequency mode (``-F``: at most about HZ samples per second per thread; a thread
  that switches less often gets every switch).  A sample comes just before its ``OUT`` and
  carries the stack, the kernel state (S, D, R) and its period: how many switches of that
  thread it stands for.
* A thread's exact blocked time is split over the stacks of its sampled blocked intervals in
  proportion to ``period x duration`` of each (a ratio estimator: the sampled intervals stand
  for the others in their part of the run, and the split sums exactly to the measured total).
  With ``-c 1`` (every switch sampled) every period is 1 and the split is the exact one.
  With sampled stacks, an unsampled interval that a snapshot's ptrace stop ended, or that
  restarted the wait after it, takes the snapshot's stack (``set_marks``), and only the rest
  is split over the samples: the long waits, few and each a large part of its thread's time,
  are those the snapshots interrupt.  The rest is split stratum by stratum of the intervals'
  durations (``_split_strata``), over the sampled and the known intervals of each stratum:
  sampling one switch in N can fall on the same phase of a periodic program again and again,
  and a wait's kind goes with its length.
* A thread whose first record is an ``IN`` was off-CPU since before the capture: that leading
  span counts as blocked (from the capture's first record) and is split like the rest.  A
  blocked thread with no sampled stack at all gets the pseudo-frame ``[unsampled]``.
* Intervals still open at the end are closed at the capture's last record.
* **Waiting for a CPU is a state** (class ``runnable``): a preemption (``OUT preempt``) is
  runnable until the thread's next ``IN``, and so is the time from the wake-up of a blocked
  thread (``sched:sched_wakeup``, recorded on every CPU by a perf of its own and read with
  ``feed_wakes``) to its ``IN``: the blocked interval ends at its last wake-up.  The kernel
  counts both as run-queue delay (``/proc/PID/task/TID/schedstat``, second field), which the
  live tests check against.  Runnable time keeps the stack at which the thread was preempted
  or had blocked.  A thread the window's first ``/proc`` listing did not have was created
  during the window and has no leading span.
* **On-CPU time is exact too**: each ``IN`` to the next ``OUT``, clipped to the window
  (``meta.extra["sched_threads"]``: per thread on-CPU, runnable and blocked ns), which the run
  uses as each thread's on-CPU total (``wallflame.window``).  perf's ``IN`` record comes a
  few microseconds after the switch: every ``IN`` is moved earlier by the lag the kernel's run
  time shows over the run (``_switch_in_lag``).
* Blocked time is also kept per wait class in bins of ``BIN_NS`` of the perf clock
  (``class_bins``): ``wallflame check`` measures how much each class moves within a run from
  it (``wallflame.fold.slices``), since the scheduler's text is not kept.  A thread's
  sampled ``period x duration`` in each bin is scaled to its exact blocked time in that class.

* **Attached, on every CPU** (``collect.perf.PerfOptions.switch_filter``): the switches are
  ``PERF_RECORD_SWITCH_CPU_WIDE`` pairs of every task on the machine (perf cannot filter
  them), read as above for the target's threads and counted apart for the others
  (``other_tasks_records``); the target's processes are those of the threads listed when the
  window opened, and those they fork (``perf script --show-task-events``).  The stack samples
  are filtered in the kernel on the switches out of the target's threads and come one in
  ``-c N`` per CPU (their period): a thread's share of them follows its share of the
  switches.

Memory holds per-thread totals and the distinct (stack, state) pairs, never the records.
"""

from __future__ import annotations

import re
import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from operator import le
from pathlib import Path
from typing import Any, BinaryIO

from wallflame import stops, strata
from wallflame.classify import Rules, classify
from wallflame.fold.perf.lines import (
    LOST_RE,
    NS_HEADER_RE,
    NS_PERIOD_EVENT_RE,
    WAKE_HEADER_RE,
    frame_name,
)
from wallflame.fold.perf.switches import parse_switch_fields
from wallflame.names import UNSAMPLED  # a blocked thread none of whose switches was sampled
from wallflame.profile import OFF, RUNNABLE, Profile, StackKey
from wallflame.rundir import SCHED_BINS
from wallflame.speedups import native
from wallflame.strata import N_STRATA, Donors, shares
from wallflame.textio import line_blocks
from wallflame.timeline import LOG_BLOCKED, LOG_LEADING, LOG_RUNNABLE, IntervalLog

#: The switch-in lag (``SampledSched._switch_in_lag``) is measured only over at least this
#: many switch-ins: below it, a listing read a scheduler tick late is most of the estimate.
LAG_MIN_SWITCH_INS = 10_000
#: A measured lag beyond this is not perf's (a listing out of step with the capture): none is
#: applied.
LAG_MAX_NS = 50_000

#: A sample further than this before its ``OUT`` is not that switch's (it never is in practice:
#: the tracepoint fires a few microseconds before the switch record).
MAX_SAMPLE_LEAD_NS = 10_000_000

#: ``PERF_RECORD_FORK(pid:tid):(ppid:ptid)`` and ``PERF_RECORD_COMM[ exec]: comm:pid/tid``
#: (``perf script --show-task-events``): which process a thread belongs to.  The comm is the
#: target's to choose: the ids are read from the end of the line.
_FORK = re.compile(r"^PERF_RECORD_FORK\((\d+):(\d+)\):\((\d+):(\d+)\)\s*$")
_COMM = re.compile(r"^PERF_RECORD_COMM.*:(\d+)/(\d+)\s*$")
#: ``PERF_RECORD_EXIT(pid:tid):(ppid:ptid)``: the thread's last moment.  Its final switch-out
#: comes after it, when it comes at all (for some threads of a server, often not), so a
#: thread that exits is closed here and nothing of it counts afterwards.
_EXIT = re.compile(r"^PERF_RECORD_EXIT\((\d+):(\d+)\):\((\d+):(\d+)\)\s*$")

# The wakee of a ``sched:sched_wakeup`` record, anchored at the end of the line (its comm is
# chosen by the target and may hold anything, ``pid=`` included).
_WAKEE = re.compile(r"pid=(\d+) prio=-?\d+ (?:success=\d+ )?target_cpu=\d+\s*$")
#: The native reader of a block's lines (``_speedups.switch_lines``): switch records come as
#: ``(kind, pid, tid, t_ns, comm)`` tuples, read as ``SampledSched._header`` reads them (the
#: tests hold the two to the same results); ``None``: every line is read by ``_header``.
SWITCH_LINES = None if native is None else native.switch_lines
#: The native reader that also applies those records to each thread's state
#: (``_speedups.SwitchTracker``: ``_switch`` and what it calls, without a Python call per
#: record; the tests hold it to the Python reader's results); ``None``: not built, or the
#: log's ``sample`` column is not 64-bit here.
TRACKER = None if native is None or array("l").itemsize != 8 else \
    getattr(native, "SwitchTracker", None)
#: The native passes of ``finish`` over the log (``_speedups.wake_split``, ``in_caps``,
#: ``apply_lag``, ``clip_log``); ``None``: each pass in Python (the tests hold the two to the
#: same results).
PASSES = None if TRACKER is None else native
#: Ids, times and periods at or beyond this are not read (the columns hold 64-bit integers;
#: the native reader takes none of 19 digits or more).
BOUND = 1 << 62
#: ``kind`` bits of a switch record (``SampledSched._switch``).
SW_OUT, SW_PREEMPT, SW_WIDE, SW_EXIT = 1, 2, 4, 8

#: Width of the bins of ``class_bins``: a twentieth of a second, so that a window's ten
#: slices (``wallflame check``) are cut from them to within half a bin.
BIN_NS = 50_000_000


@dataclass
class _Thread:
    comm: str = ""
    pid: int = 0
    tid: int = 0
    blocked: int = 0
    runnable: int = 0
    leading: int = 0
    switches: int = 0
    samples: int = 0
    # (frames, kernel state) -> sum of period x duration of sampled blocked intervals
    stacks: dict[tuple[tuple[str, ...], str], int] = field(default_factory=dict)
    sampled_weight: int = 0
    # (frames, kernel state) -> period x duration of the runnable time behind that stack
    rstacks: dict[tuple[tuple[str, ...], str], int] = field(default_factory=dict)
    # on-CPU intervals (each IN to the next OUT) as start, end pairs; running since on_since
    on_cpu: array[int] = field(default_factory=lambda: array("q"))
    # every IN's time, in order (``SampledSched._switch_in_lag``)
    ins: array[int] = field(default_factory=lambda: array("q"))
    on_since: int | None = None
    seen: bool = False
    # (wait class, bin index) -> sum of period x the part of the interval in that bin
    bins: dict[tuple[str, int], int] = field(default_factory=dict)
    # sampled stacks only: blocked ns of unsampled intervals a snapshot's stop ended or
    # restarted (``SampledSched.set_marks``), by the snapshot's (frames, kernel state)
    known: dict[tuple[tuple[str, ...], str], int] = field(default_factory=dict)
    known_ns: int = 0
    # sampled stacks only (``_split_strata``): the blocked intervals by stratum of their
    # whole durations, and those of known stack in each (``wallflame.strata``)
    strata: Donors | None = None
    # how ``_split_strata`` split the blocked time: (ns with the stack of a stop, ns split by
    # the known waits of their own stratum, ns split over all the thread's sampled stacks or
    # left unsampled)
    split_by: tuple[int, int, int] = (0, 0, 0)
    lead_start: int = 0  # where ``leading`` began (the capture's first record)
    # an OUT without its IN yet: (time, runnable, sample or None)
    open: tuple[int, bool, tuple[tuple[str, ...], str, int] | None] | None = None
    # a sample waiting for its OUT: (time, frames, state, period)
    pending: tuple[int, tuple[str, ...], str, int] | None = None
    # exited (``PERF_RECORD_EXIT``): its final switch-out opens no interval
    gone: bool = False


class SampledSched:
    """Reads the scheduler capture chunk after chunk (``feed``), then ``finish`` once."""

    def __init__(self, rules: Rules, kernel: bool = True) -> None:
        self.rules = rules
        self.kernel = kernel
        self._threads: dict[int, _Thread] = {}
        #: ``set_marks``: tid -> (stop instants, their (frames, kernel state)), sorted
        self.marks: dict[int, tuple[array[int], list[tuple[tuple[str, ...], str]]]] = {}
        # the log's rows a stop showed, and their stacks (``_known``, then ``_log_known``)
        self.known_rows: list[tuple[int, tuple[tuple[str, ...], str]]] = []
        self.first_time: int | None = None
        self.last_time = 0
        self.lost = 0
        self.unparsed = 0
        self.inferred = 0
        self.exact = 0
        self.samples = 0
        self.periods = 0
        self.lines = 0
        #: each thread's exit (``PERF_RECORD_EXIT``), in the capture's clock
        self.exits: dict[int, int] = {}
        self.exit_switch_samples = 0
        self.window: tuple[int, int | None] | None = None
        self.at_start: set[int] | None = None
        # wake-up times per thread; None: no wake-up capture (wake-up latency then stays in
        # the blocked time, as the run's warning says)
        self.wakes: dict[int, list[int]] | None = None
        self.wake_records = 0
        self.woken = 0
        self._cur: tuple[int, int, str, int, str, int] | None = None  # pid, tid, comm, t, ...
        self._frames: list[str] = []
        #: A capture on every CPU (``PERF_RECORD_SWITCH_CPU_WIDE``,
        #: ``collect.perf.PerfOptions.switch_filter``) holds every task's switches: the
        #: target's processes are those of the threads listed when the window opened
        #: (``set_window``), and the processes they fork (task events).  Without a listing
        #: every thread counts as the target's.
        self.target_pids: set[int] = set()
        self.every_cpu = False
        self.foreign = 0
        self._skip = False
        self._frame_cache: dict[str, str | None] = {}
        self._classes: dict[tuple[tuple[str, ...], str], str] = {}
        #: blocked ns per wait class and bin (``BIN_NS``), set by ``finish``
        self.class_bins: dict[str, dict[int, int]] = {}
        #: Every interval in time order, for the run's timeline (``wallflame.timeline``).
        self._log = IntervalLog()
        #: While ``feed`` reads natively, the threads and intervals are kept by ``TRACKER``
        #: and handed over to ``threads`` and ``log`` when either is first read.
        self._tracker: Any = None
        self._handed_over = False

    @property
    def threads(self) -> dict[int, _Thread]:
        if self._tracker is not None:
            self._handover()
        return self._threads

    @property
    def log(self) -> IntervalLog:
        if self._tracker is not None:
            self._handover()
        return self._log

    def _handover(self) -> None:
        """The native tracker's threads and intervals into ``_threads`` and ``_log``; the
        capture is read in Python from then on."""
        tracker, self._tracker = self._tracker, None
        self._handed_over = True
        rows, cols = tracker.export()
        for (tid, pid, comm, switches, samples, leading, lead_start, on_since, seen, open_,
             pending, on_cpu, ins, gone) in rows:
            th = self._threads[tid] = _Thread(comm, pid, tid)
            th.switches, th.samples, th.leading, th.lead_start = (switches, samples, leading,
                                                                  lead_start)
            th.on_since, th.seen, th.open, th.pending = on_since, seen, open_, pending
            th.gone = gone
            th.on_cpu.frombytes(on_cpu)
            th.ins.frombytes(ins)
        log = self._log
        for col, data in zip((log.tid, log.start, log.dur, log.kind, log.sample, log.period),
                             cols, strict=True):
            col.frombytes(data)

    def set_window(self, start: int, end: int | None = None,
                   at_start: Iterable[int] | None = None) -> None:
        """The window (``CLOCK_MONOTONIC`` ns, perf's clock with ``-k mono``; ``end`` once it
        has closed) and the target's threads when it opened (others were created during it
        and have no leading span)."""
        self.window = (start, end)
        if at_start is not None:
            self.at_start = set(at_start)

    def expect_wakes(self) -> None:
        """A wake-up capture is (or will be) read: no warning that it is missing."""
        if self.wakes is None:
            self.wakes = {}

    def feed_wakes(self, f: BinaryIO) -> None:
        """Read one chunk of the wake-up capture's ``perf script`` text (``-F
        tid,time,event,trace --ns``): when each thread was made runnable.  The wake-ups are
        applied to the intervals at ``finish``, so chunks may come in any order."""
        self.expect_wakes()
        assert self.wakes is not None
        for block in line_blocks(f):
            if PASSES is None:
                self._wake_lines(block.decode("utf-8", "replace").split("\n"))
                continue
            _runs(block, self._wake_run, lambda line: self._wake_lines((line,)))

    def _wake_run(self, block: bytes, pos: int) -> int:
        assert PASSES is not None
        pos, records, unparsed = PASSES.wake_run(block, pos, self.wakes)
        self.wake_records += records
        self.unparsed += unparsed
        return int(pos)

    def _wake_lines(self, lines: Iterable[str]) -> None:
        assert self.wakes is not None
        for line in lines:
            m = WAKE_HEADER_RE.match(line)
            if m is None:
                continue
            w = _WAKEE.search(m.group(4))
            if w is None:
                self.unparsed += 1
                continue
            self.wake_records += 1
            t = int(m.group(2)) * 1_000_000_000 + int(m.group(3))
            self.wakes.setdefault(int(w.group(1)), []).append(t)

    # -- input ----------------------------------------------------------------------------

    def feed(self, f: BinaryIO, native_lines: bool = True, switches: Any = None) -> None:
        """Read one chunk's ``perf script`` text (a file or a pipe) to its end
        (``native_lines``: with ``TRACKER``, or ``SWITCH_LINES``, where it is built).
        ``switches``: the chunk's switch records as ``read_switches`` read them from its
        perf.data (the text then holds none), applied in time order among the text's
        records."""
        if (native_lines or switches is not None) and TRACKER is not None and \
                self._tracker is None and not self._handed_over and not self._threads and \
                not len(self._log):
            self._tracker = TRACKER(self._log.samples, self._log._index)
        if switches is not None:
            self._feed_merged(f, self._tracker or _Records(), switches)
            return
        if native_lines and self._tracker is not None:
            for block in line_blocks(f):
                self._feed_tracked(self._tracker, block)
            self._end_sample()
            return
        split = SWITCH_LINES if native_lines else None
        for block in line_blocks(f):
            if split is not None:
                self.feed_lines(split(block))
            else:
                self.feed_lines(block.decode("utf-8", "replace").split("\n"))
        self._end_sample()

    def _feed_merged(self, f: BinaryIO, tracker: Any, switches: Any) -> None:
        """The text's lines (stack samples, task events, lost records), each header after
        the switch records before its time."""
        tracker.load(*switches)
        for block in line_blocks(f):
            for line in block.decode("utf-8", "replace").split("\n"):
                if line and line[0] != "\t":
                    m = NS_HEADER_RE.match(line)
                    if m is not None:
                        self._until(tracker,
                                    int(m.group(4)) * 1_000_000_000 + int(m.group(5)))
                self.feed_lines((line,))
        self._until(tracker, None)
        self._end_sample()

    def _until(self, tracker: Any, t: int | None) -> None:
        """The records before ``t`` (``None``: all), ``UNTIL_BATCH`` at a time: between two
        calls the interpreter lets the collect's other threads run (a call holds its lock)."""
        while tracker.until(self, t, UNTIL_BATCH) == UNTIL_BATCH:
            pass

    def _feed_tracked(self, tracker: Any, block: bytes) -> None:
        """A block's lines as ``feed_lines`` reads them: the runs of switch records by the
        tracker, every other line here."""
        _runs(block, lambda b, pos: int(tracker.run(self, b, pos)),
              lambda line: self.feed_lines((line,)))

    def feed_lines(self, lines: Iterable[str | tuple[int, int, int, int, str]]) -> None:
        cache = self._frame_cache
        targets = self.target_pids
        for line in lines:
            self.lines += 1
            if isinstance(line, tuple):  # a switch record, read natively
                if self._cur is not None:
                    self._end_sample()
                self._skip = False
                kind, pid, tid = line[0], line[1], line[2]
                if kind & SW_WIDE and not (pid in targets and pid > 0 and tid > 0) and \
                        not self._target(pid, tid):  # another task's, as ``_switch`` finds
                    self.every_cpu = True
                    self.foreign += 1
                    continue
                self._switch(*line)
                continue
            if not line:
                self._end_sample()
                continue
            if line[0] == "\t" and self._skip:  # the call chain of another task's sample
                continue
            if line[0] == "\t" and self._cur is not None:  # a call-chain line
                name = cache.get(line, "\0")
                if name == "\0":
                    if len(cache) > 1 << 16:
                        cache.clear()
                    name = cache[line] = frame_name(line, self.kernel)
                if name:
                    self._frames.append(name)
                continue
            self._end_sample()
            self._skip = False
            self._header(line)

    def _header(self, line: str) -> None:
        m = NS_HEADER_RE.match(line)
        if m is None:
            if line.startswith("#") or not line.strip():
                return
            self.unparsed += 1
            return
        comm, pid, tid = m.group(1).strip(), int(m.group(2)), int(m.group(3))
        t = int(m.group(4)) * 1_000_000_000 + int(m.group(5))
        if not (-BOUND < pid < BOUND and -BOUND < tid < BOUND and t < BOUND):
            self.unparsed += 1  # no perf writes these: kept out of the 64-bit columns
            return
        rest = m.group(6)
        if rest.startswith(("PERF_RECORD_FORK", "PERF_RECORD_COMM")):
            self._task(rest, t)
            return
        if rest.startswith("PERF_RECORD_EXIT"):
            x = _EXIT.match(rest)
            if x is not None and -BOUND < int(x.group(2)) < BOUND and \
                    -BOUND < int(x.group(1)) < BOUND:
                self.exits[int(x.group(2))] = t
                self._switch(SW_EXIT | (SW_WIDE if self.every_cpu else 0), int(x.group(1)),
                             int(x.group(2)), t, comm)
            else:
                self.unparsed += 1
            return
        wide = rest.startswith("PERF_RECORD_SWITCH_CPU_WIDE")
        if wide:
            rest = "PERF_RECORD_SWITCH" + rest[len("PERF_RECORD_SWITCH_CPU_WIDE"):]
        if rest.startswith("PERF_RECORD_SWITCH"):
            words = rest.split()
            switch = len(words) >= 2 and words[0] == "PERF_RECORD_SWITCH"
            if switch and words[1] in ("IN", "OUT"):
                kind = SW_WIDE if wide else 0
                if words[1] == "OUT":
                    kind |= SW_OUT | (SW_PREEMPT if len(words) > 2 and words[2] == "preempt"
                                      else 0)
                self._switch(kind, pid, tid, t, comm)
            elif self._record(wide, pid, tid, t) and not switch:
                self.unparsed += 1
            return
        if not self._record(wide, pid, tid, t):
            return
        if rest.startswith("PERF_RECORD_LOST"):
            lm = LOST_RE.search(rest)
            self.lost += int(lm.group(1)) if lm else 1
            return
        if rest.startswith("PERF_RECORD_"):
            return
        pm = NS_PERIOD_EVENT_RE.match(rest)
        if pm is None or pm.group(2) != "sched:sched_switch":
            self.unparsed += 1
            return
        fields = parse_switch_fields(pm.group(3))
        if fields is not None and tid == -1 and fields[0] in self.exits:
            # the final switch of a thread that has exited: perf no longer names it (tid -1);
            # its time ended at the exit
            self.exit_switch_samples += 1
            self._skip = True
            return
        if fields is None or fields[0] != tid:
            self.unparsed += 1
            return
        if self.every_cpu and not self._target(pid, tid):  # let through by a merged range
            self.foreign += 1
            self._skip = True
            return
        period = int(pm.group(1))
        if period >= BOUND:
            self.unparsed += 1
            return
        self._cur = (pid, tid, comm, t, fields[1], max(1, period))
        self._frames = []

    def _record(self, wide: bool, pid: int, tid: int, t: int) -> bool:
        """Whether a record is the target's (one on every CPU may be another task's: counted
        apart); the capture's span grows to hold it."""
        if wide:
            self.every_cpu = True
            if not self._target(pid, tid):
                self.foreign += 1
                return False
        if self.first_time is None or t < self.first_time:
            self.first_time = t
        if t > self.last_time:
            self.last_time = t
        return True

    def _switch(self, kind: int, pid: int, tid: int, t: int, comm: str) -> None:
        """A switch record (``kind``: ``SW_OUT``, ``SW_PREEMPT``, ``SW_WIDE`` bits)."""
        if self._tracker is not None:
            self._tracker.switch(self, kind, pid, tid, t, comm)
            return
        if not self._record(bool(kind & SW_WIDE), pid, tid, t):
            return
        if kind & SW_EXIT:
            self._exit(tid, pid, comm, t)
        elif kind & SW_OUT:
            self._switch_out(tid, pid, comm, t, bool(kind & SW_PREEMPT))
        else:
            self._switch_in(tid, pid, comm, t)

    def _task(self, rest: str, t: int) -> None:
        """A task event: the target's processes, from the threads listed at the window's
        start, and the processes they fork during the capture (events at time 0 are perf's
        listing of what already ran when a chunk began)."""
        m = _FORK.match(rest)
        if m is not None:
            pid, tid, ppid = int(m.group(1)), int(m.group(2)), int(m.group(3))
            if t > 0 and ppid in self.target_pids:
                self.target_pids.add(pid)
            self._note(pid, tid)
            return
        c = _COMM.match(rest)
        if c is not None:
            self._note(int(c.group(1)), int(c.group(2)))

    def _note(self, pid: int, tid: int) -> None:
        if self.at_start is not None and tid in self.at_start:
            self.target_pids.add(pid)

    def _target(self, pid: int, tid: int) -> bool:
        """Whether the thread of a record on every CPU is the target's."""
        if tid <= 0 or pid <= 0:
            return False
        if self.at_start is None or pid in self.target_pids:
            return True
        if tid in self.at_start:
            self.target_pids.add(pid)
            return True
        return False

    def _end_sample(self) -> None:
        cur = self._cur
        if cur is None:
            return
        self._cur = None
        pid, tid, comm, t, state, period = cur
        frames = tuple(reversed(self._frames))
        if self._tracker is not None:
            self._tracker.pending(tid, pid, comm, t, frames, state, period)
        else:
            th = self._thread(tid, pid, comm)
            th.pending = (t, frames, state, period)
            th.samples += 1
        self.samples += 1
        self.periods += period
        self._frames = []

    def _thread(self, tid: int, pid: int, comm: str) -> _Thread:
        th = self._threads.get(tid)
        if th is None:
            th = self._threads[tid] = _Thread(comm, pid, tid)
        elif comm:
            th.comm = comm
        return th

    def _exit(self, tid: int, pid: int, comm: str, t: int) -> None:
        """The thread exits at ``t``: on-CPU until then (it runs to exit), nothing after."""
        th = self._thread(tid, pid, comm)
        self._ran_until(th, t)
        th.pending = None
        th.gone = True

    def _ran_until(self, th: _Thread, t: int) -> None:
        """The thread stops running at ``t`` (a switch-out or its exit): its on-CPU interval
        ends, and an OUT whose IN is missing is closed (it ran again by now)."""
        since = th.on_since
        if since is None and not th.seen and self._existed(th.tid):
            # running since before the capture (clipped to the window at the end)
            since = self.window[0] if self.window is not None else (self.first_time or t)
        if since is not None and t > since:
            th.on_cpu.extend((since, t))
        th.on_since = None
        th.seen = True
        if th.open is not None:
            self._close(th, t, exact=False)

    def _switch_out(self, tid: int, pid: int, comm: str, t: int, preempt: bool) -> None:
        th = self._thread(tid, pid, comm)
        if th.gone:  # the final switch-out after its exit
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
        th.gone = False  # its TID taken again by a new thread
        th.ins.append(t)
        th.on_since = t
        if th.open is not None:
            self._close(th, t, exact=True)

    def _alive(self, th: _Thread, window: tuple[int, int] | None) -> int | None:
        """How much of the window a thread that began or ended within it lived: from its
        first switch-in (a thread not listed when the window opened) to its exit; None for
        one that lived through the window (or without a window to measure it in)."""
        if window is None:
            return None
        start, end = window
        born = th.ins[0] if not self._existed(th.tid) and th.ins else start
        died = self.exits.get(th.tid, end)
        if not th.gone and th.tid in self.exits and th.ins and th.ins[-1] > died:
            died = end  # its TID taken again after the exit: a thread alive at the end
        if born <= start and died >= end:
            return None
        return max(0, min(died, end) - max(born, start))

    def _existed(self, tid: int) -> bool:
        """Whether ``tid`` existed when the window opened (unknown: assume it did)."""
        return self.at_start is None or tid in self.at_start

    def _apply_wakes(self) -> None:
        """End each blocked interval at the thread's last wake-up inside it: the rest, to its
        switch-in, is runnable (logged with the same stack, the log kept in time order)."""
        wakes = self.wakes
        if not wakes:
            return
        for tid in wakes:
            wakes[tid].sort()
        log = self.log
        if PASSES is not None:
            got = PASSES.wake_split(log.tid, log.start, log.dur, log.kind, log.sample,
                                    log.period, wakes)
            if got is not None:
                self.woken += got[0]
                for name, data in zip(("tid", "start", "dur", "kind", "sample", "period"),
                                      got[1:], strict=True):
                    col = array(getattr(log, name).typecode)
                    col.frombytes(data)
                    setattr(log, name, col)
            return
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
            _merge_log(log, extra)

    def _switch_in_lag(self, listings: dict[str, Any]) -> dict[str, Any]:
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
        rows = [{int(r["tid"]): r for r in (listings.get(when) or {}).get("threads") or []
                 if isinstance(r, dict) and "tid" in r and r.get("schedstat")}
                for when in ("start", "end")]
        mono = [int((listings.get(when) or {}).get("mono_ns") or 0) for when in ("start", "end")]
        caps = self._in_caps()
        kernel_minus = 0
        offs: list[int] = []
        ons: list[int] = []
        used = 0
        for tid, a in rows[0].items():
            b, th = rows[1].get(tid), self.threads.get(tid)
            lo = int(a.get("schedstat_ns") or mono[0])
            hi = int((b or {}).get("schedstat_ns") or mono[1])
            if b is None or th is None or hi <= lo:
                continue
            used += 1
            kernel_minus += (int(b["schedstat"][0]) - int(a["schedstat"][0])
                             - _clipped_sum(th.on_cpu, (lo, hi)))
            off, on = caps[tid][0], caps[tid][2]
            j0, j1 = bisect_left(th.ins, lo), bisect_left(th.ins, hi)
            offs.extend(off[j0:j1])
            ons.extend(on[j0:j1])
        out: dict[str, Any] = {"threads": used, "switch_ins": len(offs),
                               "kernel_minus_switches_ns": kernel_minus, "ns": 0,
                               "applied": False}
        if len(offs) < LAG_MIN_SWITCH_INS:
            return out
        lag = (_level(offs, kernel_minus) if kernel_minus >= 0
               else -_level(ons, -kernel_minus))
        out["ns"] = lag
        if not lag or abs(lag) > LAG_MAX_NS:
            return out
        moved = 0
        for tid, (off, at, on, pair) in caps.items():
            pairs = self.threads[tid].on_cpu
            if PASSES is not None:
                moved += PASSES.apply_lag(lag, off, at, on, pair, self.log.dur, pairs)
                continue
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

    def _in_caps(self) -> dict[int, tuple[array[int], array[int], array[int], array[int]]]:
        """Per thread, per switch-in (``ins``, put in order): the length of the logged
        off-CPU interval it ends and that interval's index in the log (-1: none), the length
        of the on-CPU interval it starts and that interval's start's index in ``on_cpu``."""
        caps: dict[int, tuple[array[int], array[int], array[int], array[int]]] = {}
        log = self.log
        if PASSES is not None:
            tids = list(self.threads)
            for th in self.threads.values():
                th.ins = array("q", sorted(th.ins))
            got = PASSES.in_caps(tids, [self.threads[t].ins for t in tids],
                                 [self.threads[t].on_cpu for t in tids], log.tid, log.start,
                                 log.dur)
            for tid, parts in zip(tids, got, strict=True):
                cols = []
                for data in parts:
                    col = array("q")
                    col.frombytes(data)
                    cols.append(col)
                caps[tid] = (cols[0], cols[1], cols[2], cols[3])
            return caps
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

    def _close(self, th: _Thread, t: int, exact: bool) -> None:
        assert th.open is not None
        start, runnable, sample = th.open
        th.open = None
        d = t - start
        if d <= 0:
            return
        if exact:
            self.exact += 1
        else:
            self.inferred += 1
        # the totals, stacks and bins are made from the log (``_clip``)
        self._log.add(th.tid, start, d, LOG_RUNNABLE if runnable else LOG_BLOCKED, sample)

    def _class_of(self, key: tuple[tuple[str, ...], str]) -> str:
        wait = self._classes.get(key)
        if wait is None:
            wait = self._classes[key] = classify(key[0], key[1], self.rules)
        return wait

    def _clip(self, profile: Profile, start: int, end: int) -> None:
        """Each thread's totals again, from the logged intervals clipped to ``[start, end)``:
        perf records before the window opens and goes on until it has stopped (0.6 s past
        the window's end on a loaded machine), which counted as the threads' time.  What
        fell outside is kept in ``meta.extra["outside_window"]``."""
        log = self.log
        for th in self.threads.values():
            th.blocked = th.runnable = th.leading = th.sampled_weight = 0
            th.stacks, th.bins, th.rstacks = {}, {}, {}
            th.known, th.known_ns = {}, 0
            th.strata = None
            th.split_by = (0, 0, 0)
            th.lead_start = max(th.lead_start, start)
        # With sampled stacks (a period above 1), the unsampled intervals long enough to have
        # been ended or restarted by a snapshot's stop are matched to the stops (``_known``),
        # and each thread's blocked time is split stratum by stratum (``_split_strata``).
        stratified = max(log.period, default=0) > 1
        marks = self.marks if stratified else {}
        candidates: list[tuple[int, int, int, int]] = []  # (row, start, dur, clipped)
        self.known_rows = []
        outside = 0
        runnable_bins: dict[tuple[str, int], int] = {}
        rows: Iterable[int] = range(len(log))
        if PASSES is not None:  # the totals and runnable bins; the sampled rows below
            outside, totals, rbins, sampled, by_stratum = PASSES.clip_log(
                log.tid, log.start, log.dur, log.kind, log.sample, start, end, BIN_NS,
                MARK_MIN_NS if marks else 0)
            per = array("q")
            per.frombytes(by_stratum)
            for r, (tid, blocked, runnable, leading) in enumerate(totals):
                th = self.threads[tid]
                th.blocked, th.runnable, th.leading = blocked, runnable, leading
                if stratified and blocked:  # as the Python pass: a thread with a wait
                    th.strata = Donors()
                    row = per[r * N_STRATA:(r + 1) * N_STRATA]
                    th.strata.total = {b: ns for b, ns in enumerate(row) if ns}
            runnable_bins = {(RUNNABLE, b): ns for b, ns in rbins}
            rows = array("q")
            rows.frombytes(sampled)
        for i in rows:
            s, d = log.start[i], log.dur[i]
            c = max(0, min(end, s + d) - max(start, s))
            if PASSES is None:
                outside += d - c
            if not c:
                continue
            th = self.threads[log.tid[i]]
            kind = log.kind[i]
            if kind == LOG_RUNNABLE:
                if PASSES is None:
                    th.runnable += c
                    # runnable time is exact per interval: its bins need no scaling
                    _add_to_bins(runnable_bins, RUNNABLE, max(s, start), min(s + d, end), 1)
                si = log.sample[i]
                if si >= 0:
                    key = log.samples[si]
                    th.rstacks[key] = th.rstacks.get(key, 0) + max(1, log.period[i]) * c
            elif kind == LOG_LEADING:
                if PASSES is None:
                    th.leading += c
            else:
                if PASSES is None:
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
                if not p:  # a stop's wait (``_known``, finished before): its own stack
                    self._show(th, key, s, d, c, start, end)
                    continue
                th.stacks[key] = th.stacks.get(key, 0) + p * c
                th.sampled_weight += p * c
                if th.strata is not None:
                    th.strata.sample(d, key, p * c)
                _add_to_bins(th.bins, self._class_of(key), max(s, start), min(s + d, end), p)
        if candidates:
            self._known(candidates, start, end)
        out = profile.meta.extra.setdefault("outside_window", {})
        out["sched_ns"] = out.get("sched_ns", 0) + outside
        for (cls, b), ns in runnable_bins.items():
            bins = self.class_bins.setdefault(cls, {})
            bins[b] = bins.get(b, 0) + ns

    def set_marks(self, marks: list[Any]) -> None:
        """The snapshots' blocked threads at the instant each was stopped
        (``wallflame.stops.STOP_MARKS``: ``[tid, mono_ns, frames, kernel state]``), on this
        capture's clock.  A stop interrupts the wait it finds a thread in: the interval that
        ends just before it and the one that starts just after it (the wait restarted) are
        that wait, whose stack the snapshot read."""
        by: dict[int, list[tuple[int, tuple[tuple[str, ...], str]]]] = {}
        for m in marks:
            try:
                tid, at, frames, state = int(m[0]), int(m[1]), m[2], str(m[3])
            except (TypeError, ValueError, IndexError):
                continue
            if isinstance(frames, list) and frames:
                by.setdefault(tid, []).append((at, (tuple(str(f) for f in frames), state)))
        self.marks = {tid: (array("q", [a for a, _ in v]), [k for _, k in v])
                      for tid, v in ((t, sorted(v)) for t, v in by.items())}

    def _known(self, candidates: list[tuple[int, int, int, int]], start: int, end: int
               ) -> None:
        """The unsampled intervals (``(tid, start, dur, clipped)``, in the log's order) that a
        snapshot's stop ended or restarted (``set_marks``), whose stack is known
        (``_Thread.known``): for each stop, the last interval of its thread that ended within
        ``MARK_WINDOW_NS`` before it, and the first that started within that after it."""
        marks = self.marks
        win = MARK_WINDOW_NS
        # (tid, stop, 0: the wait it ended / 1: the wait it restarted) -> (distance, candidate)
        best: dict[tuple[int, int, int], tuple[int, int]] = {}
        on: dict[int, tuple[array[int], array[int]]] = {}  # tid -> on-CPU starts, ends
        for r, (row, s, d, _) in enumerate(candidates):
            tid = self.log.tid[row]
            at = marks[tid][0]
            e = s + d
            if tid not in on:
                pairs = self.threads[tid].on_cpu
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
        for r, (tid, stop) in chosen.items():
            key = marks[tid][1][stop]
            row, s, d, c = candidates[r]
            self._show(self.threads[tid], key, s, d, c, start, end)
            self.known_rows.append((row, key))

    def _show(self, th: _Thread, key: tuple[tuple[str, ...], str], s: int, d: int, c: int,
              start: int, end: int) -> None:
        """An interval whose own stack ``key`` a stop showed: ``c`` ns of it in the window."""
        th.known[key] = th.known.get(key, 0) + c
        th.known_ns += c
        if th.strata is not None:
            th.strata.show(d, key, c)
        # its own time in the class bins (weight 1: it stands for itself alone)
        _add_to_bins(th.bins, self._class_of(key), max(s, start), min(s + d, end), 1)

    def _log_known(self) -> None:
        """Give the intervals a stop showed (``_known``) their stack in the log, with period
        0 (it stands for itself alone), so that the timeline's spans carry it."""
        log = self.log
        for row, key in self.known_rows:
            log.sample[row] = log.intern(key)
            log.period[row] = 0
        self.known_rows = []

    # -- output ---------------------------------------------------------------------------

    def finish(self, profile: Profile, sampling: dict[str, object] | None = None,
               window: tuple[int, int] | None = None,
               listings: dict[str, Any] | None = None) -> None:
        """Close open intervals at the last record and add the off-CPU stacks, the run-queue
        time and the scheduler's figures to ``profile``; with ``window`` (the collect's
        bounds in the capture's clock) only the part of each interval inside it.  With
        ``listings`` (``raw/capture.json`` ``threads``, on the capture's clock) each switch-in
        is moved by perf's lag, measured against the kernel's run time
        (``_switch_in_lag``)."""
        if window is None and self.window is not None and self.window[1] is not None:
            window = (self.window[0], self.window[1])
        end = window[1] if window is not None else self.last_time
        closed_at_end = 0
        for th in self.threads.values():
            if th.open is not None:
                closed_at_end += 1
                self._close(th, max(end, th.open[0]), exact=True)
            if th.on_since is not None and end > th.on_since:
                th.on_cpu.extend((th.on_since, end))
            th.on_since = None
        self._apply_wakes()
        lag = self._switch_in_lag(listings) if listings else None
        # the totals again from the log: clipped to the window, with the runnable stacks
        self._clip(profile, *(window or (-(1 << 62), 1 << 62)))
        self._log_known()
        meta = profile.meta
        rq = meta.extra.setdefault("runqueue_ns", {})
        exact = meta.extra.setdefault("sched_threads", {})
        unsampled_ns = 0
        leading_ns = 0
        switch_outs = 0
        split_by = [0, 0, 0]
        for tid in sorted(self.threads):
            th = self.threads[tid]
            if not th.seen:  # a stack sample alone, before the capture was known to be on
                continue     # every CPU: another task's
            switch_outs += th.switches
            meta.threads[tid] = th.comm
            if th.runnable:
                rq[str(tid)] = rq.get(str(tid), 0) + th.runnable
            exact[str(tid)] = {"on_ns": _clipped_sum(th.on_cpu, window),
                               "runnable_ns": th.runnable,
                               "blocked_ns": th.blocked + th.leading}
            alive = self._alive(th, window)
            if alive is not None:
                exact[str(tid)]["alive_ns"] = alive
            self._split_runnable(profile, th)
            total = th.blocked + th.leading
            leading_ns += th.leading
            if not total:
                continue
            split, unsampled = _blocked_split(th)
            unsampled_ns += unsampled
            for k, ns in enumerate(th.split_by):
                split_by[k] += ns
            per_class: dict[str, int] = {}
            for key, part in split:
                if not part:
                    continue
                wait = self._class_of(key)
                per_class[wait] = per_class.get(wait, 0) + part
                profile.add(StackKey(key[0], tid, th.comm, th.pid, OFF, wait), part)
            self._bin_thread(th, per_class)
        # The independent evidence behind the split over stacks is the sampled switches.
        meta.count("sched_switch", self.samples)
        sched = meta.extra.setdefault("sched", {})
        sched.update({"switch_outs": switch_outs, "exact_switch_in": self.exact,
                      "inferred_switch_in": self.inferred, "closed_at_end": closed_at_end,
                      "exited_threads": sum(1 for t in self.exits if t in self.threads),
                      "exit_switch_samples": self.exit_switch_samples,
                      "stack_samples": self.samples, "sampled_switches": self.periods,
                      "leading_ns": leading_ns, "unsampled_ns": unsampled_ns,
                      "wakeups": self.wake_records if self.wakes is not None else None,
                      "woken_intervals": self.woken, "switch_in_lag": lag,
                      "every_cpu": self.every_cpu, "other_tasks_records": self.foreign,
                      **(sampling or {})})
        if any(split_by):  # sampled stacks: how the blocked time was split (``_split_strata``)
            sched["split"] = {"stop_ns": split_by[0], "stratum_ns": split_by[1],
                              "pooled_ns": split_by[2]}
        if self.wakes is None and self.threads:
            meta.warn("no wake-up capture: the time from a blocked thread's wake-up to its "
                      "switch-in (waiting for a CPU) is counted as blocked, not runnable")
        if self.lost:
            meta.lose("lost perf events (PERF_RECORD_LOST)", 0, self.lost)
        if self.unparsed:
            meta.lose("unparsed scheduler record", 0, self.unparsed)
        if self.inferred:
            meta.warn(f"{self.inferred} of {self.exact + self.inferred} off-CPU intervals had "
                      "no switch-in record and were closed at the thread's next switch-out")
        if unsampled_ns:
            meta.warn(f"{unsampled_ns / 1e9:.3f} s of blocked time belongs to threads none of "
                      f"whose switches was sampled with a stack ({UNSAMPLED}, unless "
                      "snapshots caught those threads blocked)")

    def _split_runnable(self, profile: Profile, th: _Thread) -> None:
        """A thread's runnable time over the stacks it was preempted or blocked at (those of
        its blocked time when none of its runnable intervals was sampled)."""
        total = th.runnable
        if not total:
            return
        parts = sorted((th.rstacks or th.stacks).items())
        if not sum(w for _, w in parts):
            parts = [(((UNSAMPLED,), ""), 1)]
        for key, part in shares(parts, total):
            profile.add(StackKey(key[0], th.tid, th.comm, th.pid, OFF, RUNNABLE), part)

    def _bin_thread(self, th: _Thread, per_class: dict[str, int]) -> None:
        """Add a thread's blocked time per class to ``class_bins``.  Its time in each class
        (``per_class``: the split over stacks) is shared between its intervals and the span
        before its first record in proportion to their lengths; the intervals' part goes to
        the bins where that class was sampled, in proportion to the sampled weight there
        (unsampled intervals stand with the sampled ones, as in the split), the leading part
        evenly over the leading span."""
        sampled: dict[str, int] = {}
        for (cls, _), w in th.bins.items():
            sampled[cls] = sampled.get(cls, 0) + w
        total = th.blocked + th.leading
        lead: dict[tuple[str, int], int] = {}
        for cls, ns in per_class.items():
            if ns and th.leading and total:
                _add_to_bins(lead, cls, th.lead_start, th.lead_start + th.leading, 1)
        for (cls, b), w in lead.items():
            out = self.class_bins.setdefault(cls, {})
            out[b] = out.get(b, 0) + per_class[cls] * th.leading * w // (total * th.leading)
        for (cls, b), w in th.bins.items():
            if sampled[cls] and per_class.get(cls):
                out = self.class_bins.setdefault(cls, {})
                out[b] = out.get(b, 0) + per_class[cls] * th.blocked * w // (
                    total * sampled[cls])


def _split_blocked(parts: list[tuple[tuple[tuple[str, ...], str], int]], blocked: int,
                   leading: int) -> list[tuple[tuple[tuple[str, ...], str], int]]:
    """A thread's blocked time (``blocked`` in its intervals, ``leading`` before its first
    record) over its sampled stacks, in proportion to their weights.  A stop of the collect's
    own tracer gets its share of the intervals only: the time before the thread's first record
    was spent in a wait of its own (the tracer had not stopped it yet), so it goes to the
    other stacks, or to ``[unsampled]`` when there are none."""
    stop_w = sum(w for key, w in parts if stops.is_tracer_stop(key[0]))
    if not leading or not stop_w:
        return shares(parts, blocked + leading)
    denom = sum(w for _, w in parts)
    stop_ns = blocked * stop_w // denom
    rest = [(key, w) for key, w in parts if not stops.is_tracer_stop(key[0])]
    if not rest:
        rest = [(((UNSAMPLED,), ""), 1)]
    return (shares([(k, w) for k, w in parts if stops.is_tracer_stop(k[0])], stop_ns)
            + shares(rest, blocked + leading - stop_ns))


#: A snapshot's stop (``SampledSched.set_marks``) ends the wait it interrupts within this of
#: the instant its registers were read (0.2-1.7 ms on a busy server: the wake-up, then waiting
#: for a CPU, before the stop), and the restarted wait begins within it after.
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


def _blocked_split(th: _Thread) -> tuple[list[tuple[tuple[tuple[str, ...], str], int]], int]:
    """A thread's blocked time (in its intervals and before its first record) over stacks,
    and how much of it had none (``[unsampled]``): the intervals whose stack a snapshot's
    stop showed (``_Thread.known``) exactly, the rest over the sampled stacks, stratum by
    stratum of the intervals' durations when the stacks were sampled (``_split_strata``)."""
    if th.strata:
        return _split_strata(th)
    parts = sorted(th.stacks.items())
    unsampled = 0
    if not th.sampled_weight:
        parts = [(((UNSAMPLED,), ""), 1)]
        unsampled = th.blocked + th.leading - th.known_ns
    if not th.known_ns:
        return _split_blocked(parts, th.blocked, th.leading), unsampled
    out = dict(th.known)
    for key, part in _split_blocked(parts, th.blocked - th.known_ns, th.leading):
        out[key] = out.get(key, 0) + part
    return sorted((key, ns) for key, ns in out.items() if ns), unsampled


def _split_strata(th: _Thread
                  ) -> tuple[list[tuple[tuple[tuple[str, ...], str], int]], int]:
    """``_blocked_split`` with sampled stacks, stratum by stratum of the intervals' whole
    durations (``wallflame.strata``): every interval's duration is exact, only some have a
    stack.

    In each stratum the intervals whose stack is known (a snapshot's stop: ``_Thread.known``)
    keep it, and the rest of the stratum's time goes over the stacks of the intervals of that
    stratum with one: the sampled intervals in proportion to period x duration, the known
    ones to duration, the two estimates weighted by how many intervals each holds.  A wait's
    kind goes with how long it lasts (a sleep of 300 ms is not the 1 ms condition-variable
    wait that follows it, however often the sampling falls on the latter), so a few sampled
    short waits no longer stand for the long ones of another kind.  The time of strata with
    no such interval, and before the thread's first record, goes over all the thread's
    sampled stacks (``_split_blocked``), or is ``[unsampled]`` when it has none.  The parts
    sum to the thread's exact blocked time."""
    assert th.strata is not None
    out, leftover, by_stratum = strata.split(th.strata)
    th.split_by = (th.known_ns, by_stratum, leftover + th.leading)
    unsampled = 0
    parts = sorted(th.stacks.items())
    if not th.sampled_weight:
        parts = [(((UNSAMPLED,), ""), 1)]
        unsampled = leftover + th.leading
    for key, part in _split_blocked(parts, leftover, th.leading):
        out[key] = out.get(key, 0) + part
    return sorted((key, ns) for key, ns in out.items() if ns), unsampled


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


def _clipped_sum(pairs: array[int], window: tuple[int, int] | None) -> int:
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


def _merge_log(log: IntervalLog, extra: list[tuple[int, int, int, int, int, int]]) -> None:
    """Add ``(start, tid, dur, kind, sample, period)`` rows to ``log``, all in start order
    (rows that start together keep the log's order, then ``extra``'s)."""
    names = ("start", "tid", "dur", "kind", "sample", "period")
    cols = [getattr(log, name) for name in names]
    if extra:
        for col, values in zip(cols, zip(*extra, strict=True), strict=True):
            col.extend(values)
    if not cols[0]:
        return
    # Sorted as plain integers, the start above the row's index (so ties keep their order):
    # a quarter faster than sorting rows or indices by a key, on a minute of a busy server.
    starts = cols[0]
    bits = len(starts).bit_length()
    mask, base = (1 << bits) - 1, min(starts)
    order = [k & mask for k in sorted([(s - base) << bits | i for i, s in enumerate(starts)])]
    for name, col in zip(names, cols, strict=True):
        setattr(log, name, array(col.typecode, map(col.__getitem__, order)))


def _add_to_bins(bins: dict[tuple[str, int], int], cls: str, start: int, end: int,
                 period: int) -> None:
    """``period x`` the part of ``[start, end)`` in each bin of ``BIN_NS``."""
    b = start // BIN_NS
    while start < end:
        edge = min(end, (b + 1) * BIN_NS)
        key = (cls, b)
        bins[key] = bins.get(key, 0) + period * (edge - start)
        start = edge
        b += 1


def _runs(block: bytes, step: Callable[[bytes, int], int], line: Callable[[str], None]) -> None:
    """A block's lines: runs of them read natively by ``step`` (from a position to where the
    first line it leaves starts; ``len(block) + 1`` when it leaves none), each line it leaves
    by ``line``, in order."""
    pos, n = 0, len(block)
    while pos <= n:
        pos = step(block, pos)
        if pos > n:
            return
        nl = block.find(b"\n", pos)
        end = n if nl < 0 else nl
        line(block[pos:end].decode("utf-8", "replace"))
        if nl < 0:
            return
        pos = nl + 1


#: Records applied per call of ``SwitchTracker.until`` (about 10 ms of a busy server's chunk).
UNTIL_BATCH = 32_768

#: One record of ``_speedups.perf_switches``: time, order in the file, kind, pid, tid, and
#: two more (a COMM record: the thread and the index of its name; a FORK: the thread and
#: the thread that made it).
_REC = struct.Struct("=qqiiiiii")


class _Records:
    """``SwitchTracker.load`` and ``until`` in Python, for a capture read by the Python
    reader (``SampledSched``'s state in Python): each switch record goes to ``_switch`` with
    the name perf gives its thread."""

    def __init__(self) -> None:
        self.recs: list[tuple[int, ...]] = []
        self.comms: list[str] = []
        self.pos = 0
        self.names: dict[int, str] = {}

    def load(self, recs: bytes, comms: list[str]) -> None:
        self.recs = [r for r in _REC.iter_unpack(recs)]
        self.comms, self.pos = comms, 0

    def until(self, sched: SampledSched, t: int | None, most: int) -> int:
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


def read_switches(chunk: Path) -> Any:
    """The switch records of one chunk of the scheduler's perf.data, read from the file
    (``_speedups.perf_switches``), for ``SampledSched.feed``; ``None``: read them from
    ``perf script``'s text (the native module is not built, the file is not one the reader
    takes, or it cannot be read)."""
    if PASSES is None or getattr(PASSES, "perf_switches", None) is None:
        return None
    try:
        return PASSES.perf_switches(str(chunk))
    except OSError:
        return None


__all__ = ["BIN_NS", "SCHED_BINS", "UNSAMPLED", "SampledSched", "read_switches", "shares"]
