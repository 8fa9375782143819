"""The scheduler's split with sampled stacks and the snapshots' stops
(``fold.perf.sampled_switches``): a snapshot's ptrace stop interrupts the wait it finds a
thread in, so the unsampled interval it ended and the one that restarted the wait take the
snapshot's stack (``sched_stops``), if the thread got a CPU once, briefly, between
the two; the rest is split stratum by stratum of the intervals' durations over the sampled
and the known intervals of each stratum.  The split sums exactly to the thread's measured
blocked time whatever the stops, the native pass gives the same as the Python one, and the
snapshot fold reports the stops' instants only when asked."""

from __future__ import annotations

from array import array
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from unit.fold.reference_switches import PythonSched
from wallflame.classify import default_rules
from wallflame.fold.perf.sampled_switches import SampledSched
from wallflame.fold.perf.sched_split import blocked_split as _blocked_split
from wallflame.fold.perf.sched_thread import SchedThread as _Thread
from wallflame.profile import Profile
from wallflame.timeline import LOG_BLOCKED, LOG_RUNNABLE, IntervalLog

MUTEX = (("start_thread", "worker", "__lll_lock_wait"), "S")

MS = 1_000_000
COND_FRAMES = ["start_thread", "worker", "pthread_cond_wait", "__futex_abstimed_wait_common"]


#: The class the tests build: the product's (native passes) or the Python reference's
#: (``passes``).
_CLASS: dict[str, type[SampledSched]] = {"class": SampledSched}


def _new() -> SampledSched:
    sched = _CLASS["class"](default_rules())
    sched.threads.clear()  # nothing read: the threads and log are set by hand
    return sched


def _sched(rows: list[tuple[int, int, int, tuple[tuple[str, ...], str, int] | None]],
           marks: list[list[object]], on_cpu: tuple[int, ...] = (),
           how: str | None = None) -> _Thread:
    """One thread (tid 7) with these (start, dur, kind, sample) intervals, clipped to a window
    that holds them all, the snapshots' stops ``marks`` and its on-CPU (start, end) pairs
    (``how``: ``python`` for the reference, else as ``passes`` says)."""
    sched = PythonSched(default_rules()) if how == "python" else _new()
    sched.threads.clear()
    th = _Thread(tid=7, pid=7, comm="worker", seen=True, on_cpu=array("q", on_cpu))
    sched.threads[7] = th
    log = IntervalLog()
    for start, dur, kind, sample in rows:
        log.add(7, start, dur, kind, sample)
    sched._log = log
    sched.set_marks(marks)
    sched._clip(Profile(), -1, 10**12)
    return th


@pytest.fixture(params=["native", "python"])
def passes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test with the native passes (``_speedups.clip_log``) and with the Python
    reference's (``reference_switches.PythonSched``)."""
    if request.param == "python":
        monkeypatch.setitem(_CLASS, "class", PythonSched)
    return str(request.param)


def _long_wait_rows() -> list[tuple[int, int, int, tuple[tuple[str, ...], str, int] | None]]:
    mutex = (tuple(MUTEX[0]), "S", 10)
    rows: list[tuple[int, int, int, tuple[tuple[str, ...], str, int] | None]] = []
    for i in range(100):  # 100 mutex waits of 50 us, one in 10 with its stack
        rows.append((1000 * MS + i * MS, 50_000, LOG_BLOCKED, mutex if i % 10 == 0 else None))
    rows += [
        (-3 * MS, 2 * MS, LOG_BLOCKED, None),     # a short wait ending 3.5 ms before the stop
        (0, 400 * MS, LOG_BLOCKED, None),         # the long wait the stop ends (0.5 ms later)
        (400 * MS, 300_000, LOG_RUNNABLE, None),  # woken by the stop, waiting for a CPU
        (400_400_000, 20_000, LOG_BLOCKED, None),  # the stop itself (too short to match)
        (401 * MS, 300 * MS, LOG_BLOCKED, None),  # the wait restarted after it
    ]
    return rows


def test_a_stop_gives_its_stack_to_the_wait_it_ended_and_restarted(passes: str) -> None:
    marks = [[7, 400 * MS + 500_000, COND_FRAMES, "S"]]
    th = _sched(_long_wait_rows(), marks)
    split, unsampled = _blocked_split(th)
    by = dict(split)
    cond = (tuple(COND_FRAMES), "S")
    assert by[cond] == 700 * MS  # the two pieces, exactly; the short wait 3.5 ms off: not
    assert sum(by.values()) == th.blocked and unsampled == 0
    assert th.known_ns == 700 * MS


