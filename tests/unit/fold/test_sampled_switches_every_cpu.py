"""The scheduler capture on every CPU (``PERF_RECORD_SWITCH_CPU_WIDE`` pairs of every task,
``sched:sched_switch`` stack samples filtered on the target's threads): the target's threads
are picked out by process, and nothing another task does changes the target's figures."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from wallflame.collect import budget, perf
from wallflame.fold.options import FoldOptions
from wallflame.fold.perf.sampled_switches import SampledSched
from wallflame.profile import Profile

PID = 100
OTHER = 200


def _t(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


def wide(tid: int, ns: int, way: str, preempt: bool = False, pid: int = PID,
         comm: str = "w") -> str:
    side = "next" if way == "OUT" else "prev"
    return (f"{comm} {pid}/{tid} {_t(ns)}: PERF_RECORD_SWITCH_CPU_WIDE {way}"
            f"{' preempt' if preempt else '        '}  {side} pid/tid:     0/0    \n")


def per_thread(tid: int, ns: int, way: str, preempt: bool = False, pid: int = PID,
               comm: str = "w") -> str:
    return f"{comm} {pid}/{tid} {_t(ns)}: PERF_RECORD_SWITCH {way}{' preempt' if preempt else ''}\n"


def sample(tid: int, ns: int, frames: list[str], state: str = "S", period: int = 1,
           pid: int = PID, comm: str = "w") -> str:
    head = (f"{comm} {pid}/{tid} {_t(ns)}: {period:10d} sched:sched_switch: prev_comm={comm} "
            f"prev_pid={tid} prev_prio=120 prev_state={state} ==> next_comm=x next_pid=0 "
            "next_prio=120\n")
    lines = "".join(f"\t{0x1000 + i:16x} {f} (/bin/w)\n" for i, f in enumerate(frames))
    return head + lines + "\n"


def fork(pid: int, tid: int, ppid: int, ptid: int, ns: int) -> str:
    return f"w {ppid}/{ptid} {_t(ns)}: PERF_RECORD_FORK({pid}:{tid}):({ppid}:{ptid})\n"


def comm_rec(pid: int, tid: int, name: str = "w") -> str:
    return f"{name} 0/0 {_t(0)}: PERF_RECORD_COMM: {name}:{pid}/{tid}\n"


def run(text: str, at_start: list[int] | None) -> tuple[SampledSched, Profile]:
    s = SampledSched(FoldOptions().get_rules())
    if at_start is not None:
        s.set_window(0, None, at_start)
    s.feed(io.BytesIO(text.encode()))
    p = Profile()
    s.finish(p, {"stack_period": 1})
    return s, p


WAIT = ["pthread_cond_wait", "idle", "main"]
NOISE = ["__schedule", "busy_other", "main"]


def test_the_targets_threads_are_picked_out_and_other_tasks_dropped() -> None:
    text = (
        # perf's listing of what ran when the chunk began (time 0): the target, another task
        fork(PID, PID, 1, 1, 0) + comm_rec(PID, PID) + fork(PID, 101, PID, PID, 0)
        + fork(OTHER, OTHER, 1, 1, 0)
        + sample(101, 1_000, WAIT) + wide(101, 1_010, "OUT")
        + sample(OTHER, 1_100, NOISE, pid=OTHER)   # let through by a merged filter range
        + wide(OTHER, 1_200, "IN", pid=OTHER) + wide(OTHER, 2_000, "OUT", pid=OTHER)
        + wide(101, 5_010, "IN")
        # a thread created during the capture, and a process the target forks
        + fork(PID, 102, PID, 101, 5_500) + wide(102, 6_000, "IN")
        + sample(102, 6_500, WAIT) + wide(102, 6_510, "OUT") + wide(102, 9_510, "IN")
        + fork(300, 300, PID, 101, 7_000) + wide(300, 7_100, "IN", pid=300)
        + wide(300, 7_200, "OUT", preempt=True, pid=300) + wide(300, 7_900, "IN", pid=300)
        # an exited task's record (perf names it -1)
        + "x 500/-1 0.000008000: PERF_RECORD_SWITCH_CPU_WIDE OUT  next pid/tid: 0/0\n"
        + wide(101, 10_000, "OUT", preempt=True) + wide(101, 10_400, "IN"))
    s, p = run(text, [PID, 101])
    assert s.every_cpu and s.unparsed == 0
    assert set(s.threads) == {101, 102, 300}
    assert s.target_pids == {PID, 300}
    assert s.foreign == 4  # the other task's two switches and its sample, the exited one
    sched = p.meta.extra["sched_threads"]
    assert sched["101"]["blocked_ns"] == 4_000
    assert sched["101"]["runnable_ns"] == 400
    assert sched["102"]["blocked_ns"] == 3_000
    assert sched["300"]["runnable_ns"] == 700
    off = {k.frames for k in p.stacks if k.tid in (101, 102)}
    assert ("main", "busy_other", "__schedule") not in off
    assert ("main", "idle", "pthread_cond_wait") in off
    assert p.meta.extra["sched"]["every_cpu"] is True
    assert p.meta.extra["sched"]["other_tasks_records"] == 4


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[int, str, bool, bool]]:
    """A target thread's switches in time order: (gap, way, preempt, sampled)."""
    n = draw(st.integers(1, 30))
    out: list[tuple[int, str, bool, bool]] = []
    for i in range(n):
        way = "OUT" if i % 2 == 0 else "IN"
        out.append((draw(st.integers(1, 10_000)), way, draw(st.booleans()),
                    draw(st.booleans())))
    return out


