"""Who made a thread wait: the critical path of every wait, as stacks of the code that ran
on the waiter's behalf.

Read from a run's timeline (``wallflame.timeline``) when the scheduler and the wake-ups were
recorded (``Timeline.wakes``):

* **The waker of a wait.**  A blocked span ends at the wake-up that made its thread runnable;
  its waker is the task in whose context the last ``sched_waking`` of the thread inside the
  span fired (``waker_of``).  A waking whose kernel call chain shows a timer's expiry or an
  interrupt is named so (``NO_TASK``: it fired in whatever task the interrupt hit), as is a
  waking on an idle CPU (tid 0); a wait of a class that only a timer or a device ends
  (``TERMINAL_WAKERS``: a sleep, I/O) is named by that class; the task that resumed a thread
  from the collect's own stop is the collect (``tracers``): the wait its stop cut short went
  on after it, and its waker is that of the wait resumed; another task outside the target is
  named as ``ps`` names it; none in the span: unknown.
* **The critical path of a wait** ``[a, e)`` woken by target thread ``W``: ``W``'s own states
  over ``[a, e)``, walked as they come: its on-CPU samples in that range (each stands for its
  period: an estimate, like every on-CPU figure), its runnable spans (``[waiting for a CPU]``,
  exact, with the stack it was preempted in), its blocked spans (recursed into: their own
  waker over the part of the span inside the range, up to ``MAX_DEPTH`` hops), its stops by
  the collect.  This is the last-waker chain: in a convoy, where several holders ran in turn
  during one wait, the path goes back from the last holder through the wake-up that let it in.
* **The blame stacks**: root first, the waiting group (``consumer-*``), its wait (the class and
  the lock), then per hop ``woken by <group>``, that thread's state and its stack (on-CPU: the
  sample's; runnable: where it was preempted; blocked: where it blocked, then the next hop);
  weighted in ns of waiting.  Their sum over a wait is the wait's length (the on-CPU parts as
  estimated from samples).

What it cannot see: the work of a process outside the target; a thread's on-CPU code with no
sample in the range (short waits are seen in aggregate, not one by one).
"""

from __future__ import annotations

import os
from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass, field

from wallflame.locks.lockshare import lock_name
from wallflame.threadgroups import name_pattern
from wallflame.timeline import (
    KINDS,
    RUNNABLE,
    STOPPED,
    UNSAMPLED,
    WAKER_IRQ,
    WAKER_TIMER,
    ThreadLine,
    Timeline,
)

#: At most this many hops from a waiter to the code that ran for it.
MAX_DEPTH = 8
#: Waits that only a timer or a device ends: their waker is named by the class.
TERMINAL_WAKERS = {"sleep": "a timer", "io": "I/O completion"}
#: Wakers that are no task of the target's: a timer's expiry or an interrupt (the waking's
#: kernel call chain), or a waking on an idle CPU (the idle task, tid 0).
NO_TASK = {WAKER_TIMER: "a timer", WAKER_IRQ: "an interrupt", 0: "an interrupt"}
UNKNOWN_WAKER = "waker unknown"
#: A wait still going when the window closed: no waker yet.
STILL_WAITING = "still waiting when the window closed"
#: The waker of a wait the collect's own tracer ended (to stop the thread for its stack),
#: when the wait did not resume after the stop; one that did is followed, this many stops on.
TRACER = "the collect's stop for a stack"
STOPS_FOLLOWED = 64
ON_CPU = "[on-CPU]"
WAITING_FOR_CPU = "[waiting for a CPU]"
STOPPED_FRAME = "[stopped by the collect]"
BLOCKED_CLASSES = frozenset(range(UNSAMPLED + 1))


@dataclass
class Blame:
    """The blame stacks of a run and, per (waiting group, wait), the time waited and the part
    of it whose waker is known."""

    stacks: dict[tuple[str, ...], float] = field(default_factory=lambda: defaultdict(float))
    waited: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    explained: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))

    def folded(self) -> list[tuple[str, int]]:
        """``frame;frame;... ns`` lines' parts, heaviest first."""
        rows = [(";".join(k), round(w)) for k, w in self.stacks.items() if round(w) > 0]
        return sorted(rows, key=lambda r: (-r[1], r[0]))


def wait_label(tl: Timeline, th: ThreadLine, i: int) -> str:
    """A blocked span's wait: its class, and the lock most observed at its call site."""
    kind = KINDS[th.p_kind[i]]
    lock = tl.lock_of(th.p_locks[i])
    if lock:
        return f"{kind} {lock_name(lock)}"
    return "blocked" if kind == "unsampled" else kind


def waker_of(th: ThreadLine, start: int, end: int) -> int | None:
    """The tid whose waking of ``th`` ended the span ``[start, end]``: the last waking in it;
    None when there is none."""
    i = bisect_right(th.w_time, end) - 1
    if i < 0 or th.w_time[i] < start:
        return None
    return th.w_waker[i]