def test_without_the_stop_the_long_wait_goes_to_the_sampled_short_ones(passes: str) -> None:
    """What the split did before: 700 ms of one wait given to a mutex sampled at 50 us."""
    th = _sched(_long_wait_rows(), [])
    by = dict(_blocked_split(th)[0])
    assert list(by) == [(tuple(MUTEX[0]), "S")] and sum(by.values()) == th.blocked


def test_a_wait_after_the_thread_ran_is_not_the_one_the_stop_restarted(passes: str) -> None:
    """The stop found a mutex wait, which then ended: the thread ran 2 ms (its critical
    section) and slept, 3 ms after the stop.  The sleep starts within the match window but is
    not the mutex wait restarted; with the thread's CPU time between them counted, it is not
    matched (on-CPU up to ``MARK_MAX_CPU_NS`` is the stop's own handling)."""
    stop = 100 * MS
    rows: list[tuple[int, int, int, tuple[tuple[str, ...], str, int] | None]] = [
        (90 * MS, 10 * MS - 300_000, LOG_BLOCKED, None),  # the mutex wait the stop ended
        (stop + 3 * MS, 300 * MS, LOG_BLOCKED, None),     # the sleep after the lock was held
        (500 * MS, 50_000, LOG_BLOCKED, (tuple(MUTEX[0]), "S", 10)),
    ]
    marks = [[7, stop, list(MUTEX[0]), "S"]]
    ran = _sched(rows, marks, on_cpu=(stop + 200_000, stop + 2_900_000))
    assert ran.known_ns == 10 * MS - 300_000  # the wait it ended only
    brief = _sched(rows, marks, on_cpu=(stop + 200_000, stop + 210_000))
    assert brief.known_ns == 10 * MS - 300_000 + 300 * MS  # 10 us of CPU: a restart


def test_a_wait_before_another_wait_is_not_the_one_the_stop_ended(passes: str) -> None:
    """A sleep ended; the thread ran 10 us and waited 0.9 ms on a condition variable (too short
    to be matched), where the stop found it.  The sleep ended within the match window with
    little CPU after it, but the thread got a CPU twice before the stop: it is not the wait the
    stop ended."""
    stop = 400 * MS
    rows: list[tuple[int, int, int, tuple[tuple[str, ...], str, int] | None]] = [
        (100 * MS, 299 * MS, LOG_BLOCKED, None),         # the sleep, ends 1 ms before the stop
        (399 * MS + 10_000, 900_000, LOG_BLOCKED, None),  # the condition variable's wait
        (600 * MS, 50_000, LOG_BLOCKED, (tuple(MUTEX[0]), "S", 10)),
    ]
    marks = [[7, stop, COND_FRAMES, "S"]]
    twice = (399 * MS, 399 * MS + 10_000, 399 * MS + 910_000, 399 * MS + 930_000)
    assert _sched(rows, marks, on_cpu=twice).known_ns == 0
    once = (399 * MS, 399 * MS + 20_000)  # woken, ran into the stop: the wait it ended
    assert _sched(rows, marks, on_cpu=once).known_ns == 299 * MS


def test_a_stop_too_far_from_an_interval_gives_nothing(passes: str) -> None:
    far = [[7, 406 * MS, COND_FRAMES, "S"]]  # 6 ms after the wait's end, inside the restart
    th = _sched(_long_wait_rows(), far)
    by = dict(_blocked_split(th)[0])
    assert (tuple(COND_FRAMES), "S") not in by and th.known_ns == 0


Rows = list[tuple[int, int, int, tuple[tuple[str, ...], str, int] | None]]


def _sleep_cycle_rows(known_sleeps: int) -> tuple[Rows, list[list[object]]]:
    """A program that cycles through a 300 ms sleep and a 2 ms condition-variable wait, 30
    times, sampled one switch in 10 but only ever on the condition variable (an aliased
    sampling: the sleep's switch never falls on the period), and the snapshots' stops that
    found the first ``known_sleeps`` sleeps."""
    cond = (tuple(COND_FRAMES), "S", 10)
    rows: Rows = []
    marks: list[list[object]] = []
    t = 0
    for i in range(30):
        if i < known_sleeps:  # a stop halfway: the sleep it ended, and the sleep restarted
            rows.append((t, 150 * MS, LOG_BLOCKED, None))
            marks.append([7, t + 150 * MS + 500_000, list(SLEEP_FRAMES), "S"])
            rows.append((t + 151 * MS, 149 * MS, LOG_BLOCKED, None))
        else:
            rows.append((t, 300 * MS, LOG_BLOCKED, None))
        t += 301 * MS
        rows.append((t, 2 * MS, LOG_BLOCKED, cond if i % 3 == 0 else None))
        t += 3 * MS
    return rows, marks


