"""Whole-process stack snapshots at a steady rate (the poor man's profiler), three backends.

* ``libdw`` (default): elfutils' unwinder called in-process and kept warm (``collect.libdw``):
  the same per-thread stops as eu-stack without eu-stack's start-up on every snapshot.  Not
  consistent across threads, like eu-stack.
* ``eu-stack`` (elfutils): a fresh ``eu-stack -p PID`` per snapshot.  It attaches one thread at
  a time (each thread stops for about a millisecond; the process as a whole never does), so a
  snapshot is **not consistent across threads**: one thread's stack may be from a slightly
  different instant than another's (which is why lock holders' stacks come from the owner
  sampler, ``collect.locks.owners``, never from snapshots).
* ``gdb``: one gdb kept attached for the whole run (``collect.gdbmi``); every thread is stopped
  together, so the snapshot is consistent.  The attach itself pauses the target while gdb reads
  symbols (reported as ``attach_ms``).
* ``gdb-batch``: a fresh ``gdb -batch`` per snapshot, the way pt-pmp does it, for parity.

Any ptrace stop makes a blocked ``epoll_wait``, ``nanosleep``, ``read`` and friends in the target
return early (EINTR or restart, see signal(7)); perf never does.  Before each dump every
thread's /proc state, wait channel and system call are read without stopping anything, with the
owner of a contended glibc lock (``collect.locks.owners.ProcReader``, layouts in
``collect.locks.locklayout``); with libdw, each thread's record is also read alone between two
dumps, at a moment of its own (``SnapshotLoop._read_alone``).  The log is pt-pmp compatible: each
dump is followed by a ``TS`` line.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from wallflame.collect.gdbmi import GDB_HARDENING, GdbGone, GdbMI
from wallflame.collect.libdw import StopReads, ThreadStack, Unwinder, libdw_library
from wallflame.collect.locks.owners import ProcReader, spaced
from wallflame.collect.safety import ensure_running, pause_summary, spawn, stop_tool
from wallflame.collect.target import Target, TaskFiles, parse_schedstat
from wallflame.errors import ToolError
from wallflame.rundir import BACKENDS, PROC_LINE, READ_LINE, SNAPSHOT_LINE, SNAPSHOTS_MAGIC
from wallflame.systools import require_program


@dataclass
class Dump:
    text: str
    pause_ms: float
    span_ms: float
    error: str = ""
    #: per thread stopped one at a time (libdw): tid -> (first frame read to last, attach
    #: request to release), in ms: a lower and an upper bound of the stop that thread saw
    stops: dict[int, tuple[float, float]] = field(default_factory=dict)
    #: per thread stopped one at a time (libdw): tid -> ``CLOCK_MONOTONIC`` ns at which it was
    #: in its stop (its first frame read), the clock of perf's records
    stopped_at: dict[int, int] = field(default_factory=dict)
    #: per thread stopped one at a time (libdw): tid -> its timeslice count (``schedstat``'s
    #: third field) read while it was stopped: against the count its /proc record read
    #: before, whether it ran in between (``fold.snapshots``)
    stop_pcount: dict[int, int] = field(default_factory=dict)
    #: no thread was stopped (libdw, every thread left running): no pause to count
    stopped_none: bool = False


#: At most this many threads read alone a second (``SnapshotLoop._read_alone``): each reading
#: wakes the collect and costs it about 0.17 ms of CPU (measured by benchmarks/server_collect.py).
READ_ALONE_PER_S = 100

#: The one frame of a thread the libdw backend left running (``LibdwBackend.snapshot``).
RUNNING_FRAME = "[running: not stopped for its stack]"


def _running_text(tids: list[int]) -> str:
    return "".join(f"TID {tid}:\n#0  0x{0:016x} {RUNNING_FRAME}\n" for tid in tids)


#: How a backend tells the guard about a tool it started: ``watch(pid, stop_signal)``.
Watch = Callable[[int, int], None]


def run_once(command: list[str], timeout_s: float,
             watch: Watch | None) -> tuple[str, str, float]:
    """Run a one-shot snapshot tool (a tracer): its stdout, stderr and wall time in ms.  Past
    the timeout it is stopped the safe way for a tracer (``stop_tool`` with SIGKILL)."""
    t0 = time.monotonic()
    proc = spawn(command, signal.SIGKILL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if watch is not None:
        watch(proc.pid, signal.SIGKILL)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_tool(proc, grace_s=1.0, first=signal.SIGKILL)
        out, err = proc.communicate()
    span = (time.monotonic() - t0) * 1000
    return out.decode("utf-8", "replace"), err.decode("utf-8", "replace").strip(), span


class _OneShot:
    """A backend that runs one tool per snapshot (``commands[0]``) and reads its output."""

    name = ""
    consistent = False
    pause_measure = ""

    def __init__(self, pid: int, command: list[str]) -> None:
        self.pid = pid
        self.exe = command[0]
        self.commands = [command]
        self.attach_ms = 0.0

    def start(self) -> None:
        return None

    def snapshot(self, timeout_s: float, tids: list[int],
                 watch: Watch | None = None) -> Dump:
        text, err, span = run_once(self.commands[0], timeout_s, watch)
        return self._dump(text, err, span, tids)

    def _dump(self, text: str, err: str, span: float, tids: list[int]) -> Dump:
        raise NotImplementedError

    def close(self) -> None:
        return None


class EuStackBackend(_OneShot):
    name = "eu-stack"
    consistent = False
    pause_measure = "per thread: eu-stack's run time / threads (upper bound)"

    def __init__(self, pid: int) -> None:
        super().__init__(pid, [require_program("eu-stack"), "-p", str(pid)])

    def _dump(self, text: str, err: str, span: float, tids: list[int]) -> Dump:
        error = "" if "TID " in text else err
        # Each thread is stopped on its own; the mean per-thread stop is at most span/threads.
        return Dump(text, span / max(len(tids), 1), span, error)


class GdbBatchBackend(_OneShot):
    name = "gdb-batch"
    consistent = True
    pause_measure = "whole process: gdb's run time (upper bound)"

    def __init__(self, pid: int) -> None:
        super().__init__(pid, [require_program("gdb"), *GDB_HARDENING, "-batch", "-ex",
                               "set pagination 0", "-ex", "set width 0", "-ex",
                               "thread apply all bt", "-p", str(pid)])

    def _dump(self, text: str, err: str, span: float, tids: list[int]) -> Dump:
        # gdb exits 0 when the attach fails: judge from the thread headers it printed.
        error = "" if "\nThread " in "\n" + text else err
        return Dump(text, span, span, error)


class GdbBackend:
    name = "gdb"
    consistent = True
    pause_measure = "whole process: interrupt to continue"

    def __init__(self, pid: int) -> None:
        self.mi = GdbMI(require_program("gdb"), pid)
        self.commands = [self.mi.command()]
        self.attach_ms = 0.0

    def start(self, watch: Watch | None = None) -> None:
        try:
            self.attach_ms = self.mi.start()
        except (GdbGone, TimeoutError) as e:
            self.mi.close()
            raise ToolError(f"gdb could not attach: {e}", "run wallflame doctor") from None
        if watch is not None and self.mi.proc is not None:
            watch(self.mi.proc.pid, signal.SIGKILL)

    def snapshot(self, timeout_s: float, tids: list[int],
                 watch: Watch | None = None) -> Dump:
        t0 = time.monotonic()
        try:
            text, pause = self.mi.snapshot(timeout_s)
        except (GdbGone, TimeoutError) as e:
            span = (time.monotonic() - t0) * 1000
            return Dump("", span, span, f"gdb: {e or 'timed out'}")
        return Dump(text, pause, (time.monotonic() - t0) * 1000)

    def close(self) -> None:
        self.mi.close()


class LibdwBackend:
    name = "libdw"
    consistent = False

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.unwinder: Unwinder | None = None
        self.realtime = False
        self.schedstat = TaskFiles(pid, "schedstat")
        self.commands = [["libdw", "dwfl_getthread_frames", str(pid)]]
        self.attach_ms = 0.0
        libdw_library()  # installed (nothing is attached yet)

    def start(self) -> None:
        return None

    def warm(self, tids: list[int]) -> None:
        """Attach libdw and take one snapshot whose stacks are not kept, from the snapshot
        thread before the window opens.  The session's start-up (the modules reported, each
        module's ELF and CFI read at its first unwind, the symbol index of each module a frame
        falls in) is about 0.1-0.2 s of CPU against a large server binary (measured by
        benchmarks/lab/snapshot_start.py); taken in the window, it would show in the window's first
        second as a dip of the target's work.  Done before the window, it costs the target as
        much, but outside the evidence: the window's first second shows the target without the
        profiler's start-up in it.  ``attach_ms`` is
        this whole start.  A failure here is the first snapshot's to report."""
        t0 = time.monotonic()
        if tids:
            self.snapshot(5.0, tids)
        self.attach_ms = (time.monotonic() - t0) * 1000

    @property
    def pause_measure(self) -> str:
        if self.realtime:
            return ("per thread: registers read to release (tracer under SCHED_FIFO; a lower "
                    "bound: the tracer's wake-up, about 0.2 ms, is not included)")
        return "per thread: attach request to release (upper bound; tracer not real-time)"

    def snapshot(self, timeout_s: float, tids: list[int], watch: Watch | None = None,
                 running: list[int] | None = None) -> Dump:
        """Stop and unwind ``tids`` one at a time; ``running``: threads /proc read running
        (``R``), not stopped, each logged with ``RUNNING_FRAME`` alone.  A running thread's
        stack is never counted (its time is on-CPU time, which perf measures:
        ``fold.snapshots``), and stopping it is the costly stop: it is taken off its CPU, in
        whatever it was doing, perhaps holding a lock every other thread waits for.  On a busy
        server close to half the threads are read running at a snapshot."""
        running = running or []
        if not tids:  # every thread running, exiting or in uninterruptible sleep
            return self.compose("", [], running, 0.0)
        t0 = time.monotonic()
        got = self.unwind(tids)
        span = (time.monotonic() - t0) * 1000
        if isinstance(got, str):
            return Dump("", span, span, got)
        return self.compose(*got, running, span)

    def unwind(self, tids: list[int]) -> tuple[str, list[ThreadStack]] | str:
        """Stop and unwind ``tids`` one at a time: eu-stack's text of their stacks (without
        its ``PID`` line) and each one's stop, or what failed."""
        t0 = time.monotonic()
        try:
            if self.unwinder is None:
                self.unwinder = Unwinder(self.pid)
                self.attach_ms = (time.monotonic() - t0) * 1000
            self.schedstat.keep_only(set(tids))
            reads = {tid: StopReads(-1, 0, 0, fd) for tid in tids
                     if (fd := self.schedstat.fd(tid)) >= 0}
            text, stacks = self.unwinder.dump(tids, reads)
        except ToolError as e:
            return str(e)
        return text.partition("\n")[2], stacks

    def compose(self, text: str, stacks: list[ThreadStack], running: list[int],
                span: float) -> Dump:
        """One snapshot's dump from the stacks ``unwind`` took (``text``, their text) and the
        threads left running, ``span`` ms from its first stop to its last."""
        head = f"PID {self.pid} - process\n"
        if not stacks:
            return Dump(head + _running_text(running), 0.0, span, stopped_none=True)
        if not any(not st.error for st in stacks):
            err = next((st.error for st in stacks if st.error), "no thread to unwind")
            return Dump("", span, span, f"libdw: {err}")
        # The mean per-thread stop.  Under SCHED_FIFO the tracer runs as soon as a thread
        # stops, so the stop is timed from its registers being read to its release (a lower
        # bound: the tracer's wake-up, about 0.2 ms more on the target's side, is not in it);
        # otherwise, as for eu-stack, an upper bound: from the attach
        # request, which includes waiting for a CPU before the stop takes effect.
        live = [st for st in stacks if not st.error] or stacks
        realtime = self.realtime = bool(self.unwinder and self.unwinder.realtime)
        pause = sum(st.stop_ms if realtime else st.span_ms for st in live) / len(live)
        return Dump(head + text + _running_text(running), pause, span,
                    # a thread whose unwind failed may still have been stopped for its span:
                    # bounds of 0 and the span, so that the tracer's timing covers every stop
                    # the scheduler may see (its lower bound is 0 when no frame was read)
                    stops={st.tid: (st.held_ms if not st.error else 0.0, st.span_ms)
                           for st in stacks},
                    stopped_at={st.tid: st.stopped_ns for st in stacks
                                if not st.error and st.stopped_ns},
                    stop_pcount={st.tid: ss[2] for st in stacks
                                 if (ss := parse_schedstat(st.read.syscall if st.read
                                                           else None)) is not None})

    def close(self) -> None:
        self.schedstat.close()
        if self.unwinder is not None:
            self.unwinder.close()
            self.unwinder = None


