"""The scheduler capture read chunk after chunk: switch records, stack samples, task events
and wake-ups, into each thread's state and the interval log.

* The switch records are applied to each thread natively (``_speedups.SwitchTracker``:
  which interval each ``OUT`` and ``IN`` opens and closes), whether they come as text
  (``SwitchTracker.run`` takes the runs of lines it reads as switch records) or from the
  chunk's perf.data (``_speedups.perf_switches``, then ``SwitchTracker.until``, in time
  order among the text's records).
* The lines the native reader leaves are read here, and this is their only reader: stack
  samples and their call chains, task events (``FORK``, ``COMM``, ``EXIT``), lost records,
  and switch records it does not take (a comm out of printable ASCII, a number of 19 digits
  or more), which ``_header`` parses and hands to the tracker one by one.
* The wake-up capture: ``_speedups.wake_run`` reads the runs of lines it takes, and
  ``_wake_lines`` every other line (the only reader of those).

The threads and the log are handed over to Python (``threads``, ``log``) when first read,
which ``finish`` does once every chunk is in."""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from wallflame.classify import Rules
from wallflame.fold.perf.lines import (
    LOST_RE,
    NS_HEADER_RE,
    NS_PERIOD_EVENT_RE,
    WAKE_HEADER_RE,
    frame_name,
)
from wallflame.fold.perf.sched_thread import SchedThread, from_export
from wallflame.fold.perf.switches import parse_switch_fields
from wallflame.speedups import native
from wallflame.textio import line_blocks
from wallflame.timeline import WAKER_MARKS, WAKER_TIMER, IntervalLog

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
_WAKEE = re.compile(r"pid=(\d+) prio=-?\d+ (?:success=\d+ )?target_cpu=\d+"
                    r"(?: +[0-9a-f]+ +\S+)?\s*$")

#: Ids, times and periods at or beyond this are not read (the columns hold 64-bit integers).
#: A wake-up beyond it is counted but not kept: no interval's thread or time reaches it.
BOUND = 1 << 62
#: ``kind`` bits of a switch record (``SwitchTracker.switch``).
SW_OUT, SW_PREEMPT, SW_WIDE, SW_EXIT = 1, 2, 4, 8
#: Records applied per call of ``SwitchTracker.until`` (about 10 ms of a busy server's chunk).
UNTIL_BATCH = 32_768


