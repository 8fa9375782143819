"""The collect's own ptrace stops: out of the target's wait classes and stacks, shown apart."""

from __future__ import annotations

import io

from wallflame import stops
from wallflame.classify import find_rule
from wallflame.profile import OFF, Profile, StackKey
from wallflame.report.summary import build_summary
from wallflame.report.text import write_text
from wallflame.rundir import Capture

MS = 1_000_000
WAIT = ("clone3", "start_thread", "worker", "pthread_cond_wait", "__futex_abstimed_wait_common")
STOPPED = (*WAIT, "entry_SYSCALL_64_after_hwframe", "do_syscall_64", "exit_to_user_mode_loop",
           "arch_do_signal_or_restart", "get_signal", "ptrace_stop", "schedule", "__schedule")


def profile() -> Profile:
    p = Profile()
    p.meta.window_ns = 1_000 * MS
    p.meta.extra["pause"] = {"snapshots": 4, "median_ms": 0.05, "max_ms": 0.1, "total_ms": 0.4}
    p.add(StackKey(WAIT, 7, "pool", 0, OFF, "condvar"), 900 * MS)
    p.add(StackKey(STOPPED, 7, "pool", 0, OFF, "other"), 100 * MS)
    p.add(StackKey(WAIT, 8, "pool", 0, OFF, "condvar"), 1_000 * MS)
    return p


def test_the_rules_name_a_tracer_stop() -> None:
    assert find_rule(STOPPED) == ("other", "tracer stop")


def test_stops_leave_the_wait_classes_and_count_in_coverage() -> None:
    p = profile()
    assert stops.separate(p, "wallflame") == 100 * MS
    assert not any(stops.is_tracer_stop(k.frames) for k in p.stacks)
    s = build_summary(p)
    assert s["totals"]["wait"]["other"] == 0.0
    row = {r["tid"]: r for r in s["threads"]}
    assert row[7]["stopped_s"] == 0.1 and row[7]["off_cpu_s"] == 0.9
    assert row[7]["coverage"] == 1.0 and row[8]["stopped_s"] == 0.0
    assert s["tracer_stops"] == {"cause": "wallflame", "total_s": 0.1, "measured_pause_s": 0.0004,
                                 "threads": [{"tid": 7, "name": "", "s": 0.1}]}
    out = io.StringIO()
    write_text(p, out)
    assert "stopped by wallflame (ptrace): 0.100s over 1 threads, in no wait class\n" \
        in out.getvalue()


def test_nothing_to_separate() -> None:
    p = profile()
    p.stacks = {k: w for k, w in p.stacks.items() if not stops.is_tracer_stop(k.frames)}
    assert stops.separate(p, "wallflame") == 0
    assert "tracer_stops" not in p.meta.extra
    s = build_summary(p)
    assert s["tracer_stops"]["threads"] == [] and s["tracer_stops"]["cause"] == ""


def test_only_a_collect_that_stopped_the_target_owns_the_stops() -> None:
    def stopped(d: dict[str, object]) -> bool:
        return Capture.from_json(d).stopped_the_target()

    assert stopped({"pmp": {"snapshots": 3}})
    assert stopped({"owners": {"pause": {"stops": 2}}})
    assert not stopped({"pmp": {"snapshots": 0}, "owners": {"pause": {"stops": 0}}})
    assert not stopped({})  # --off-cpu sched: another tracer's stops stay


def test_released_but_waiting_for_a_cpu_is_told_apart() -> None:
    p = profile()
    p.add(StackKey(STOPPED, 7, "pool", 0, OFF, "runnable"), 20 * MS)
    assert stops.separate(p, "wallflame") == 120 * MS
    assert stops.stopped_ns(p) == {7: 120 * MS}
    assert stops.stopped_runnable_ns(p) == {7: 20 * MS}
    ts = build_summary(p)["tracer_stops"]
    assert ts["runnable_s"] == 0.02 and ts["threads"][0]["runnable_s"] == 0.02