class _Walk:
    def __init__(self, tl: Timeline, blame: Blame, max_depth: int) -> None:
        self.tl = tl
        self.blame = blame
        self.max_depth = max_depth
        self.frames = tl.stacks.frames_of
        self.groups = {tid: name_pattern(th.name or str(tid)) for tid, th in tl.threads.items()}
        self.tracers = tracers(tl)

    def hop(self, th: ThreadLine, i: int, lo: int, hi: int, path: tuple[str, ...],
            depth: int) -> bool:
        """Charge ``[lo, hi)`` of span ``i`` of ``th`` (blocked) to what woke it; whether its
        waker is known."""
        kind = KINDS[th.p_kind[i]]
        w = self.waker(th, i)
        if kind in TERMINAL_WAKERS:
            self.add((*path, f"woken by {TERMINAL_WAKERS[kind]}"), hi - lo)
            return True
        if w is None:
            self.add((*path, STILL_WAITING if self.open_at_end(th, i) else UNKNOWN_WAKER),
                     hi - lo)
            return False
        if w in NO_TASK:
            self.add((*path, f"woken by {NO_TASK[w]}"), hi - lo)
            return True
        waker = self.tl.threads.get(w)
        if waker is None and w in self.tracers:
            self.add((*path, f"woken by {TRACER}"), hi - lo)
            return True
        if waker is None or w == th.tid:
            name = self.tl.waker_names.get(w, f"tid {w}")
            self.add((*path, f"woken by {name}"), hi - lo)
            return True
        here = (*path, f"woken by {self.groups[w]}")
        if depth >= self.max_depth:
            self.add(here, hi - lo)
        else:
            self.states(waker, lo, hi, here, depth + 1)
        return True

    def waker(self, th: ThreadLine, i: int) -> int | None:
        """The waker of span ``i`` of ``th``: a span the collect's own stop ended is the same
        wait, resumed after the stop, so its waker is that of the wait it resumed into (the
        next blocked span, past the stop, at most ``STOPS_FOLLOWED`` stops on)."""
        w = None
        for _ in range(STOPS_FOLLOWED + 1):
            end = th.p_start[i] + th.p_dur[i]
            w = waker_of(th, th.p_start[i], end) if end < self.tl.t1 else None
            if w is None or w not in self.tracers or w in self.tl.threads:
                return w
            j = i + 1  # past the stop and its runnable tail, to the wait resumed
            while j < len(th.p_kind) and th.p_kind[j] in (STOPPED, RUNNABLE):
                j += 1
            if j >= len(th.p_kind) or th.p_kind[j] not in BLOCKED_CLASSES:
                return w
            i = j
        return w

    def open_at_end(self, th: ThreadLine, i: int) -> bool:
        """Whether the wait of span ``i`` (past the collect's stops) lasts to the window's
        end."""
        for j in range(i, min(len(th.p_kind), i + 4 * STOPS_FOLLOWED)):
            if th.p_start[j] + th.p_dur[j] >= self.tl.t1:
                return True
            if j > i and th.p_kind[j] in BLOCKED_CLASSES and self.waker(th, j) not in \
                    self.tracers:
                return False
        return False

    def states(self, th: ThreadLine, lo: int, hi: int, path: tuple[str, ...],
               depth: int) -> None:
        """``th``'s states over ``[lo, hi)``: its on-CPU samples, runnable spans, blocked spans
        (each to its own waker) and stops."""
        j0, j1 = bisect_left(th.s_time, lo), bisect_left(th.s_time, hi)
        for j in range(j0, j1):
            self.add((*path, ON_CPU, *self.frames(th.s_stack[j])), th.s_weight[j])
        i = max(0, bisect_right(th.p_start, lo) - 1)
        while i < len(th.p_start) and th.p_start[i] < hi:
            a, b = max(lo, th.p_start[i]), min(hi, th.p_start[i] + th.p_dur[i])
            if b > a:
                k = th.p_kind[i]
                if k == RUNNABLE:
                    self.add((*path, WAITING_FOR_CPU, *self.frames(th.p_stack[i])), b - a)
                elif k == STOPPED:
                    self.add((*path, STOPPED_FRAME), b - a)
                else:
                    self.hop(th, i, a, b, (*path, f"[blocked: {wait_label(self.tl, th, i)}]",
                                           *self.frames(th.p_stack[i])), depth)
            i += 1

    def add(self, stack: tuple[str, ...], ns: float) -> None:
        self.blame.stacks[stack] += ns


def tracers(tl: Timeline) -> set[int]:
    """The tasks that resumed a target thread from a stop of the collect's own tracer: only
    the tracer does, so they are the collect (its stop for a stack also ends the wait it
    interrupts)."""
    out = set()
    for th in tl.threads.values():
        for start, dur, kind in zip(th.p_start, th.p_dur, th.p_kind, strict=True):
            if kind == STOPPED:
                w = waker_of(th, start, start + dur)
                if w is not None and w > 0 and w not in tl.threads:
                    out.add(w)
    return out


def blame(tl: Timeline, max_depth: int = MAX_DEPTH) -> Blame | None:
    """The blame stacks of every blocked span of every thread of ``tl``; None when its
    wake-ups were not recorded."""
    if not tl.wakes:
        return None
    out = Blame()
    walk = _Walk(tl, out, max_depth)
    for tid, th in tl.threads.items():
        for i, k in enumerate(th.p_kind):
            if k not in BLOCKED_CLASSES or th.p_dur[i] <= 0:
                continue
            label = wait_label(tl, th, i)
            key = (walk.groups[tid], label)
            a = th.p_start[i]
            b = a + th.p_dur[i]
            out.waited[key] += b - a
            if walk.hop(th, i, a, b, key, 1):
                out.explained[key] += b - a
    return out


def write(path: str | os.PathLike[str], found: Blame) -> None:
    """The blame stacks as folded lines (``stack ns``), heaviest first."""
    from wallflame.output import open_output

    with open_output(str(path)) as f:
        for stack, ns in found.folded():
            f.write(f"{stack} {ns}\n")


__all__ = ["MAX_DEPTH", "TERMINAL_WAKERS", "Blame", "blame", "wait_label", "waker_of", "write"]
