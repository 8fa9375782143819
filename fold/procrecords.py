"""A snapshot log's /proc records (``# wallflame-proc``, ``# wallflame-read``): how a record is
read, and the wait class /proc alone gives a blocked thread (its system call, the lock at a
futex's address, the kernel function it sleeps in), used when the stack cannot say.
"""

from __future__ import annotations

import json
from typing import Any

from wallflame.waitclasses import FALLBACK

#: x86-64 system calls a blocked thread may sit in, by wait class: used when /proc says the
#: thread was asleep but the stack (read a moment later) shows it running again.
SYSCALL_CLASS = {
    **dict.fromkeys((35, 230), "sleep"),  # nanosleep, clock_nanosleep
    # poll, select, epoll_*...; and pause, rt_sigtimedwait, rt_sigsuspend (as the rules class
    # a thread that waits for a signal)
    **dict.fromkeys((7, 23, 34, 128, 130, 232, 270, 271, 281, 441), "poll"),
    **dict.fromkeys((0, 1, 17, 18, 19, 20, 42, 43, 44, 45, 46, 47, 74, 75, 208, 288, 299, 426),
                    "io"),  # read/write family, connect/accept, send/recv, fsync, aio, uring
}
SYS_FUTEX = 202
#: ``restart_syscall``: a timed wait (futex, poll, nanosleep) that a signal or a ptrace stop
#: (a snapshot's own) interrupted goes on in it, and /proc shows it instead of the call it
#: continues: the kernel function it sleeps in (``wchan``) says which.  A ``nanosleep``
#: restarted sleeps in functions the kernel marks as the scheduler's own
#: (``hrtimer_nanosleep_restart``, ``do_nanosleep``), which ``wchan`` skips: it then names the
#: system call's entry, ``do_syscall_64`` (Linux 6.1, x86-64: ``sleep 1000`` stopped and
#: continued, or attached and detached, showed ``219`` and ``do_syscall_64`` where it had
#: shown ``230`` and ``hrtimer_nanosleep``; a restarted timed futex wait kept
#: ``futex_do_wait``, a restarted ``poll`` ``poll_schedule_timeout``).  The kernel's other
#: restarts are sleeps on other clocks.
SYS_RESTART = 219
WCHAN_CLASS = (("futex", "condvar"), ("poll_schedule", "poll"), ("do_sys_poll", "poll"),
               ("do_select", "poll"), ("ep_poll", "poll"), ("do_nanosleep", "sleep"),
               ("hrtimer_nanosleep", "sleep"), ("do_syscall_64", "sleep"),
               ("__x64_sys_restart_syscall", "sleep"), ("do_cpu_nanosleep", "sleep"),
               ("alarmtimer_do_nsleep", "sleep"))
_FUTEX_WAIT, _FUTEX_PRIVATE, _FUTEX_CLOCK_REALTIME = 0, 128, 256
#: The kernel function an idle io_uring worker sleeps in (``io_worker_idle``).
_IO_WORKER_IDLE = "io_wq_worker"


def ran_before_stop(proc: dict[str, Any], pause: dict[str, Any], tid: int) -> bool:
    """Whether a thread ran between its /proc record and its stop for the stack: its
    timeslice count read before the record (``pcount``) and while stopped (the snapshot
    line's ``stop_pcount``) differ by more than the one timeslice the stop itself takes (a
    sleeping thread is woken to enter it).  False when either was not read."""
    before = int_or_none(proc.get("pcount"))
    counts = pause.get("stop_pcount")
    at_stop = int_or_none(counts.get(str(tid))) if isinstance(counts, dict) else None
    return before is not None and at_stop is not None and at_stop - before >= 2


def proc_class(proc: dict[str, Any], kstate: str) -> str:
    """A wait class from /proc alone: the system call the thread was blocked in and, for a
    futex, the lock read at its address (``kind``: a glibc mutex or rwlock) or the call
    itself (``futex``: ``[op, value]``): ``FUTEX_WAIT`` for the value 2 is how glibc's
    low-level lock waits (mutexes, and its internal locks such as malloc's); a condition
    variable, semaphore or join waits with ``FUTEX_WAIT_BITSET``."""
    if kstate == "D":
        return "io"
    if io_worker_idle(proc):
        return FALLBACK
    sc = int_or_none(proc.get("syscall"))
    if sc == SYS_FUTEX:
        kind = str(proc.get("kind") or "")
        if kind.startswith("rwlock"):
            return "rwlock"
        if kind.startswith("mutex") or (proc.get("owner") and proc.get("lock")):
            return "mutex"
        return "mutex" if _is_lock_wait(proc.get("futex")) else "condvar"
    if sc == SYS_RESTART:
        wchan = str(proc.get("wchan") or "")
        return next((cls for prefix, cls in WCHAN_CLASS if wchan.startswith(prefix)), FALLBACK)
    return SYSCALL_CLASS.get(sc, FALLBACK) if sc is not None else FALLBACK


def io_worker_idle(proc: dict[str, Any]) -> bool:
    """An io_uring worker (``iou-wrk-N``, a kernel thread of the process) waiting for work: it
    is in no system call of its own (its ``syscall`` file shows the one of the thread it was
    made for, ``io_uring_enter``, and its user stack is that thread's)."""
    return str(proc.get("wchan") or "").startswith(_IO_WORKER_IDLE)


def _is_lock_wait(futex: Any) -> bool:
    """A ``futex`` record field (``[op, value]``) that is a low-level lock's wait."""
    if not isinstance(futex, list) or len(futex) != 2:
        return False
    op, val = (int_or_none(x) for x in futex)
    return op is not None and op & ~(_FUTEX_PRIVATE | _FUTEX_CLOCK_REALTIME) == _FUTEX_WAIT \
        and val == 2


def int_or_none(v: Any) -> int | None:
    """An integer field of a record (a decimal string too), or None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.isdigit():
        return int(v)
    return None


def record(text: str) -> dict[str, Any] | None:
    """A record's JSON object, or None when the text is not one."""
    try:
        d = json.loads(text)
    except ValueError:
        return None
    return d if isinstance(d, dict) else None