SLEEP_FRAMES = ("start_thread", "worker", "nap", "clock_nanosleep")


def test_long_waits_take_the_stack_of_known_waits_of_their_length(passes: str) -> None:
    """Sleeps whose stack no sample and no stop showed take the stack of the sleeps a stop
    did show (same duration stratum), not that of the short sampled waits: 20 of 30 sleeps
    known (each in two pieces around the stop), all 30 go to the sleep, and the condition
    variable keeps its own 60 ms."""
    rows, marks = _sleep_cycle_rows(known_sleeps=20)
    th = _sched(rows, marks)
    split, unsampled = _blocked_split(th)
    by = dict(split)
    assert by[(SLEEP_FRAMES, "S")] == 30 * 300 * MS - 20 * MS
    assert by[(tuple(COND_FRAMES), "S")] == 30 * 2 * MS
    assert sum(by.values()) == th.blocked and unsampled == 0
    # how it was split: the stops' 20 sleeps (in two pieces each) as they were, the other 10
    # sleeps and the 30 condition-variable waits within their strata, nothing pooled
    assert th.split_by == (20 * 299 * MS, 10 * 300 * MS + 30 * 2 * MS, 0)


def test_the_split_says_how_much_had_no_evidence_of_its_length(passes: str) -> None:
    """No stop: the sleeps' stratum has no wait with a stack, so its time is pooled, and the
    three parts still sum to the thread's blocked time."""
    rows, _ = _sleep_cycle_rows(known_sleeps=0)
    th = _sched(rows, [])
    _blocked_split(th)
    assert th.split_by == (0, 30 * 2 * MS, 30 * 300 * MS)
    assert sum(th.split_by) == th.blocked + th.leading


def test_without_known_long_waits_they_go_to_the_sampled_stacks(passes: str) -> None:
    """No stop found a sleep: nothing says what the 300 ms waits were, so they go over the
    thread's sampled stacks as before (the estimate the strata cannot improve)."""
    rows, _ = _sleep_cycle_rows(known_sleeps=0)
    th = _sched(rows, [])
    assert dict(_blocked_split(th)[0]) == {(tuple(COND_FRAMES), "S"): th.blocked}


def test_a_stratum_pools_sampled_and_known_waits_by_their_counts(passes: str) -> None:
    """In one stratum, one sampled wait (period 10) and three known ones of another stack:
    the unknown rest goes 1:3 between the two estimates, whatever the sampled one's period."""
    mutex = (tuple(MUTEX[0]), "S", 10)
    rows: list[tuple[int, int, int, tuple[tuple[str, ...], str, int] | None]] = []
    marks: list[list[object]] = []
    t = 0
    for i in range(8):  # eight waits of 40 ms: one sampled, three known, four unknown
        rows.append((t, 40 * MS, LOG_BLOCKED, mutex if i == 0 else None))
        if i in (1, 2, 3):
            marks.append([7, t + 40 * MS + 500_000, COND_FRAMES, "S"])
        t += 50 * MS
    th = _sched(rows, marks)
    by = dict(_blocked_split(th)[0])
    rest = 5 * 40 * MS  # the sampled one and the four unknown
    assert by[(tuple(COND_FRAMES), "S")] == 3 * 40 * MS + rest * 3 // 4
    assert sum(by.values()) == th.blocked == 8 * 40 * MS


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2000), st.integers(1, 50), st.booleans()),
                min_size=1, max_size=60),
       st.lists(st.integers(0, 2100), max_size=10),
       st.lists(st.text(max_size=8), min_size=0, max_size=3))