def test_the_tracers_own_timing_is_summed_per_thread() -> None:
    acc: dict[int, list[float]] = {}
    stops.add_stops(acc, {"7": [0.05, 0.4], "8": [0.1, 0.2]})  # a snapshot record
    stops.add_stops(acc, [[7, 0.05, 0.1]])                      # a holder probe
    # malformed entries are left out, not guessed
    stops.add_stops(acc, {"x": [1, 2], "9": [1], "10": [-1, 2], "11": [True, 1]})
    stops.add_stops(acc, "nonsense")
    stops.add_stops(acc, {"12": [float("inf"), 1], "13": [float("nan"), 1]})
    assert acc == {7: [0.1, 0.5, 2], 8: [0.1, 0.2, 1]}
    assert stops.merge_measured([{"7": [float("inf"), 1, 1]}, {"8": "x"}, {"9": [1]},
                                 {"10": [-5, 2, 1]}, {"<b>": [1, 2, 1]}]) == {}
    merged = stops.merge_measured([stops.stops_json(acc), {"7": [1, 2, 1]}, None])
    assert merged == {7: [100_001, 500_002, 3], 8: [100_000, 200_000, 1]}
    p = profile()
    stops.separate(p, "wallflame")
    stops.record_measured(p, merged, "wallflame")
    assert stops.measured_ns(p) == {7: (100_001, 500_002, 3), 8: (100_000, 200_000, 1)}
    ts = build_summary(p)["tracer_stops"]
    assert ts["timed_stops"] == 4 and ts["timed_s"] == [0.0002, 0.0007]
    row = {t["tid"]: t for t in ts["threads"]}
    assert row[8] == {"tid": 8, "name": "", "s": 0.0, "timed_s": [0.0001, 0.0002], "stops": 1}
    out = io.StringIO()
    write_text(p, out)
    text = " ".join(out.getvalue().split())  # (the line is wrapped at 100 columns)
    assert "the tracer timed its 4 stops of single threads at 0.000-0.001s" in text


def test_sampled_stopped_time_is_kept_within_the_tracers_own_timing() -> None:
    """Thread 7's one sampled stop stood for every switch of its period: 100 ms, where the
    tracer timed its stops at 2-3 ms in all.  The estimate is brought to the upper bound and
    the other 97 ms go back to its other blocked stack; thread 8, never sampled stopped but
    stopped 1-1.5 ms by the tracer, gets the lower bound from its wait.  Each thread's total
    stays the same."""
    p = profile()
    stops.separate(p, "wallflame")
    stops.record_measured(p, {7: [2 * MS, 3 * MS, 4], 8: [1 * MS, 3 * MS // 2, 4]}, "wallflame")
    before = {t: sum(w for k, w in p.stacks.items() if k.tid == t) + stops.stopped_ns(p).get(t, 0)
              for t in (7, 8)}
    assert stops.bound_by_measured(p) == 2
    assert stops.stopped_ns(p) == {7: 3 * MS, 8: 1 * MS}
    assert p.stacks[StackKey(WAIT, 7, "pool", 0, OFF, "condvar")] == 997 * MS
    assert p.stacks[StackKey(WAIT, 8, "pool", 0, OFF, "condvar")] == 999 * MS
    for t in (7, 8):
        assert sum(w for k, w in p.stacks.items() if k.tid == t) + stops.stopped_ns(p)[t] \
            == before[t]
    assert p.meta.extra["tracer_stops"]["bounded"] == {"7": [100 * MS, 3 * MS],
                                                       "8": [0, 1 * MS]}
    assert p.meta.extra["tracer_stops"]["total_ns"] == 4 * MS
    # a note for the quality panel, not a warning: nothing for the user to act on
    assert any("from its own timing of the stops" in n for n in p.meta.extra["notes"])
    assert not any("own timing" in w for w in p.meta.warnings)
    # within the bounds already: nothing moves
    assert stops.bound_by_measured(p) == 0


def test_the_tracers_timing_counts_only_what_lies_in_the_window() -> None:
    """The collect's first snapshot can come before its window opens; the scheduler's
    intervals are cut at the window's edges, so the tracer's own timing must be too: a
    snapshot before or after the window counts nothing, one across an edge keeps only its
    upper bound (the thread stood stopped for part of it inside)."""
    from wallflame.fold.snapshots import windowed_stops

    stops = {"7": [2.9, 3.3]}
    window = (10_000_000_000, 20_000_000_000)

    def at(t: int, span_ms: float = 4.0) -> object:
        return windowed_stops({"stops": stops, "span_ms": span_ms}, t, window)

    assert at(9_000_000_000) is None                      # 0.4 s before: the failed run's case
    assert at(20_000_000_000) is None                     # at the end: after it
    assert at(15_000_000_000) == stops                    # inside
    assert at(9_998_000_000) == {"7": [0.0, 3.3]}         # across the opening
    assert at(19_998_000_000) == {"7": [0.0, 3.3]}        # across the end
    assert windowed_stops({"stops": stops}, 15_000_000_000, None) == stops  # no window known
    assert windowed_stops({"stops": stops}, None, window) == stops          # untimed snapshot
