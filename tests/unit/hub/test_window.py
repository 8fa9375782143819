"""Every thread, the whole window: on-CPU totals from the switches, threads that never
switched, the kernel's run-queue delay without a scheduler capture, runnable time by the
class it waited at (``wallflame.window``, ``report.summary``, the demo's headline)."""

from __future__ import annotations

from typing import Any

from conftest import FIXTURES

from wallflame.commands.demo import consumer_mutex_share
from wallflame.profile import OFF, ON, RUNNABLE, Profile, StackKey
from wallflame.report.summary import build_summary
from wallflame.window import (
    NO_SAMPLE,
    NO_SNAPSHOT,
    WHOLE_WINDOW,
    exact_oncpu,
    kernel_runqueue,
    whole_window,
)


def _listing(*rows: tuple[int, str, str, list[int]]) -> dict[str, Any]:
    return {"mono_ns": 0, "threads": [{"tid": t, "comm": c, "state": s, "schedstat": ss,
                                       "wchan": "hrtimer_nanosleep"} for t, c, s, ss in rows]}


def test_on_cpu_stacks_are_scaled_to_the_switches_total() -> None:
    p = Profile()
    p.add(StackKey(("main", "work"), 1, "w", 9, ON), 300)
    p.add(StackKey(("main", "idle"), 1, "w", 9, ON), 100)
    p.add(StackKey(("main", "wait"), 1, "w", 9, OFF, "mutex"), 50)
    exact_oncpu(p, {"1": {"on_ns": 1000}, "2": {"on_ns": 70}})
    on = {k.frames: w for k, w in p.stacks.items() if k.state == ON}
    assert on == {("main", "work"): 750, ("main", "idle"): 250, (NO_SAMPLE,): 70}
    assert p.stacks[StackKey(("main", "wait"), 1, "w", 9, OFF, "mutex")] == 50  # untouched
    assert p.meta.extra["oncpu_samples_ns"] == {"1": 400, "2": 0}


def test_a_thread_that_never_switched_gets_the_whole_window() -> None:
    listings = {"start": _listing((1, "w", "R", [0, 0, 1]), (2, "napper", "S", [5, 0, 1]),
                                  (3, "gone", "S", [0, 0, 1])),
                "end": _listing((1, "w", "R", [9, 0, 2]), (2, "napper", "S", [5, 0, 1]))}
    snaps = Profile()
    p = Profile()
    done = whole_window(p, listings, {1}, snaps, 4_000)
    assert done == [2]  # 1 was seen; 3 ended during the window
    (key, w), = p.stacks.items()
    assert (key.tid, key.frames, key.wait, w) == (2, (WHOLE_WINDOW, "hrtimer_nanosleep"),
                                                 "sleep", 4_000)
    # with snapshot stacks, the window is split over them in their proportions
    snaps.add(StackKey(("main", "pthread_cond_wait"), 2, "napper", 0, OFF, "condvar"), 3)
    snaps.add(StackKey(("main", "nanosleep"), 2, "napper", 0, OFF, "sleep"), 1)
    p = Profile()
    whole_window(p, listings, {1}, snaps, 4_000)
    assert {k.wait: w for k, w in p.stacks.items()} == {"condvar": 3_000, "sleep": 1_000}


def test_without_a_scheduler_capture_runnable_time_is_the_kernels() -> None:
    ms = 1_000_000
    listings = {"start": _listing((1, "w", "R", [0, 100 * ms, 1]), (2, "x", "S", [0, 50, 1])),
                "end": _listing((1, "w", "R", [9, 700 * ms, 2]))}
    p = Profile()
    p.meta.window_ns = 1000 * ms
    p.add(StackKey(("main",), 1, "w", 0, ON), 300 * ms)
    assert kernel_runqueue(p, listings) == 600 * ms
    row = build_summary(p)["threads"][0]
    assert row["runnable_s"] == 0.6 and row["coverage"] == 0.9
    assert any("schedstat" in w for w in p.meta.warnings)


