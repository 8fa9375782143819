"""A lock holder's stack taken while it is known to hold the lock.

When a waiter's lock names an owner (``collect.locks.locklayout``), only that owner thread is
stopped (libdwfl's per-thread ``PTRACE_ATTACH``, as for a snapshot), and *while it is stopped* the
lock's memory is read again and so is the owner's own system call (``libdw.StopReads``: two
``pread`` by the frame callback, at the first frame).  They are judged after the release: the
stack is kept only when the lock, as read during the stop, still named the stopped thread and
that thread was not itself waiting on the same lock: a thread cannot release a lock while it
is stopped, so the stack is the holder's stack at an instant it held the lock.  Otherwise the
observation is "not caught" with the reason (``moved``: the lock had changed hands before the
stop took effect; ``not checked``: the lock could not be read again).  A stack caught inside
the release itself (``pthread_mutex_unlock``, ``__lll_lock_wake``, ``pthread_rwlock_unlock``
near the leaf: the owner field is cleared a few instructions later) is not kept either.

Nothing in the stop waits for the interpreter's lock (``collect.libdw``): a holder held
stopped holds up every waiter of its lock, and another thread of the collect (the snapshot
loop, the watchers, the main thread, each preempted by the target at times) may hold the
interpreter's lock for milliseconds at a time.  A check made in Python during the stop would
take that lock, and so would a frame callback in Python, for every frame.

If the lock has meanwhile passed to another thread, that thread is tried once more.  Each
stop is one thread for the time of one unwind (timed like a snapshot's per-thread stop, see
``collect.libdw``); the target as a whole never stops, and after every probe the stopped
thread's state is checked (``collect.safety.ensure_running``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from wallflame.collect.libdw import StopRead, StopReads, ThreadStack, Unwinder
from wallflame.collect.locks.locklayout import (
    MUTEX_SIZE,
    RWLOCK_SIZE,
    LockRead,
    parse_futex,
    read_mutex,
    read_rwlock,
)
from wallflame.collect.locks.targetmemory import MemReader
from wallflame.collect.safety import ensure_running, pause_summary
from wallflame.collect.target import read_stat
from wallflame.errors import ToolError
from wallflame.names import normalize

#: Leaf-most frames looked at for a release in progress.
_RELEASE_DEPTH = 4
_RELEASE = ("pthread_mutex_unlock", "__pthread_mutex_unlock", "__lll_lock_wake",
            "pthread_rwlock_unlock", "__pthread_rwlock_unlock", "lll_unlock_wake")
#: Most owners stopped per round of the owner sampler (bounds its cost on a busy server).
MAX_PROBES_PER_ROUND = 8


@dataclass
class Probe:
    """One attempt at a holder's stack: ``status`` is ``confirmed`` or why not."""

    owner: int
    status: str
    frames: list[str] = field(default_factory=list)  # eu-stack frame lines, innermost first
    stop_ms: float = 0.0
    #: every thread this probe stopped (the owner, and the next owner when the lock had
    #: passed on): [tid, first frame read to last, attach request to release] (ms)
    stops: list[list[float]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tid": self.owner, "status": self.status,
                               "stop_ms": round(self.stop_ms, 3)}
        if self.stops:
            out["stops"] = [[int(t), round(lo, 3), round(hi, 3)] for t, lo, hi in self.stops]
        if self.frames:
            out["frames"] = self.frames
        return out


def releasing(names: list[str]) -> bool:
    """A stack (innermost first) caught in the lock's release."""
    return any(normalize(n).startswith(_RELEASE) for n in names[:_RELEASE_DEPTH] if n)


def _size(lock: LockRead) -> int:
    """The bytes of ``lock``'s layout (a mutex's or an rwlock's)."""
    return MUTEX_SIZE if lock.kind.startswith("mutex") else RWLOCK_SIZE


def judge(lock: LockRead, owner: int, read: StopRead | None, moved_to: list[int]) -> str:
    """What the reads made while ``owner`` was stopped say: ``""`` when it held ``lock``
    then; otherwise why not (``moved`` and ``released`` append the lock's owner then to
    ``moved_to``; ``not checked``: the lock could not be read again)."""
    if read is None or read.mem is None:
        return "not checked"
    try:
        size = _size(lock)
        now = (read_mutex(read.mem) if size == MUTEX_SIZE else read_rwlock(read.mem)).owner
        if now != owner:
            moved_to.append(now)
            return "moved" if now else "released"
        call = parse_futex((read.syscall or b"").decode("ascii", "replace"))
        if call is not None and call.waits and lock.base <= call.addr < lock.base + size:
            return "owner waits on the same lock"
        return ""
    except Exception as e:  # a probe never raises through the sampler
        return f"check failed: {type(e).__name__}"


