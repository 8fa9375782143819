"""Snapshot logs -> time-weighted stacks: what the gdb and eu-stack folders share.

A log is read line by line in ``wallflame.fold.snapshotlog``, which hands each dump here; what a
thread's /proc record says it waited on is in ``wallflame.fold.procrecords``.

Weighting (docs/design.md, "The data model"): one stack per thread per snapshot.  A blocked
thread's snapshot weighs the wall time since that thread's previous snapshot; a thread's first
snapshot weighs the log's median interval (1 / rate when there is only one dump,
``snapshot_interval_ns`` when there are no timestamps at all).  A thread is blocked when its
/proc state is not R (S and D wait; T is stopped by job control: not on a CPU either), or, when
there is no proc line or the state is ``t`` (stopped by a tracer, which hides what the thread
was doing), or in a log without proc lines, when a wait rule matches its stack.  Running threads
of a wallflame log are not added (perf measures on-CPU better) but their time goes to
``meta.extra["pmp_running_ns"]``; in foreign logs they become on-CPU stacks, since there is no
perf data beside them.

A log whose header says ``read_alone`` (the libdw backend with snapshots alone,
``collect.snapshots``) also holds each thread's /proc record read alone, at moments of its own
between the snapshots (``# wallflame-read``).  Those records carry the weight (each the time
since that thread's previous one) and the wait class; the snapshots' stacks of the same thread
in the same wait only say where it waited (``Accumulator.read``).

Only the current dump is buffered (its threads are needed to name a lock owner's thread), so
memory is bounded by the size of one dump; everything else streams.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from wallflame.classify import classify, find_wait
from wallflame.fold.options import FoldOptions
from wallflame.fold.procrecords import (
    int_or_none,
    io_worker_idle,
    proc_class,
    ran_before_stop,
    record,
)
from wallflame.profile import OFF, ON, UNIT_NS, HolderKey, Meta, Profile, StackKey
from wallflame.rundir import PROC_LINE
from wallflame.stops import MEASURED_STOPS, STOP_MARKS, add_stops, stops_json
from wallflame.textio import iter_lines
from wallflame.waitclasses import FALLBACK, LOCK_CLASSES


def _median(values: list[float] | list[int]) -> float:
    import statistics  # only when there are snapshots: a report of a perf profile skips it

    return statistics.median(values)

_WAITING_STATES = ("S", "D")  # asleep in the kernel: the stack should show the wait

#: Wait classes for which a proc line's lock and owner (a futex on a mutex) are believed: the
#: lock classes, and ``other`` (a futex wait no rule named may still be on a lock).
_LOCK_OR_FALLBACK_CLASSES = (*LOCK_CLASSES, FALLBACK)


@dataclass
class Thread:
    """One thread of one dump: frames leaf first, as the tools print them."""

    tid: int
    name: str
    line: int
    kind: str  # "gdb" or "eu-stack": how its frame lines are read
    frames: list[str] = field(default_factory=list)
    lock: str = ""


@dataclass
class Dump:
    line: int
    threads: list[Thread] = field(default_factory=list)
    tids: set[int] = field(default_factory=set)
    procs: dict[int, dict[str, Any]] = field(default_factory=dict)
    pause: dict[str, Any] = field(default_factory=dict)
    pid: int = 0
    #: whether any of its /proc records names a sleeping function (None: not looked yet)
    wchans: bool | None = None


#: What /proc said a thread blocked in: (system call, lock, the wait class it gives).
_Call = tuple["int | None", str, str]
#: The frame of a blocked snapshot whose thread ran before its stack was taken, and which no
#: other snapshot of that thread can stand for: its class is /proc's system call's.
RAN_FRAME = "[blocked when /proc was read: the stack was taken after it ran]"
#: The frame of a thread's record read alone (``READ_LINE``) that no snapshot's stack of
#: that thread in that wait (or that class) stands for: its class is /proc's.
ALONE_FRAME = "[blocked when read alone: no snapshot's stack of this wait]"
#: A record read alone of a running thread (its time is running time, never added).
RUNNING_READ_FRAME = "[running when read alone]"
#: A snapshot whose weight (the median interval) is known only at the end: a thread's first
#: one, or one whose timestamp did not advance.  Counted per distinct stack: memory stays
#: bounded by the number of distinct stacks, not by the length of the log.
_PendingKey = tuple[StackKey, "HolderKey | None", int, "_Call | None"]


def windowed_stops(pause: dict[str, Any], t: int | None,
                   window: tuple[int, int] | None) -> Any:
    """A snapshot's stops (``{"tid": [lower ms, upper ms]}``, taken from ``t`` ns since the
    epoch over its ``span_ms``) as far as they lie inside ``window``: all of them when the
    snapshot does, none when it lies outside (the collect's first snapshot can come before the
    window opens, and the scheduler's intervals are cut at its edges), and with no lower bound
    when it straddles an edge (the thread stood stopped for part of it inside)."""
    raw = pause.get("stops")
    if window is None or t is None or not isinstance(raw, dict):
        return raw
    span = pause.get("span_ms")
    end = t + int(float(span) * 1e6) if isinstance(span, int | float) and span > 0 else t
    if end <= window[0] or t >= window[1]:
        return None
    if window[0] <= t and end <= window[1]:
        return raw
    return {tid: [0.0, pair[1]] for tid, pair in raw.items()
            if isinstance(pair, list) and len(pair) == 2}


class Accumulator:
    """Turns closed dumps into weighted stacks in ``profile``."""

    def __init__(self, profile: Profile, options: FoldOptions) -> None:
        self.profile = profile
        self.meta = profile.meta
        self.options = options
        self.rules = options.get_rules()
        self.pid = 0
        self.rate_hz = 0.0
        self.wallflame_log = False
        self.prev_t: dict[int, int] = {}
        self.last_t: int | None = None
        self.first_t: int | None = None
        self.intervals: list[int] = []
        self.pauses: list[float] = []
        self.stops: dict[int, list[float]] = {}  # tid -> [lower ms, upper ms, stops]
        self.pending: dict[_PendingKey, int] = {}
        self.running: dict[int, int] = {}
        self.snapshots = 0
        self.untimed = 0
        self.mismatches = 0
        # (dump, tid) of records read asleep but on a run queue (``_kernel_state``)
        self.on_runqueue: set[tuple[int, int]] = set()
        # blocked in /proc, but the thread ran before it was stopped for its stack: weight
        # placed at the end (``_place``)
        self.stale = 0
        self.unplaced: dict[tuple[StackKey, HolderKey | None, _Call], int] = {}
        # (tid, system call, lock, /proc's class) -> the blocked stacks of snapshots whose
        # thread did not run between /proc's reading and its stop, with how many snapshots
        # had each
        self.by_call: dict[tuple[int, int | None, str, str], dict[StackKey, int]] = {}
        self.marks: list[list[Any]] = []  # STOP_MARKS
        # records read alone (``READ_LINE``): when the log has them, they carry the weight and
        # the snapshots only the stacks (``read``)
        self.read_alone = False
        self.reads = 0
        self.reads_prev: dict[int, int] = {}
        self.reads_on_runqueue = 0
        self.wchans = False  # whether any record named a sleeping function

    def header(self, text: str, line: int) -> None:
        self.wallflame_log = True
        try:
            d = json.loads(text)
            self.pid = int(d.get("pid", 0) or 0)
            self.rate_hz = float(d.get("rate_hz", 0) or 0)
            self.read_alone = d.get("read_alone") is True
        except (ValueError, TypeError, AttributeError):
            self.meta.lose("bad snapshot log header", line)

    def close(self, dump: Dump, ts: int | None) -> None:
        """Weigh every thread of one complete dump taken at ``ts`` (ns since the epoch)."""
        if not dump.threads:
            self.meta.lose("empty snapshot (no threads)", dump.line)
            return
        self.snapshots += 1
        t = int_or_none(dump.pause.get("t_ns")) or ts
        if t is not None:
            if self.last_t is not None and t > self.last_t:
                self.intervals.append(t - self.last_t)
            elif self.last_t is not None:
                self.meta.lose("snapshot timestamp did not advance", dump.line,
                               detail="such snapshots weigh the median interval")
            if self.first_t is None:
                self.first_t = t
            self.last_t = t if self.last_t is None else max(self.last_t, t)
        else:
            self.untimed += 1
        pause = dump.pause.get("pause_ms")
        if isinstance(pause, int | float) and not isinstance(pause, bool):
            self.pauses.append(float(pause))
        add_stops(self.stops, windowed_stops(dump.pause, t, self.options.stops_window_ns))
        by_tid = {th.tid: th for th in dump.threads}
        for th in dump.threads:
            if th.frames:
                self._thread(th, dump, by_tid, t)
            else:
                self.meta.lose("thread without frames", th.line)

    def _kernel_state(self, proc: dict[str, Any] | None, dump: Dump) -> str:
        """The thread's state in its /proc record, but ``R`` for a thread /proc read asleep
        (``S`` or ``D``) whose ``wchan``, read just after, was ``0`` while other threads'
        were not: the kernel gives no sleeping function for a thread on a run queue, and a
        thread is on one, its state still saying asleep, when it was preempted between
        setting that state and switching out (on a busy machine, often: a server's threads
        in up to a sixth of their futex records), or when
        it was woken between the two reads.  The kernel's own accounting counts it
        runnable."""
        kstate = str(proc.get("state", "")) if proc else ""
        if proc is None or kstate not in _WAITING_STATES or proc.get("wchan"):
            return kstate
        if dump.wchans is None:
            dump.wchans = any(isinstance(p, dict) and p.get("wchan")
                              for p in dump.procs.values())
        if not dump.wchans:
            return kstate
        self.on_runqueue.add((dump.line, int_or_none(proc.get("tid")) or 0))
        return "R"

    def _weight(self, tid: int, t: int | None) -> int | None:
        """Wall time since this thread's previous snapshot (``None``: not known yet)."""
        if t is None:
            return self.options.snapshot_interval_ns
        prev = self.prev_t.get(tid)
        self.prev_t[tid] = t if prev is None else max(prev, t)
        return t - prev if prev is not None and t > prev else None

    def _thread(self, th: Thread, dump: Dump, by_tid: dict[int, Thread], t: int | None) -> None:
        proc = dump.procs.get(th.tid)
        name = th.name or (str(proc.get("comm", "")) if proc else "")
        name = name or self.meta.threads.get(th.tid, "")
        if name and th.tid:
            self.meta.threads[th.tid] = name
        frames = tuple(reversed(th.frames))
        kstate = self._kernel_state(proc, dump)
        # only R runs; S/D wait; T is stopped by job control.  "t" (stopped by a tracer, as
        # when our own gdb has just attached) says nothing: the stack decides, as without /proc
        blocked = (kstate != "R" if kstate and kstate != "t"
                   else find_wait(frames, self.rules) is not None)
        pid = dump.pid or self.pid
        weight = self._weight(th.tid, t)
        holder_key: HolderKey | None = None
        running_tid = 0
        call: _Call | None = None
        if blocked:
            key, holder_key = self._blocked(th, frames, name, pid, proc, dump, by_tid)
            if proc is not None and kstate in _WAITING_STATES:
                seen = (int_or_none(proc.get("syscall")), str(proc.get("lock") or ""),
                        proc_class(proc, kstate))
                if ran_before_stop(proc, dump.pause, th.tid):
                    call = seen
                    if not self.read_alone:  # read alone, no time is its own
                        self.stale += 1
                else:
                    per = self.by_call.setdefault((th.tid, *seen), {})
                    per[key] = per.get(key, 0) + 1
            at = int_or_none((dump.pause.get("stopped_mono_ns") or {}).get(str(th.tid))) \
                if isinstance(dump.pause.get("stopped_mono_ns"), dict) else None
            if self.options.stop_marks and at is not None and at > 0 and \
                    kstate in _WAITING_STATES and \
                    find_wait(frames, self.rules) is not None:
                self.marks.append([th.tid, at, list(frames), kstate])
        else:
            key = StackKey(frames, th.tid, name, pid, ON)
            if proc is not None or self.wallflame_log:
                running_tid = th.tid or -1
        if self.read_alone:
            return  # the stack stands for the waits read alone (``read``), not for time
        if weight is None:
            pk = (key, holder_key, running_tid, call)
            self.pending[pk] = self.pending.get(pk, 0) + 1
        else:
            self._add(key, holder_key, running_tid, weight, call)

    def read(self, rec: dict[str, Any], line: int) -> None:
        """One thread's record read alone (``READ_LINE``): it weighs the time since that
        thread's previous one, as a snapshot's stack would, and is placed at the end
        (``_place``) on the stacks the snapshots took of that thread in the same wait (the
        same system call, lock and class from /proc), failing those in the same class,
        failing those under ``ALONE_FRAME`` in that class.  A record read running adds to
        the thread's running time."""
        if not self.read_alone:
            # its snapshots carry the weight already: counted, not added twice
            self.meta.lose("wallflame-read line in a log whose header does not say "
                           "read_alone", line)
            return
        tid = int_or_none(rec.get("tid"))
        t = int_or_none(rec.get("t_ns"))
        if tid is None or t is None or t <= 0:
            self.meta.lose("bad wallflame-read line", line)
            return
        self.reads += 1
        self.wchans = self.wchans or bool(rec.get("wchan"))
        prev = self.reads_prev.get(tid)
        self.reads_prev[tid] = t if prev is None else max(prev, t)
        weight = t - prev if prev is not None and t > prev else None
        name = str(rec.get("comm", "")) or self.meta.threads.get(tid, "")
        if name:
            self.meta.threads.setdefault(tid, name)
        kstate = str(rec.get("state", ""))
        if kstate in _WAITING_STATES and not rec.get("wchan") and self.wchans:
            kstate = "R"  # on a run queue, its state still saying asleep (``_kernel_state``)
            self.reads_on_runqueue += 1
        pid = self.pid
        if kstate == "R":
            # running: its time is perf's, and the thread's running time for the coverage check
            key = StackKey((RUNNING_READ_FRAME,), tid, name, pid, ON)
            pk: _PendingKey = (key, None, tid, None)
        elif kstate not in ("S", "D", "T", "t"):
            return  # exiting (Z, X) or unknown: its time is not known to be either
        else:
            cls = proc_class(rec, kstate)
            lock = str(rec.get("lock") or "") if cls in LOCK_CLASSES else ""
            owner = (int_or_none(rec.get("owner")) or 0) if lock else 0
            key = StackKey((ALONE_FRAME,), tid, name, pid, OFF, cls, lock, owner)
            call = (int_or_none(rec.get("syscall")), str(rec.get("lock") or ""), cls)
            pk = (key, None, 0, call)
        if weight is None:
            self.pending[pk] = self.pending.get(pk, 0) + 1
        else:
            self._add(pk[0], None, pk[2], weight, pk[3])

    def _blocked(self, th: Thread, frames: tuple[str, ...], name: str, pid: int,
                 proc: dict[str, Any] | None, dump: Dump, by_tid: dict[int, Thread]
                 ) -> tuple[StackKey, HolderKey | None]:
        """The off-CPU key of a blocked thread, and who held its lock if /proc said."""
        kstate = self._kernel_state(proc, dump)
        wait = classify(frames, kstate, self.rules)
        if proc and io_worker_idle(proc):
            wait = FALLBACK  # its user stack is its creator's
        lock, owner = th.lock, None
        if proc and wait in _LOCK_OR_FALLBACK_CLASSES:
            lock = str(proc.get("lock") or "") or lock
            owner = int_or_none(proc.get("owner"))
        if kstate in _WAITING_STATES and find_wait(frames, self.rules) is None:
            # /proc said asleep, the stack shows no wait: they were read at different instants
            # (eu-stack reaches a thread milliseconds after /proc was read).  The kernel state
            # wins (docs/design.md) and, the stack being of no help, /proc's system call says what
            # the thread waited on.  The mismatch is counted.
            self.mismatches += 1
            wait = proc_class(proc, kstate) if proc else wait
            if wait not in LOCK_CLASSES:
                lock, owner = "", None
        key = StackKey(frames, th.tid, name, pid, OFF, wait, lock, owner or 0)
        if not (owner and lock):
            return key, None
        held = by_tid.get(owner)
        owner_name = (held.name if held else "") or self.meta.threads.get(owner, "")
        if not owner_name and owner in dump.procs:
            owner_name = str(dump.procs[owner].get("comm", ""))
        # The owner was read from /proc before its stack was dumped (eu-stack and libdw reach
        # it milliseconds later): not known to be the stack of the lock's holder.  Only the
        # owner sampler's stopped-and-confirmed stacks are holder stacks (wallflame.fold.locks).
        return key, HolderKey(lock, owner, owner_name, ())

    def _add(self, key: StackKey, holder: HolderKey | None, running_tid: int, w: int,
             call: _Call | None = None) -> None:
        if call is not None:  # the thread ran before its stop: placed at the end
            self.unplaced[key, holder, call] = self.unplaced.get((key, holder, call), 0) + w
            return
        if running_tid:
            self.running[running_tid] = self.running.get(running_tid, 0) + w
            if not self.options.include_running:
                return
        self.profile.add(key, w)
        if holder is not None:
            self.profile.add_holder(holder, w)

    def _place(self) -> int:
        """Place the weight of each snapshot whose thread /proc read blocked but which ran
        again before it was stopped for its stack (``unplaced``): its stack is of a later
        instant and says nothing of the wait /proc saw.  The weight goes to the stacks of the
        same thread's snapshots that did not run in between and were blocked in the same
        system call on the same lock, with the same class from /proc, in proportion to how
        many there were; failing those, and unless the wait is on a lock, to its stacks of
        snapshots /proc gave the same class; failing those (a thread that ran at every
        snapshot so blocked), to ``RAN_FRAME`` in the class of /proc's system call.  The
        class /proc saw is kept either way: a thread whose short waits end before the stop
        would otherwise have them counted as its long ones.  Returns how many threads had
        nothing else."""
        if not self.unplaced:
            return 0
        by_class: dict[tuple[int, str], dict[StackKey, int]] = {}
        for (tid, _, _, cls), stacks in self.by_call.items():
            if cls not in LOCK_CLASSES:
                same = by_class.setdefault((tid, cls), {})
                for k, n in stacks.items():
                    same[k] = same.get(k, 0) + n
        # a stack that names its lock's holder gets the holder's share too (the holders'
        # table weighs what their waiters' stacks weigh)
        held = {(h.lock, h.tid): h for h in self.profile.holders}
        alone: set[int] = set()
        for (key, holder, (sc, lock, cls)), w in sorted(self.unplaced.items(),
                                                        key=lambda kv: kv[0][0]):
            parts = sorted((self.by_call.get((key.tid, sc, lock, cls)) or
                            by_class.get((key.tid, cls)) or {}).items())
            denom = sum(x for _, x in parts)
            if not denom:
                # what is known: blocked, in that system call (on that lock), at /proc's read
                on_lock = cls in LOCK_CLASSES
                mine = key._replace(frames=key.frames if key.frames == (ALONE_FRAME,)
                                    else (RAN_FRAME,), wait=cls,
                                    lock=lock if on_lock else "",
                                    holder=key.holder if on_lock and key.lock == lock else 0)
                self.profile.add(mine, w)
                if holder is not None and mine.holder:
                    self.profile.add_holder(holder, w)
                alone.add(key.tid)
                continue
            given = 0
            for i, (k, x) in enumerate(parts):
                part = w - given if i == len(parts) - 1 else w * x // denom
                given += part
                self.profile.add(k, part)
                h = held.get((k.lock, k.holder)) if k.holder else None
                if h is not None:
                    self.profile.add_holder(h, part)
        self.unplaced.clear()
        return len(alone)

    def first_weight(self) -> int:
        if self.intervals:
            return int(_median(self.intervals))
        if self.rate_hz > 0:
            return int(1e9 / self.rate_hz)
        return self.options.snapshot_interval_ns

    def finish(self, source: dict[str, Any]) -> None:
        w = self.first_weight()
        for (key, holder, running_tid, call), n in self.pending.items():
            self._add(key, holder, running_tid, w * n, call)
        self.pending.clear()
        alone = self._place()
        meta = self.meta
        meta.unit = UNIT_NS
        meta.count("snapshots", self.snapshots)
        if self.first_t is not None and self.last_t is not None and self.last_t > self.first_t:
            window = self.last_t - self.first_t
            meta.window_ns = max(meta.window_ns, window)
            meta.rates["pmp_hz"] = round((len(self.intervals)) * 1e9 / window, 3)
            meta.extra["pmp_window"] = {"first_ns": self.first_t, "last_ns": self.last_t}
        elif self.rate_hz:
            meta.rates["pmp_hz"] = self.rate_hz
        if self.untimed and self.snapshots:
            meta.warn(f"{self.untimed} snapshot(s) without a timestamp: each weighs "
                      f"{self.options.snapshot_interval_ns / 1e9:g} s (the snapshot interval)")
        if self.mismatches:
            meta.extra["pmp_state_mismatch"] = self.mismatches
            meta.note(f"{self.mismatches} snapshot(s) read a thread blocked but its stack "
                      "showed no wait (read a moment apart): classed by the system call")
        if self.reads:
            meta.count("reads alone", self.reads)
        if self.on_runqueue or self.reads_on_runqueue:
            meta.extra["pmp_asleep_on_runqueue"] = len(self.on_runqueue) + self.reads_on_runqueue
        if self.stale:
            meta.extra["pmp_ran_before_stop"] = self.stale
            meta.note(f"{self.stale} snapshot(s) found a thread running again before its stack "
                      "was taken: their time went to the thread's other stacks in the same "
                      "wait" + (f" ({alone} thread(s) had none: under {RAN_FRAME})"
                                if alone else ""))
        if self.running:
            meta.extra["pmp_running_ns"] = {str(k): v for k, v in sorted(self.running.items())}
        if self.pauses:
            meta.extra["pause"] = {
                "snapshots": len(self.pauses),
                "median_ms": round(_median(self.pauses), 3),
                "max_ms": round(max(self.pauses), 3),
                "total_ms": round(sum(self.pauses), 3),
            }
        if self.stops:
            meta.extra[MEASURED_STOPS] = stops_json(self.stops)
        if self.marks:
            meta.extra[STOP_MARKS] = self.marks
        source.update(snapshots=self.snapshots, first_snapshot_ns=w)



def lock_records(path: str, meta: Meta) -> list[dict[str, Any]]:
    """The ``# wallflame-proc`` records of a snapshot log that name a lock (the lock
    evidence, ``wallflame.fold.locks``); a line that is not a record is counted in ``meta``
    as the folder counts it."""
    out = []
    for no, line in iter_lines(path):
        if line.startswith(PROC_LINE) and '"lock"' in line:
            rec = record(line[len(PROC_LINE):])
            if rec is None or int_or_none(rec.get("tid")) is None:
                meta.lose("bad wallflame-proc line", no)
            else:
                out.append(rec)
    return out