def test_without_a_scheduler_capture_every_total_is_the_kernels() -> None:
    """Snapshots only: on-CPU at the kernel's run time (the samples split it over stacks),
    runnable the run-queue delay, blocked what they leave of the window: the sum is the
    window, whatever the samples' sampling error."""
    ms = 1_000_000
    listings = {"start": _listing((1, "w", "R", [0, 0, 1])),
                "end": _listing((1, "w", "R", [300 * ms, 200 * ms, 9]))}
    p = Profile()
    p.meta.window_ns = 1000 * ms
    p.add(StackKey(("main", "work"), 1, "w", 0, ON), 240 * ms)  # samples: 40 ms short
    p.add(StackKey(("main", "idle"), 1, "w", 0, ON), 80 * ms)
    p.add(StackKey(("main", "wait"), 1, "w", 0, OFF, "mutex"), 450 * ms)
    assert kernel_runqueue(p, listings, (0, 1000 * ms)) == 200 * ms
    on = {k.frames: w for k, w in p.stacks.items() if k.state == ON}
    assert on == {("main", "work"): 225 * ms, ("main", "idle"): 75 * ms}
    assert p.meta.extra["oncpu_source"] == "schedstat"
    assert p.meta.extra["oncpu_samples_ns"] == {"1": 320 * ms}
    row = build_summary(p)["threads"][0]
    assert (row["on_cpu_s"], row["runnable_s"], row["off_cpu_s"]) == (0.3, 0.2, 0.5)
    assert row["coverage"] == 1.0


def test_runnable_time_by_the_class_it_waited_at_and_the_demo_share() -> None:
    """Woken from the queue mutex and not yet running, or running inside the lock's wait, is
    still inside the lock call for the program's own clock: the headline counts both, over on
    + runnable + blocked."""
    ms = 1_000_000
    p = Profile()
    p.meta.window_ns = 1000 * ms
    lock = ("pop", "pthread_mutex_lock", "__lll_lock_wait")
    p.add(StackKey(("pop", "process"), 1, "consumer-1", 0, ON), 350 * ms)
    # on a CPU inside the lock's wait (leaving the futex): the program's clock counts it
    p.add(StackKey((*lock, "entry_SYSCALL_64", "do_futex", "finish_task_switch"), 1,
                   "consumer-1", 0, ON), 50 * ms)
    p.add(StackKey(lock, 1, "consumer-1", 0, OFF, "mutex"), 300 * ms)
    p.add(StackKey(lock, 1, "consumer-1", 0, OFF, RUNNABLE), 100 * ms)
    p.add(StackKey(("pop", "process"), 1, "consumer-1", 0, OFF, RUNNABLE), 200 * ms)
    s = build_summary(p)
    row = s["threads"][0]
    assert row["runnable_after"] == {"mutex": 0.1, "other": 0.2}
    assert row["on_cpu_in"] == {"mutex": 0.05}  # the running stack no rule matches is not in it
    assert row["on_cpu_s"] == 0.4
    assert row["coverage"] == 1.0
    assert abs(consumer_mutex_share(s) - 0.45) < 1e-9


def test_without_a_scheduler_capture_blocked_time_is_what_the_kernel_leaves() -> None:
    """The snapshots' weights only estimate blocked time: it is the window less the kernel's
    run time and run-queue delay, split over the snapshot stacks in their proportions."""
    ms = 1_000_000
    listings = {"start": _listing((1, "w", "S", [0, 0, 1])),
                "end": _listing((1, "w", "S", [300 * ms, 100 * ms, 9]))}
    p = Profile()
    p.meta.window_ns = 1000 * ms
    p.add(StackKey(("main",), 1, "w", 0, ON), 300 * ms)
    p.add(StackKey(("main", "lock"), 1, "w", 0, OFF, "mutex"), 600 * ms)  # overestimated
    p.add(StackKey(("main", "nap"), 1, "w", 0, OFF, "sleep"), 200 * ms)
    kernel_runqueue(p, listings, (0, 1000 * ms))
    row = build_summary(p)["threads"][0]
    assert row["wait"]["mutex"] == 0.45 and row["wait"]["sleep"] == 0.15
    assert row["coverage"] == 1.0


