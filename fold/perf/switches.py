"""Scheduler records to exact off-CPU time.

A ``sched:sched_switch`` sample recorded with a call chain is taken in the context of the task
that leaves the CPU (``prev_pid``): its stack is where that thread blocked.  The thread is
off-CPU from that instant until it runs again.  The switch-in is known exactly from a
``sched_switch`` whose ``next_pid`` is the thread (seen only when the previous task was also
recorded, e.g. system-wide), from a ``PERF_RECORD_SWITCH IN`` record (``--switch-events``), or
from a ``PERF_RECORD_SWITCH_CPU_WIDE OUT ... next pid/tid``.  Without any of these the next
evidence that the thread ran (an on-CPU sample, or its next switch-out) closes the interval;
that bound is counted as *inferred* and reported.

A switch-out with ``prev_state`` ``R``/``R+`` is a preemption: the thread was runnable, not
blocked, so that time is run-queue latency: it is added in the ``runnable`` class with the stack
at which the thread was preempted (never as a blocked class: waiting for a CPU is not waiting
on anything the program did) and summed per thread in ``meta.extra["runqueue_ns"]``.  Intervals
still open when the capture ends are closed at the last timestamp of the capture.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from wallflame.classify import Rules, classify
from wallflame.profile import OFF, RUNNABLE, Profile, StackKey


@dataclass
class _Open:
    start: int
    frames: tuple[str, ...]
    comm: str
    pid: int
    state: str


class SchedTracker:
    """Pairs switch-outs with the next switch-in of the same thread, in time order."""

    def __init__(self, profile: Profile, rules: Rules) -> None:
        self.profile = profile
        self.rules = rules
        self.open: dict[int, _Open] = {}
        self.runqueue: dict[int, int] = {}
        self.exact = 0
        self.inferred = 0
        self.closed_at_end = 0
        self.switch_outs = 0
        self._classes: dict[tuple[tuple[str, ...], str], str] = {}

    def switch_out(self, tid: int, pid: int, comm: str, time: int, frames: tuple[str, ...],
                   state: str) -> None:
        """``tid`` left the CPU at ``time`` in kernel state ``state`` with stack ``frames``."""
        self.switch_outs += 1
        if tid in self.open:
            # It ran again in between without a recorded switch-in: it was running by now.
            self._close(tid, time, exact=False)
        self.open[tid] = _Open(time, frames, comm, pid, state)

    def switch_in(self, tid: int, time: int) -> None:
        """Exact evidence: ``tid`` got the CPU at ``time``."""
        if tid in self.open:
            self._close(tid, time, exact=True)

    def running(self, tid: int, time: int) -> None:
        """Inexact evidence: ``tid`` was seen running at ``time`` (an on-CPU sample)."""
        if tid in self.open:
            self._close(tid, time, exact=False)

    def finish(self, last_time: int) -> None:
        """Close every interval still open at the end of the capture, then record totals."""
        for tid in sorted(self.open):
            self.closed_at_end += 1
            self._close(tid, last_time, exact=True)
        meta = self.profile.meta
        meta.count("sched_switch", self.switch_outs)
        sched = meta.extra.setdefault("sched", {})
        sched.update({"switch_outs": self.switch_outs, "exact_switch_in": self.exact,
                      "inferred_switch_in": self.inferred, "closed_at_end": self.closed_at_end})
        if self.runqueue:
            rq = meta.extra.setdefault("runqueue_ns", {})
            for tid, ns in sorted(self.runqueue.items()):
                rq[str(tid)] = rq.get(str(tid), 0) + ns
        if self.inferred:
            meta.warn(f"{self.inferred} of {self.exact + self.inferred} off-CPU intervals were "
                      "closed at the thread's next sample, not at an exact switch-in (record "
                      "with --switch-events and perf script --show-switch-events for exact "
                      "times)")

    def _close(self, tid: int, time: int, exact: bool) -> None:
        o = self.open.pop(tid)
        dt = time - o.start
        if dt <= 0:
            return
        if exact:
            self.exact += 1
        else:
            self.inferred += 1
        if o.state.startswith("R"):
            self.runqueue[tid] = self.runqueue.get(tid, 0) + dt
            self.profile.add(StackKey(o.frames, tid, o.comm, o.pid, OFF, RUNNABLE), dt)
            return
        kstate = o.state[:1]
        ck = (o.frames, kstate)
        wait = self._classes.get(ck)
        if wait is None:
            wait = self._classes[ck] = classify(o.frames, kstate, self.rules)
        self.profile.add(StackKey(o.frames, tid, o.comm, o.pid, OFF, wait), dt)


#: The fields that matter, anchored so that a thread name (at most 15 bytes, chosen by the
#: target) cannot forge them: ``next_comm`` is matched greedily up to the last ``next_pid``.
_SWITCH = re.compile(r"prev_pid=(\d+) prev_prio=-?\d+ prev_state=(\S+) ==> next_comm=.* "
                     r"next_pid=(\d+) next_prio=-?\d+\s*$")


def parse_switch_fields(rest: str) -> tuple[int, str, int] | None:
    """``(prev_pid, prev_state, next_pid)`` from the text of a ``sched_switch`` record."""
    m = _SWITCH.search(rest)
    if m is None:
        return None
    return int(m.group(1)), m.group(2), int(m.group(3))