class HolderProbe:
    """Stops lock owners one at a time from the owner sampler's thread (ptrace is per OS
    thread: one probe per Python thread)."""

    def __init__(self, pid: int, start_ticks: int, stopped_before: bool, mem: MemReader) -> None:
        self.pid = pid
        self.start_ticks = start_ticks
        self.stopped_before = stopped_before
        self.mem = mem
        self.unwinder: Unwinder | None = None
        self.error = ""
        self.pauses_ms: list[float] = []
        self.counts: dict[str, int] = {}
        self.resumed = 0

    def _unwinder(self) -> Unwinder | None:
        if self.unwinder is None and not self.error:
            try:
                self.unwinder = Unwinder(self.pid)
            except ToolError as e:
                self.error = str(e)
        return self.unwinder

    def _stop(self, unwinder: Unwinder, lock: LockRead, owner: int) -> tuple[ThreadStack, bool]:
        """Stop ``owner`` and unwind it, reading the lock and its system call meanwhile; and
        whether this thread ran under ``SCHED_FIFO`` for it (``Unwinder.boost``).  Only the
        stop runs so: the judging and the naming of the frames after it (an index of a
        module's symbols is built at its first name, a tenth of a second or more for a large
        binary) would take a CPU from the target at a priority none of its threads can preempt."""
        try:
            sys_fd = os.open(f"/proc/{self.pid}/task/{owner}/syscall", os.O_RDONLY)
        except OSError:
            sys_fd = -1  # an unreadable file: read as "not in a futex wait"
        boosted = unwinder.boost()
        try:
            mem_fd = self.mem.fd if self.mem.fd is not None else -1
            return unwinder.stack(owner, StopReads(mem_fd, lock.base, _size(lock), sys_fd)), \
                boosted
        finally:
            if boosted:
                unwinder.unboost()
            if sys_fd >= 0:
                os.close(sys_fd)

    def probe(self, lock: LockRead, tids: set[int], waiter: int) -> Probe:
        """Stop ``lock.owner`` (and, if the lock has passed on, its next owner once)."""
        unwinder = self._unwinder()
        if unwinder is None:
            return self._count(Probe(lock.owner, "no unwinder"))
        owner = lock.owner
        stops: list[list[float]] = []
        for attempt in range(2):
            moved_to: list[int] = []
            st, boosted = self._stop(unwinder, lock, owner)
            pause = st.stop_ms if boosted else st.span_ms
            self.pauses_ms.append(pause)
            # a failed unwind may still have stopped the owner for its span (see pmp)
            stops.append([owner, st.held_ms if not st.error else 0.0, st.span_ms])
            self._safe(owner)
            status = judge(lock, owner, st.read, moved_to) if st.pcs else \
                (st.error or "not stopped")
            if status == "" and st.pcs:
                names = [unwinder.name(pc, act) for pc, act in st.pcs]
                if releasing(names):
                    return self._count(Probe(owner, "releasing", stop_ms=pause, stops=stops))
                lines = [f"#{n:<2} 0x{pc:016x} {name}" if name else f"#{n:<2} 0x{pc:016x}"
                         for n, ((pc, _), name) in enumerate(zip(st.pcs, names, strict=True))]
                return self._count(Probe(owner, "confirmed", lines, pause, stops))
            nxt = moved_to[0] if moved_to else 0
            if attempt or status != "moved" or nxt in (0, waiter) or nxt not in tids:
                return self._count(Probe(owner, status or "no frames", stop_ms=pause,
                                         stops=stops))
            owner = nxt
        return self._count(Probe(owner, "moved"))  # not reached: the loop always returns

    def _count(self, p: Probe) -> Probe:
        self.counts[p.status] = self.counts.get(p.status, 0) + 1
        return p

    def _safe(self, tid: int) -> None:
        st = read_stat(self.pid, tid)
        if st is not None and st.state == "T" and ensure_running(
                self.pid, self.start_ticks, self.stopped_before) and not self.stopped_before:
            self.resumed += 1

    def pause_summary(self) -> dict[str, float | int]:
        return pause_summary(self.pauses_ms, "stops")

    def close(self) -> None:
        if self.unwinder is not None:
            self.unwinder.close()
            self.unwinder = None