def test_the_groups_only_spare_passes_that_find_nothing() -> None:
    """``runnable_after`` and ``label_totals`` give the same with the profile's groups as
    without them: the groups only skip a pass over the stacks that would find nothing (no
    runnable stack, no off-CPU stack)."""

    from wallflame.fold import load_inputs
    from wallflame.report.sublabels import label_totals
    from wallflame.report.summary import runnable_after

    fixtures = FIXTURES
    mixed = Profile(stacks={
        StackKey(("main", "spin"), 1, "w", 0, ON): 5,
        StackKey(("main", "pthread_mutex_lock", "__lll_lock_wait"), 1, "w", 0, OFF, "mutex"): 7,
        StackKey(("main", "pthread_mutex_lock"), 1, "w", 0, OFF, RUNNABLE): 3,
    })
    profiles = [mixed, mixed.on_cpu(), mixed.off_cpu(), Profile(),
                load_inputs([str(fixtures / "rundir" / "v0-mix")]),
                load_inputs([str(fixtures / "servers" / "postgres-backend-pgbench.folded")])]
    for p in profiles:
        groups = p.grouped()
        assert runnable_after(p, groups) == runnable_after(p)
        assert label_totals(p, groups) == label_totals(p)
    assert runnable_after(mixed, mixed.grouped()) == {1: {"mutex": 3}}


def _ran_and_waited(snapshots: bool) -> Profile:
    """A thread that ran 700 ms and waited 200 ms for a CPU in a 1 s window, with on-CPU
    samples only (no snapshot caught it blocked), through ``kernel_runqueue``."""
    ms = 1_000_000
    listings = {"start": _listing((1, "w", "R", [0, 0, 1])),
                "end": _listing((1, "w", "R", [700 * ms, 200 * ms, 9]))}
    p = Profile()
    p.meta.window_ns = 1000 * ms
    p.add(StackKey(("main", "spin"), 1, "w", 7, ON), 690 * ms)
    kernel_runqueue(p, listings, (0, 1000 * ms), snapshots=snapshots)
    return p


def test_blocked_time_no_snapshot_caught_is_kept_and_named() -> None:
    """A thread the snapshots only ever caught running still blocked for part of the window
    by the kernel's counters: that time is kept under its own frame, and said."""
    p = _ran_and_waited(snapshots=True)
    blocked = {k: w for k, w in p.stacks.items() if k.state == OFF and k.wait != "runnable"}
    assert blocked == {StackKey((NO_SNAPSHOT,), 1, "w", 7, OFF, "other"): 100_000_000}
    row = build_summary(p)["threads"][0]
    assert (row["on_cpu_s"], row["runnable_s"], row["off_cpu_s"]) == (0.7, 0.2, 0.1)
    assert row["coverage"] == 1.0
    assert any(NO_SNAPSHOT in w for w in p.meta.warnings)


def test_without_snapshots_no_blocked_time_is_made_up() -> None:
    """``--off-cpu none``: no snapshot was taken, so blocked time has no stack to go under
    and the thread's figures are its on-CPU and run-queue time alone, as asked."""
    p = _ran_and_waited(snapshots=False)
    assert not [k for k in p.stacks if k.state == OFF and k.wait != "runnable"]
    assert not any(NO_SNAPSHOT in w for w in p.meta.warnings)