def _render(hist: list[tuple[int, str, bool, bool]], record: str,
            noise: list[int]) -> str:
    t = 1_000_000
    text = ""
    k = 0
    for gap, way, preempt, sampled in hist:
        while k < len(noise) and noise[k] <= t:  # other tasks' records, in time order
            n = noise[k]
            text += (wide(OTHER, n, "OUT" if k % 2 else "IN", pid=OTHER)
                     + sample(OTHER + 1, n, NOISE, pid=OTHER))
            k += 1
        t += gap
        if way == "OUT" and sampled:
            text += sample(101, t - 1, WAIT, "R" if preempt else "S")
        if record == "wide":
            text += wide(101, t, way, preempt and way == "OUT")
        else:
            text += per_thread(101, t, way, preempt and way == "OUT")
    return text


@settings(max_examples=60, deadline=None)
@given(histories(), st.lists(st.integers(1_000_000, 1_400_000), max_size=40))
def test_other_tasks_change_nothing(hist: list[tuple[int, str, bool, bool]],
                                    noise: list[int]) -> None:
    """The same switches of a target thread, read from a per-thread capture or from a capture
    on every CPU with any number of other tasks' records among them, give the same
    profile."""
    noise.sort()
    _, a = run(comm_rec(PID, 101) + _render(hist, "per_thread", []), [101])
    s, b = run(comm_rec(PID, 101) + comm_rec(OTHER, OTHER) + comm_rec(OTHER, OTHER + 1)
               + _render(hist, "wide", noise), [101])
    assert s.unparsed == 0
    assert dict(a.stacks) == dict(b.stacks)
    assert a.meta.extra["sched_threads"] == b.meta.extra["sched_threads"]


def test_the_stack_period_takes_as_many_stacks_as_the_rate_per_thread() -> None:
    rates = {1: 10_000.0, 2: 5_000.0, 3: 2.0}
    # 3 a second per thread: 3 + 3 + 2 stacks a second out of 15,002 switches
    assert budget.stack_period(rates, 3.0) == 1876
    assert budget.stack_period(rates, 0.0) == 1          # every switch
    assert budget.stack_period({1: 0.0}, 3.0) == 1        # a target that did not switch
    assert budget.stack_period({}, 3.0) == 1
    assert budget.stack_period({1: 2.0}, 10.0) == 1       # every switch fits


def test_the_scheduler_on_every_cpu_is_one_filtered_perf() -> None:
    opts = perf.PerfOptions(499, "dwarf", True, 0.0, 32768, system_wide=True,
                            switch_filter="prev_pid==7", stack_period=40)
    cmd = perf.record_command(7, perf.Path("/tmp/x.data"), opts, 5)
    assert "-p" not in cmd and "-a" in cmd and "--switch-events" in cmd
    assert cmd[cmd.index("--filter") + 1] == "prev_pid==7"
    assert cmd[cmd.index("-c") + 1] == "40" and "--no-period" in cmd
    assert cmd[cmd.index("--call-graph") + 1] == "dwarf,32768"
    assert cmd[cmd.index("-e") + 1] == "sched:sched_switch"
    per = perf.record_command(7, perf.Path("/tmp/x.data"),
                              perf.PerfOptions(499, "dwarf", True, 3.0, 32768), 5)
    assert "-p" in per and "-a" not in per