Backend = LibdwBackend | EuStackBackend | GdbBackend | GdbBatchBackend


def make_backend(name: str, pid: int) -> Backend:
    if name == "libdw":
        return LibdwBackend(pid)
    if name == "eu-stack":
        return EuStackBackend(pid)
    if name == "gdb":
        return GdbBackend(pid)
    if name == "gdb-batch":
        return GdbBatchBackend(pid)
    raise ToolError(f"unknown pmp backend {name!r}", f"use one of {', '.join(BACKENDS)}")


def ts_line(t_ns: int) -> str:
    """pt-pmp's ``date +'TS %N.%s %F %T'``."""
    secs, nanos = divmod(t_ns, 1_000_000_000)
    return f"TS {nanos:09d}.{secs} " + time.strftime("%F %T", time.localtime(secs))


@dataclass
class PmpStats:
    snapshots: int = 0
    failed: int = 0
    pauses_ms: list[float] = field(default_factory=list)
    over_budget: int = 0
    resumed: int = 0
    errors: list[str] = field(default_factory=list)
    rate_hz: float = 0.0
    target_gone: bool = False

    def pause_summary(self) -> dict[str, float | int]:
        return pause_summary(self.pauses_ms, "snapshots")



class SnapshotLoop(threading.Thread):
    """Takes snapshots until ``stop`` is set, the deadline passes or the target exits."""

    def __init__(self, target: Target, backend: Backend, log: IO[str], rate_hz: float,
                 max_pause_ms: float, stop: threading.Event,
                 watch: Watch | None = None, warm: bool = False,
                 read_alone: bool = False) -> None:
        super().__init__(name="wallflame-pmp", daemon=True)
        self.warm = warm  # the libdw backend's start-up first (``LibdwBackend.warm``)
        # libdw: each thread read alone between snapshots (``_read_alone``)
        self.read_alone = read_alone and isinstance(backend, LibdwBackend)
        self.target = target
        self.backend = backend
        self.log = log
        self.rate_hz = rate_hz
        self.max_pause_ms = max_pause_ms
        self.stop_event = stop
        self.watch = watch
        self.stats = PmpStats(rate_hz=rate_hz)
        self.start_error: BaseException | None = None
        self.started = threading.Event()
        self.cpu_s = 0.0  # this thread's CPU time, once it has ended

    def run(self) -> None:
        reader = ProcReader(self.target.pid)
        try:
            self._run(reader)
        except BaseException as e:  # reported by the orchestrator, never lost
            self.start_error = e
        finally:
            self.started.set()
            try:
                self.backend.close()
            finally:
                reader.close()
                self.cpu_s = time.thread_time()

    def _run(self, reader: ProcReader) -> None:
        self.log.write(SNAPSHOTS_MAGIC + " " + json.dumps(
            {"backend": self.backend.name, "pid": self.target.pid, "rate_hz": self.rate_hz,
             "read_alone": self.read_alone}, sort_keys=True) + "\n")
        if isinstance(self.backend, GdbBackend):
            self.backend.start(self.watch)
        elif self.warm and isinstance(self.backend, LibdwBackend):
            self.backend.warm(self._tids(reader.read()))
            ensure_running(self.target.pid, self.target.start_ticks,
                           self.target.stopped_at_start)
        self.started.set()
        base = interval = 1.0 / self.rate_hz
        timeout = max(5.0, 20 * self.max_pause_ms / 1000)
        next_t = time.monotonic()
        rng = random.Random()
        over = under = failed = 0
        while not self.stop_event.is_set():
            if not self.target.alive():
                self.stats.target_gone = True
                break
            length = spaced(interval, rng)
            ok = self._one(reader, timeout)
            failed = 0 if ok else failed + 1
            if failed >= 5:
                self.stats.errors.append("5 snapshots in a row failed: snapshots stopped")
                break
            pause = self.stats.pauses_ms[-1] if ok and self.stats.pauses_ms else 0.0
            # G5: the pause is bounded.  Three snapshots in a row over the budget halve the
            # rate; ten in a row well under it restore it step by step.
            if pause > self.max_pause_ms:
                self.stats.over_budget += 1
                over, under = over + 1, 0
                if over >= 3:
                    interval, over = min(interval * 2, 10.0), 0
            elif ok:
                over, under = 0, under + 1
                if under >= 10 and interval > base and pause < self.max_pause_ms / 2:
                    interval, under = max(interval / 2, base), 0
            self.stats.rate_hz = min(self.stats.rate_hz, 1.0 / interval)
            next_t += length
            if self.read_alone:
                self._read_alone(reader, next_t, rng)
            now = time.monotonic()
            if next_t < now:
                next_t = now
            self.stop_event.wait(next_t - now)

    def _read_alone(self, reader: ProcReader, until: float, rng: random.Random) -> None:
        """Each thread's /proc record read alone, at a moment of its own drawn uniformly
        between now and ``until`` (the next snapshot), written as a ``READ_LINE`` with
        ``t_ns``, when it was read.  These records, not the snapshots', say what each thread
        was doing (``fold.snapshots``): a reading of every thread, one after the other, holds
        a CPU for its length, and on a busy machine the threads that wait for that CPU (the
        clients of a server's threads waiting for them in ``poll``) wait longer, so a
        snapshot's records are not those of the target unobserved; the more threads one
        reading takes, the more of them it finds waiting for their clients (measured by
        benchmarks/lab/proc_read_bias.py).  No thread is stopped: a stop at each of these moments
        costs a busy server several times what the readings do; the stacks come from the
        snapshots.  Ends early when ``stop`` is set (the window closed)."""
        tids = reader.listing()
        alive = set(tids)
        start = time.monotonic()
        length = max(until - start, 0.0)
        # at most READ_ALONE_PER_S readings a second: each thread read with this chance
        # (its weight, the time since its own previous reading, stays unbiased)
        chance = min(1.0, READ_ALONE_PER_S * length / max(len(tids), 1))
        w = self.log.write
        for at, tid in sorted((start + rng.random() * length, tid) for tid in tids
                              if rng.random() < chance):
            wait = at - time.monotonic()
            if wait > 0 and self.stop_event.wait(wait):
                break
            rec = reader.read_one(tid, alive)
            if rec is not None:
                rec["t_ns"] = time.time_ns()
                w(READ_LINE + json.dumps(rec, sort_keys=True) + "\n")
        self.log.flush()

    def _tids(self, procs: list[dict[str, Any]]) -> list[int]:
        """The threads a snapshot unwinds, of those ``ProcReader.read`` listed."""
        skip = ("Z", "X", "D") if isinstance(self.backend, LibdwBackend) else ("Z", "X")
        return [int(r["tid"]) for r in procs if r.get("state") not in skip]

    def _one(self, reader: ProcReader, timeout: float) -> bool:
        """One snapshot, written to the log.  False if it failed."""
        procs = reader.read()
        t_ns = time.time_ns()
        # In-process, an attach cannot be timed out: a thread in uninterruptible sleep (D) is
        # not attached, as it would hold the snapshot until it wakes (forever on a hung
        # mount).  Its time goes to its next snapshot's stack (weights are time since the
        # thread's previous snapshot).
        tids = self._tids(procs)
        if isinstance(self.backend, LibdwBackend):
            running = {int(r["tid"]) for r in procs if r.get("state") == "R"}
            dump = self.backend.snapshot(timeout, [t for t in tids if t not in running],
                                         self.watch, [t for t in tids if t in running])
        else:
            dump = self.backend.snapshot(timeout, tids, self.watch)
        left = ensure_running(self.target.pid, self.target.start_ticks,
                             self.target.stopped_at_start)
        if left and not self.target.stopped_at_start:
            self.stats.resumed += 1
        if not self.target.alive():
            # The target ended during this snapshot: not a failure of the snapshot, but what it
            # read may be of another process that took the PID (or its threads' ids): dropped.
            self.stats.target_gone = True
            return True
        if dump.error:
            self.stats.failed += 1
            if len(self.stats.errors) < 5:
                self.stats.errors.append(dump.error.splitlines()[0][:300])
            return False
        self.stats.snapshots += 1
        if not dump.stopped_none:
            self.stats.pauses_ms.append(dump.pause_ms)
        w = self.log.write
        w(dump.text if dump.text.endswith("\n") else dump.text + "\n")
        for rec in procs:
            w(PROC_LINE + json.dumps(rec, sort_keys=True) + "\n")
        snap: dict[str, Any] = {"t_ns": t_ns, "span_ms": round(dump.span_ms, 3),
                                "consistent": self.backend.consistent}
        if not dump.stopped_none:  # a snapshot that stopped no thread paused none
            snap["pause_ms"] = round(dump.pause_ms, 3)
        if dump.stops:
            snap["stops"] = {str(tid): [round(lo, 3), round(hi, 3)]
                             for tid, (lo, hi) in sorted(dump.stops.items())}
        if dump.stopped_at:
            snap["stopped_mono_ns"] = {str(tid): ns for tid, ns in sorted(dump.stopped_at.items())}
        if dump.stop_pcount:
            snap["stop_pcount"] = {str(tid): n for tid, n in sorted(dump.stop_pcount.items())}
        w(SNAPSHOT_LINE + json.dumps(snap, sort_keys=True) + "\n")
        w(ts_line(t_ns) + "\n")
        self.log.flush()
        return True