def test_threads_that_began_or_ended_in_the_window_have_the_kernels_figures() -> None:
    """Without a scheduler capture: a thread started within the window is counted from its
    start (its counters begin at zero), one that ended to its last reading (the process
    watch's), one that did both from its start to that reading; each one's on-CPU, runnable
    and blocked time add up to the part of the window it lived."""
    ms = 1_000_000
    clock = {"clk_tck": 100, "boot_minus_mono_ns": 5_000 * ms}  # boot clock 5 s ahead

    def born_at(t_ms: int) -> int:  # start_ticks of a thread started at t_ms (monotonic)
        return (t_ms * ms + clock["boot_minus_mono_ns"]) * 100 // 1_000_000_000

    start = _listing((1, "old", "S", [0, 0, 1]), (2, "ends", "S", [100 * ms, 10 * ms, 1]))
    end = _listing((1, "old", "S", [100 * ms, 0, 2]), (3, "new", "R", [200 * ms, 50 * ms, 3]))
    end["threads"][1]["start_ticks"] = born_at(1400)
    end["clock"] = clock
    last = {"clock": clock, "threads": [
        {"tid": 2, "comm": "ends", "start_ticks": 1, "schedstat": [300 * ms, 30 * ms, 4],
         "schedstat_ns": 1600 * ms},
        {"tid": 4, "comm": "brief", "start_ticks": born_at(1200), "schedstat": [80 * ms, 0, 1],
         "schedstat_ns": 1300 * ms}]}
    p = Profile()
    p.meta.window_ns = 1000 * ms
    p.add(StackKey(("main", "spin"), 3, "new", 0, ON), 150 * ms)
    p.add(StackKey(("main", "nap"), 3, "new", 0, OFF, "sleep"), 99 * ms)
    kernel_runqueue(p, {"start": start, "end": end, "last": last}, (1000 * ms, 2000 * ms))
    assert p.meta.extra["schedstat_alive_ns"] == {"2": 600 * ms, "3": 600 * ms, "4": 100 * ms}
    rows = {r["tid"]: r for r in build_summary(p)["threads"]}
    # ended: 200 ms run, 20 ms waiting for a CPU in the 600 ms from the window's start
    assert (rows[2]["on_cpu_s"], rows[2]["runnable_s"], rows[2]["off_cpu_s"]) == (0.2, 0.02, 0.38)
    # started at 1.4 s: 200 ms run, 50 ms waiting, its one snapshot stack scaled to the rest
    assert (rows[3]["on_cpu_s"], rows[3]["runnable_s"], rows[3]["wait"]["sleep"]) == \
        (0.2, 0.05, 0.35)
    # started at 1.2 s, last read at 1.3 s: no sample, no snapshot; its time is kept, named
    assert (rows[4]["on_cpu_s"], rows[4]["off_cpu_s"]) == (0.08, 0.02)
    assert {k.frames for k in p.stacks if k.tid == 4} == {(NO_SAMPLE,), (NO_SNAPSHOT,)}
    assert p.meta.threads[4] == "brief"
    for tid in (1, 2, 3, 4):
        assert rows[tid]["coverage"] == 1.0, rows[tid]
    assert rows[4]["alive_s"] == 0.1 and "alive_s" not in rows[1]


def test_listings_of_any_shape_are_read_without_a_fault() -> None:
    """A capture edited or cut short: rows without an integer tid, listings that are not
    objects, counters and clocks that are not numbers are left out, never a traceback."""
    ms = 1_000_000
    good = {"threads": [{"tid": 1, "schedstat": [100 * ms, 0, 1]}]}
    odd = [None, "x", 5, {"threads": "x"}, {"threads": {"a": 1}},
           {"threads": [{"tid": "a"}, {"tid": True}, "row", {"tid": 2, "schedstat": ["a", "b"],
                                                               "schedstat_ns": "x",
                                                               "start_ticks": "y"}]},
           {"clock": {"clk_tck": 0, "boot_minus_mono_ns": "x"},
            "threads": [{"tid": 3, "schedstat": [1, 2, 3], "schedstat_ns": 10**30,
                         "start_ticks": -5}]}]
    for start in (good, *odd):
        for end in (good, *odd):
            for last in odd:
                p = Profile()
                kernel_runqueue(p, {"start": start, "end": end, "last": last}, (0, 1000 * ms))
                whole_window(p, {"start": start, "end": end}, set(), None, 1000 * ms)
                assert all(w >= 0 for w in p.stacks.values())


def test_the_kernels_runnable_time_is_drawn_under_its_thread() -> None:
    """A thread's run-queue delay without a runnable stack becomes a ``[runnable]`` stack of
    that time (every view draws it); a thread whose runnable time has stacks keeps them."""
    from wallflame.profile import OFF, ON, RUNNABLE, Meta, Profile, StackKey
    from wallflame.window import RUNNABLE_FRAME, _draw_runnable

    p = Profile(meta=Meta(unit="ns"))
    p.add(StackKey(("main", "work"), 1, "w-1", 9, ON), 5)
    p.add(StackKey(("main", "pop"), 2, "w-2", 9, OFF, RUNNABLE), 7)
    _draw_runnable(p, {"1": 3, "2": 4})
    assert p.stacks[StackKey((RUNNABLE_FRAME,), 1, "w-1", 9, OFF, RUNNABLE)] == 3
    assert not any(k.frames == (RUNNABLE_FRAME,) for k in p.stacks if k.tid == 2)