def test_marks_keep_the_total(rows: list[tuple[int, int, bool]], at_ms: list[int],
                              hostile: list[str]) -> None:
    """Whatever the stops (also malformed ones), the split sums to the measured total."""
    mutex = (tuple(MUTEX[0]), "S", 4)
    log_rows: list[tuple[int, int, int, tuple[tuple[str, ...], str, int] | None]] = []
    t = 0
    for gap, dur, sampled in rows:
        t += gap * 100_000
        log_rows.append((t, dur * MS // 10, LOG_BLOCKED, mutex if sampled else None))
        t += dur * MS // 10
    marks: list[list[object]] = [[7, a * MS, COND_FRAMES, "S"] for a in at_ms]
    marks += [[h, h, h, h] for h in hostile] + [[7, "x", None, 3], [7]]
    th = _sched(log_rows, marks)
    split, _ = _blocked_split(th)
    assert sum(ns for _, ns in split) == th.blocked
    assert all(ns > 0 for _, ns in split)
    if th.strata:  # sampled stacks: the three parts of the split cover the blocked time
        assert sum(th.split_by) == th.blocked + th.leading
    th_py = _sched(log_rows, marks, how="python")  # the Python reference gives the same
    assert _blocked_split(th_py)[0] == split and th_py.known == th.known


def test_the_snapshot_fold_reports_where_blocked_threads_were_stopped(tmp_path: Any) -> None:
    """``# wallflame-snapshot`` lines carry each thread's stop instant (libdw); the fold turns a
    blocked thread's into a mark when asked, and ignores malformed instants."""
    import json

    from wallflame.fold import FoldOptions, fold_file
    from wallflame.rundir import PROC_LINE, SNAPSHOT_LINE, SNAPSHOTS_MAGIC
    from wallflame.stops import STOP_MARKS

    lines = [SNAPSHOTS_MAGIC + ' {"backend": "libdw", "pid": 5, "rate_hz": 2.0}']
    for n, at in enumerate((123_456_789, "x", -5)):
        lines += ["PID 5 - process", "TID 5:",
                  "#0  0x00007f0000001000 __futex_abstimed_wait_common",
                  "#1  0x00007f0000002000 pthread_cond_wait@@GLIBC_2.3.2",
                  "#2  0x00005500000003000 worker", "#3  0x00007f0000004000 start_thread",
                  "TID 6:", "#0  0x00005500000005000 spin", "#1  0x00007f0000004000 start_thread",
                  PROC_LINE + json.dumps({"tid": 5, "state": "S", "comm": "w"}),
                  PROC_LINE + json.dumps({"tid": 6, "state": "R", "comm": "s"}),
                  SNAPSHOT_LINE + json.dumps({"t_ns": 10**18 + n * 5 * 10**8, "pause_ms": 0.1,
                                              "stopped_mono_ns": {"5": at, "6": 99}}),
                  f"TS {1_000_000_000 + n // 2}.{(n % 2) * 500_000_000:09d}"]
    log = tmp_path / "snapshots.log"
    log.write_text("\n".join(lines) + "\n")
    plain = fold_file(str(log), FoldOptions(), "eu-stack")
    assert STOP_MARKS not in plain.meta.extra
    marked = fold_file(str(log), FoldOptions(stop_marks=True), "eu-stack")
    assert marked.meta.extra[STOP_MARKS] == [
        [5, 123_456_789, ["start_thread", "worker", "pthread_cond_wait",
                          "__futex_abstimed_wait_common"], "S"]]


def test_a_range_over_the_whole_window_splits_as_the_window_does(passes: str) -> None:
    """The stops' waits reach the timeline (their stack, period 0), and a range over the whole
    window (``report --from --to``) splits the blocked time by the same strata as the run's
    own profile: per class, to the nanosecond."""
    from wallflame import timebuild
    from wallflame.profile import OFF
    from wallflame.report.timerange import Range, restrict
    from wallflame.timeline import Timeline

    rows, marks = _sleep_cycle_rows(known_sleeps=20)
    sched = _new()
    sched.threads[7] = _Thread(tid=7, pid=7, comm="worker", seen=True)
    log = IntervalLog()
    for start, dur, kind, sample in rows:
        log.add(7, start, dur, kind, sample)
    sched._log = log
    sched.set_marks(marks)
    whole = Profile()
    sched.finish(whole, {}, window=(-1, 10**12))
    assert sum(1 for p, s in zip(log.period, log.sample, strict=True) if s >= 0 and not p) == 40
    tl = Timeline(t0=-1, t1=10**12, off_source="sched")
    timebuild.add_spans(tl, log, sched.rules, None, tracer_stops=False)
    tl.threads[7].name, tl.threads[7].pid = "worker", 7
    got = restrict(Profile(meta=whole.meta), tl, Range(-1, 10**12))

    def per_class(p: Profile) -> dict[str, int]:
        out: dict[str, int] = {}
        for k, w in p.stacks.items():
            if k.state == OFF:
                out[k.wait] = out.get(k.wait, 0) + w
        return out

    assert per_class(got) == per_class(whole)
    assert per_class(whole)["sleep"] == 30 * 300 * MS - 20 * MS