class SchedReader:
    """The capture's records so far: counters, the target's processes, and (natively, until
    ``threads`` or ``log`` is first read) each thread's state and the interval log."""

    def __init__(self, rules: Rules, kernel: bool = True) -> None:
        self.rules = rules
        self.kernel = kernel
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
        #: per thread, each ``sched_waking`` as a flat pair ``[time, waker tid, ...]``: the
        #: task that woke it (``wallflame.timeline.ThreadLine.wakes``)
        self.wakers: dict[int, list[int]] = {}
        self._waking = [-1]  # the wakee of the waking whose call chain is being read
        self.wake_records = 0
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
        #: Every interval in time order, for the run's timeline (``wallflame.timeline``); its
        #: sample column 64-bit on every platform, as the native passes read it.
        self._log = IntervalLog()
        self._log.sample = array("q")
        self._threads: dict[int, SchedThread] = {}
        #: The native tracker keeps the threads and intervals while the capture is read, and
        #: hands them over to ``threads`` and ``log`` when either is first read.
        self._tracker: Any = native.SwitchTracker(self._log.samples, self._log._index)

    @property
    def threads(self) -> dict[int, SchedThread]:
        if self._tracker is not None:
            self._handover()
        return self._threads

    @property
    def log(self) -> IntervalLog:
        if self._tracker is not None:
            self._handover()
        return self._log

    def _handover(self) -> None:
        """The native tracker's threads and intervals into ``_threads`` and ``_log``; no
        capture is read after this."""
        tracker, self._tracker = self._tracker, None
        rows, cols = tracker.export()
        self._threads = from_export(rows)
        log = self._log
        for col, data in zip((log.tid, log.start, log.dur, log.kind, log.sample, log.period),
                             cols, strict=True):
            col.frombytes(data)

    def _reading(self) -> Any:
        """The tracker, while the capture is being read."""
        if self._tracker is None:
            raise RuntimeError("the scheduler capture is read before its threads or log")
        return self._tracker

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

    # -- the wake-up capture --------------------------------------------------------------

    def feed_wakes(self, f: BinaryIO) -> None:
        """Read one chunk of the wake-up capture's ``perf script`` text (``-F
        tid,time,event,trace --ns``): when each thread was made runnable.  The wake-ups are
        applied to the intervals at ``finish``, so chunks may come in any order."""
        self.expect_wakes()
        for block in line_blocks(f):
            _runs(block, self._wake_run, lambda line: self._wake_lines((line,)))

    def _wake_run(self, block: bytes, pos: int) -> int:
        assert self.wakes is not None
        pos, records, unparsed = native.wake_run(block, pos, self.wakes, self.wakers,
                                                 self._waking)
        self.wake_records += records
        self.unparsed += unparsed
        return int(pos)

    def _wake_lines(self, lines: Iterable[str]) -> None:
        """The wake-up lines ``wake_run`` leaves (its only reader)."""
        assert self.wakes is not None
        for line in lines:
            if line.startswith("\t"):
                self._mark_waker(line)
                continue
            self._waking[0] = -1
            m = WAKE_HEADER_RE.match(line)
            if m is None:
                continue
            w = _WAKEE.search(m.group(5))
            if w is None:
                self.unparsed += 1
                continue
            t = int(m.group(2)) * 1_000_000_000 + int(m.group(3))
            wakee = int(w.group(1))
            if m.group(4) == "ing":
                if t < BOUND and wakee < BOUND and int(m.group(1)) < BOUND:
                    self.wakers.setdefault(wakee, []).extend((t, int(m.group(1))))
                    self._waking[0] = wakee
                continue
            self.wake_records += 1
            if t < BOUND and wakee < BOUND:
                self.wakes.setdefault(wakee, []).append(t)

    def _mark_waker(self, frame: str) -> None:
        """A frame of the last waking's call chain: a timer or an interrupt becomes its
        waker (a timer wins)."""
        pairs = self.wakers.get(self._waking[0])
        if not pairs:
            return
        for code, marks in WAKER_MARKS:
            if any(m in frame for m in marks):
                if pairs[-1] != WAKER_TIMER:
                    pairs[-1] = code
                return

    # -- the switch capture ---------------------------------------------------------------

    def feed(self, f: BinaryIO, switches: Any = None) -> None:
        """Read one chunk's ``perf script`` text (a file or a pipe) to its end.
        ``switches``: the chunk's switch records as ``read_switches`` read them from its
        perf.data (the text then holds none), applied in time order among the text's
        records."""
        tracker = self._reading()
        if switches is not None:
            self._feed_merged(f, tracker, switches)
            return
        for block in line_blocks(f):
            _runs(block, lambda b, pos: int(tracker.run(self, b, pos)),
                  lambda line: self.feed_lines((line,)))
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

    def feed_lines(self, lines: Iterable[str]) -> None:
        """Lines of the capture's text, each read here (``feed`` hands over those the native
        reader leaves)."""
        cache = self._frame_cache
        for line in lines:
            self.lines += 1
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
        elif rest.startswith("PERF_RECORD_EXIT"):
            self._exit_record(rest, t, comm)
        elif rest.startswith("PERF_RECORD_SWITCH"):  # _CPU_WIDE too
            self._switch_record(rest, pid, tid, t, comm)
        elif self._record(False, pid, tid, t):
            if rest.startswith("PERF_RECORD_LOST"):
                lm = LOST_RE.search(rest)
                self.lost += int(lm.group(1)) if lm else 1
            elif not rest.startswith("PERF_RECORD_"):
                self._sample(rest, pid, tid, t, comm)

    def _exit_record(self, rest: str, t: int, comm: str) -> None:
        x = _EXIT.match(rest)
        if x is not None and -BOUND < int(x.group(2)) < BOUND and \
                -BOUND < int(x.group(1)) < BOUND:
            self.exits[int(x.group(2))] = t
            self._switch(SW_EXIT | (SW_WIDE if self.every_cpu else 0), int(x.group(1)),
                         int(x.group(2)), t, comm)
        else:
            self.unparsed += 1

    def _switch_record(self, rest: str, pid: int, tid: int, t: int, comm: str) -> None:
        """A ``PERF_RECORD_SWITCH`` (or ``_CPU_WIDE``) line."""
        wide = rest.startswith("PERF_RECORD_SWITCH_CPU_WIDE")
        if wide:
            rest = "PERF_RECORD_SWITCH" + rest[len("PERF_RECORD_SWITCH_CPU_WIDE"):]
        words = rest.split()
        switch = len(words) >= 2 and words[0] == "PERF_RECORD_SWITCH"
        if switch and words[1] in ("IN", "OUT"):
            kind = SW_WIDE if wide else 0
            if words[1] == "OUT":
                kind |= SW_OUT | (SW_PREEMPT if len(words) > 2 and words[2] == "preempt" else 0)
            self._switch(kind, pid, tid, t, comm)
        elif self._record(wide, pid, tid, t) and not switch:
            self.unparsed += 1

    def _sample(self, rest: str, pid: int, tid: int, t: int, comm: str) -> None:
        """A stack sample's header: its call chain follows."""
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
        """A switch record (``kind``: ``SW_OUT``, ``SW_PREEMPT``, ``SW_WIDE``, ``SW_EXIT``
        bits), applied to its thread by the tracker."""
        self._reading().switch(self, kind, pid, tid, t, comm)

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
        """The stack sample being read is complete: it waits for its thread's ``OUT``."""
        cur = self._cur
        if cur is None:
            return
        self._cur = None
        pid, tid, comm, t, state, period = cur
        self._reading().pending(tid, pid, comm, t, tuple(reversed(self._frames)), state,
                                period)
        self.samples += 1
        self.periods += period
        self._frames = []


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


def read_switches(chunk: Path) -> Any:
    """The switch records of one chunk of the scheduler's perf.data, read from the file
    (``_speedups.perf_switches``), for ``SchedReader.feed``; ``None``: read them from
    ``perf script``'s text (the file is not one the reader takes, or it cannot be read)."""
    try:
        return native.perf_switches(str(chunk))
    except OSError:
        return None
