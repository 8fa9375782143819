"""The critical path of a wait (``wallflame.critpath``) on small timelines whose answer is
known by construction, and the wakers read from the wake-up capture."""

from __future__ import annotations

import io

import pytest

from wallflame import critpath
from wallflame.fold.options import FoldOptions
from wallflame.fold.perf.sampled_switches import SampledSched
from wallflame.timeline import KINDS, RUNNABLE, STOPPED, WAKER_IRQ, WAKER_TIMER, Timeline

MUTEX, CONDVAR, SLEEP = KINDS.index("mutex"), KINDS.index("condvar"), KINDS.index("sleep")
COMPUTE = ("main", "crit", "compute")
IO_WORK = ("io", "io_work")


def _timeline(waker_of_wait: int | None, wait_kind: int = MUTEX, wait_end: int = 1100,
              outside: dict[int, str] | None = None) -> Timeline:
    """A request thread ``req-1`` blocked ``[100, wait_end)``; the holder ``req-2`` ran
    ``COMPUTE`` over [100, 500) (2 samples of 200), waited for ``io-thread`` over [500, 900)
    (which ran ``IO_WORK``: 2 samples of 200), waited for a CPU over [900, 1000), ran
    ``COMPUTE`` over [1000, 1100) (a sample of 100), then woke ``req-1``."""
    tl = Timeline(t0=0, t1=10_000, wakes=True, waker_names=outside or {})
    lock = tl.lock_set({"0x10 <g_lock>": 5})
    req, holder, io_th = tl.thread(1, 1, "req-1"), tl.thread(2, 1, "req-2"), \
        tl.thread(3, 1, "io-thread")
    req.span(100, wait_end - 100, wait_kind, tl.stacks.intern(("main", "lock")), 1,
             lock if wait_kind == MUTEX else 0)
    if waker_of_wait is not None:
        req.w_time, req.w_waker = [1090], [waker_of_wait]
    for t, w in ((200, 200), (400, 200), (1050, 100)):
        holder.s_time.append(t)
        holder.s_weight.append(w)
        holder.s_stack.append(tl.stacks.intern(COMPUTE))
    holder.span(500, 400, CONDVAR, tl.stacks.intern(("main", "crit", "wait_io")))
    holder.span(900, 100, RUNNABLE, tl.stacks.intern(("main", "crit")))
    holder.w_time, holder.w_waker = [895], [3]
    for t in (600, 800):
        io_th.s_time.append(t)
        io_th.s_weight.append(200)
        io_th.s_stack.append(tl.stacks.intern(IO_WORK))
    return tl


WAIT = ("req-*", "mutex g_lock")
HOP = (*WAIT, "woken by req-*")
IO_HOP = (*HOP, "[blocked: condvar]", "main", "crit", "wait_io", "woken by io-thread")

CASES = [
    # (the waiter's waker, the wait's class, its end, outside names, max depth, expected)
    ("a chain: holder on-CPU, waiting for io-thread, waiting for a CPU",
     2, MUTEX, 1100, None, critpath.MAX_DEPTH,
     {(*HOP, "[on-CPU]", *COMPUTE): 500, (*IO_HOP, "[on-CPU]", *IO_WORK): 400,
      (*HOP, "[waiting for a CPU]", "main", "crit"): 100}),
    ("one hop at most: the holder's time unsplit", 2, MUTEX, 1100, None, 1, {HOP: 1000}),
    ("a sleep is ended by a timer", 2, SLEEP, 1100, None, critpath.MAX_DEPTH,
     {("req-*", "sleep", "woken by a timer"): 1000}),
    ("a waking on an idle CPU: an interrupt", 0, MUTEX, 1100, None, critpath.MAX_DEPTH,
     {(*WAIT, "woken by an interrupt"): 1000}),
    ("a waking in a timer's expiry", WAKER_TIMER, MUTEX, 1100, None, critpath.MAX_DEPTH,
     {(*WAIT, "woken by a timer"): 1000}),
    ("a waking in an interrupt", WAKER_IRQ, MUTEX, 1100, None, critpath.MAX_DEPTH,
     {(*WAIT, "woken by an interrupt"): 1000}),
    ("a task outside the target, named", 77, MUTEX, 1100, {77: "bash (pid 77)"},
     critpath.MAX_DEPTH, {(*WAIT, "woken by bash (pid 77)"): 1000}),
    ("no waking in the wait", None, MUTEX, 1100, None, critpath.MAX_DEPTH,
     {(*WAIT, critpath.UNKNOWN_WAKER): 1000}),
    ("a wait cut by the window's end has no waker yet", 2, MUTEX, 10_000, None,
     critpath.MAX_DEPTH, {(*WAIT, critpath.STILL_WAITING): 9900}),
]


@pytest.mark.parametrize(("name", "waker", "kind", "end", "outside", "depth", "expected"),
                         CASES, ids=[c[0] for c in CASES])
def test_the_blame_of_one_wait(name: str, waker: int | None, kind: int, end: int,
                               outside: dict[int, str] | None, depth: int,
                               expected: dict[tuple[str, ...], int]) -> None:
    found = critpath.blame(_timeline(waker, kind, end, outside), depth)
    assert found is not None
    mine = {k: v for k, v in found.stacks.items() if k[0] == "req-*" and k[1] != "condvar"}
    assert mine == expected
    key = ("req-*", KINDS[kind] if kind != MUTEX else "mutex g_lock")
    assert found.waited[key] == end - 100
    known = not {critpath.UNKNOWN_WAKER, critpath.STILL_WAITING} & {k[-1] for k in mine}
    assert found.explained[key] == (end - 100 if known else 0)


def test_the_holder_own_wait_is_blamed_on_io_thread() -> None:
    """Every blocked span is a wait of its own: the holder's condvar wait is io-thread's."""
    found = critpath.blame(_timeline(2))
    assert found is not None
    assert found.stacks[("req-*", "condvar", "woken by io-thread", "[on-CPU]", *IO_WORK)] == 400


def test_a_wait_ended_by_the_collect_stop_is_the_collect() -> None:
    """The task that resumes a thread from a stop of the collect is the collect's tracer:
    a wait it ended is named so, not after a task gone by the time the run is finished."""
    tl = _timeline(99)
    req = tl.threads[1]
    req.span(1200, 50, STOPPED)
    req.w_time.append(1250)
    req.w_waker.append(99)
    found = critpath.blame(tl)
    assert found is not None
    assert found.stacks[(*WAIT, f"woken by {critpath.TRACER}")] == 1000


def test_a_wait_the_collect_cut_short_is_blamed_on_the_waker_of_the_wait_resumed() -> None:
    """A wait the collect's stop ends goes on after the stop: its waker is that of the wait
    resumed (here the holder, which woke the resumed wait at 1100)."""
    tl = _timeline(2)
    req = tl.threads[1]
    req.p_start, req.p_dur, req.p_kind = [100], [300], [MUTEX]  # 100-400, then the stop
    req.span(400, 50, STOPPED)
    req.span(450, 20, RUNNABLE)
    req.span(470, 630, MUTEX, req.p_stack[0], 1, req.p_locks[0])
    req.w_time, req.w_waker = [390, 440, 1090], [99, 99, 2]
    found = critpath.blame(tl)
    assert found is not None
    mine = {k: v for k, v in found.stacks.items() if k[0] == "req-*" and k[1] == "mutex g_lock"}
    assert mine and all(k[2] == "woken by req-*" for k in mine), mine
    assert found.waited[WAIT] == found.explained[WAIT] == 930


def test_no_wakes_recorded_no_blame() -> None:
    tl = _timeline(2)
    tl.wakes = False
    assert critpath.blame(tl) is None


def test_a_stop_by_the_collect_is_its_own_frame() -> None:
    tl = _timeline(2)
    tl.threads[2].span(1000, 50, STOPPED)
    tl.threads[2].sort()
    found = critpath.blame(tl)
    assert found is not None
    assert found.stacks[(*HOP, critpath.STOPPED_FRAME)] == 50


def test_the_waker_is_the_tid_of_the_waking_line() -> None:
    """``sched_waking`` fires in the waker's context: the line's tid is the waker, unless its
    kernel call chain shows a timer or an interrupt; ``sched_wakeup`` lines stay the
    wake-up times (with the tracepoint's address and symbol, ``-F ...,ip,sym``)."""
    text = ("     42 10.000000100: sched:sched_waking: comm=w pid=7 prio=120 target_cpu=001\n"
            "\tffffffff813b53c6 try_to_wake_up\n\tffffffff816ec4ad anon_pipe_write\n\n"
            "      0 10.000000150: sched:sched_wakeup: comm=w pid=7 prio=120 target_cpu=001 "
            "ffffffff813b4dc5 ttwu_do_activate\n"
            "      0 10.000000900: sched:sched_waking: comm=w pid=7 prio=120 target_cpu=000\n"
            "     43 10.000001000: sched:sched_waking: comm=w pid=7 prio=120 target_cpu=000\n"
            "\tffffffff813b53c6 try_to_wake_up\n\tffffffff81369c4d handle_softirqs\n"
            "\tffffffff8142de4e hrtimer_wakeup\n\n"
            "     44 10.000002000: sched:sched_waking: comm=w pid=7 prio=120 target_cpu=000\n"
            "\tffffffff81369c4d handle_softirqs\n\n")
    s = SampledSched(FoldOptions().get_rules())
    s.feed_wakes(io.BytesIO(text.encode()))
    assert s.wakes == {7: [10_000_000_150]}
    assert s.wakers == {7: [10_000_000_100, 42, 10_000_000_900, 0, 10_000_001_000, WAKER_TIMER,
                            10_000_002_000, WAKER_IRQ]}
    assert critpath.waker_of(_line(s.wakers[7]), 10_000_000_000, 10_000_000_200) == 42
    assert critpath.waker_of(_line(s.wakers[7]), 10_000_000_200, 10_000_000_800) is None


def _line(pairs: list[int]):  # type: ignore[no-untyped-def]
    tl = Timeline(wakes=True)
    th = tl.thread(7)
    th.w_time, th.w_waker = pairs[0::2], pairs[1::2]
    return th
