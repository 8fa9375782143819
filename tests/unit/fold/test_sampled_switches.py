"""The sampled scheduler capture: exact blocked and run-queue time from every switch, stacks
from a sample of them; the data-rate budget's plan; chunk order."""

from __future__ import annotations

import io
import itertools
from array import array
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wallflame.collect import budget
from wallflame.collect.perf import data_chunks
from wallflame.fold.options import FoldOptions
from wallflame.fold.perf.sampled_switches import SampledSched
from wallflame.fold.perf.sched_passes import _level
from wallflame.fold.perf.sched_split import BIN_NS
from wallflame.names import UNSAMPLED
from wallflame.profile import OFF, RUNNABLE, Profile

PID = 100


def _t(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


def out(tid: int, ns: int, preempt: bool = False, comm: str = "w") -> str:
    return f"{comm} {PID}/{tid} {_t(ns)}: PERF_RECORD_SWITCH OUT{' preempt' if preempt else ''}\n"


def inn(tid: int, ns: int, comm: str = "w") -> str:
    return f"{comm} {PID}/{tid} {_t(ns)}: PERF_RECORD_SWITCH IN\n"


def sample(tid: int, ns: int, frames: list[str], state: str = "S", period: int = 1,
           comm: str = "w") -> str:
    head = (f"{comm} {PID}/{tid} {_t(ns)}: {period:10d} sched:sched_switch: prev_comm={comm} "
            f"prev_pid={tid} prev_prio=120 prev_state={state} ==> next_comm=x next_pid=0 "
            "next_prio=120\n")
    lines = "".join(f"\t{0x1000 + i:16x} {f} (/bin/w)\n" for i, f in enumerate(frames))
    return head + lines + "\n"


def fold(*chunks: str) -> Profile:
    s = SampledSched(FoldOptions().get_rules())
    for c in chunks:
        s.feed(io.BytesIO(c.encode()))
    p = Profile()
    s.finish(p, {"stack_hz": 10.0})
    return p


def by_stack(p: Profile, tid: int) -> dict[tuple[str, ...], int]:
    out_: dict[tuple[str, ...], int] = {}
    for k, w in p.stacks.items():
        if k.tid == tid and k.state == OFF and k.wait != RUNNABLE:
            out_[k.frames] = out_.get(k.frames, 0) + w
    return out_


LEAF_MUTEX = ["__lll_lock_wait", "take", "main"]   # leaf first, as perf prints
LEAF_COND = ["pthread_cond_wait", "idle", "main"]


def test_every_switch_sampled_gives_exact_stack_times() -> None:
    text = (sample(1, 1_000, LEAF_MUTEX) + out(1, 1_010) + inn(1, 5_010)
            + sample(1, 6_000, LEAF_COND) + out(1, 6_005) + inn(1, 16_005)
            + out(1, 17_000, preempt=True) + inn(1, 17_500))
    p = fold(text)
    stacks = by_stack(p, 1)
    assert stacks == {("main", "take", "__lll_lock_wait"): 4_000,
                      ("main", "idle", "pthread_cond_wait"): 10_000}
    assert p.meta.extra["runqueue_ns"] == {"1": 500}
    waits = {k.wait for k in p.stacks}
    assert waits == {"mutex", "condvar", RUNNABLE}
    # the preemption had no sample: its runnable time is where the thread blocked
    assert sum(w for k, w in p.stacks.items() if k.wait == RUNNABLE) == 500
    sched = p.meta.extra["sched"]
    assert sched["switch_outs"] == 3 and sched["stack_samples"] == 2
    assert sched["exact_switch_in"] == 3 and sched["inferred_switch_in"] == 0
    assert p.meta.samples["sched_switch"] == 2  # the evidence behind the stacks


def test_unsampled_switches_keep_exact_totals_split_by_period_times_duration() -> None:
    # Thread 1 blocks six times: 1000 ns each in take (one sample standing for 3 switches)
    # and 2000 ns each in idle (one sample standing for 3), plus one preemption.
    text = sample(1, 0, LEAF_MUTEX, period=3) + out(1, 10) + inn(1, 1_010)
    t = 2_000
    for _ in range(2):
        text += out(1, t) + inn(1, t + 1_000)
        t += 2_000
    text += sample(1, t, LEAF_COND, period=3) + out(1, t + 5) + inn(1, t + 2_005)
    t += 3_000
    for _ in range(2):
        text += out(1, t) + inn(1, t + 2_000)
        t += 3_000
    text += out(1, t, preempt=True) + inn(1, t + 700)
    p = fold(text)
    stacks = by_stack(p, 1)
    total = 3 * 1_000 + 3 * 2_000
    assert sum(stacks.values()) == total  # exact, from every switch
    assert stacks[("main", "take", "__lll_lock_wait")] == total * 3_000 // 9_000
    assert stacks[("main", "idle", "pthread_cond_wait")] == total - total * 3_000 // 9_000
    assert p.meta.extra["runqueue_ns"] == {"1": 700}
    assert p.meta.extra["sched"]["switch_outs"] == 7


def test_a_preemption_sample_is_runnable_time_not_a_stack() -> None:
    text = (sample(1, 0, ["spin", "main"], state="R") + out(1, 1) + inn(1, 301)
            + sample(1, 400, LEAF_MUTEX) + out(1, 401) + inn(1, 1_401))
    p = fold(text)
    assert by_stack(p, 1) == {("main", "take", "__lll_lock_wait"): 1_000}
    assert p.meta.extra["runqueue_ns"] == {"1": 300}


def test_leading_trailing_and_missing_switch_in() -> None:
    # thread 2 is first seen coming back (blocked since before the capture); thread 3's
    # last interval is still open at the end; thread 4 switches out twice without an IN.
    text = (sample(3, 900, LEAF_COND) + out(3, 1_000) + inn(2, 2_000) + inn(3, 2_500)
            + sample(2, 3_000, LEAF_MUTEX) + out(2, 3_001) + inn(2, 3_501)
            + sample(3, 4_000, LEAF_COND) + out(3, 4_001)
            + out(4, 5_000) + out(4, 6_000) + inn(4, 6_500) + inn(1, 9_000))
    p = fold(text)
    # thread 2: 1100 ns leading (from the capture's first record, 900) + 500 ns sampled
    assert by_stack(p, 2) == {("main", "take", "__lll_lock_wait"): 1_100 + 500}
    # thread 3: 1500 ns + open interval closed at the last record (9000)
    assert by_stack(p, 3) == {("main", "idle", "pthread_cond_wait"): 1_500 + 4_999}
    # thread 4: blocked 1000 (closed at its next OUT, inferred) + 500, no stack sampled
    assert by_stack(p, 4) == {(UNSAMPLED,): 1_500}
    sched = p.meta.extra["sched"]
    assert sched["inferred_switch_in"] == 1 and sched["closed_at_end"] == 1
    # thread 1 only comes back, at the end: 8100 ns leading, no stack either
    assert by_stack(p, 1) == {(UNSAMPLED,): 8_100}
    assert sched["unsampled_ns"] == 1_500 + 8_100 and sched["leading_ns"] == 1_100 + 8_100
    assert any("none of whose switches was sampled" in w for w in p.meta.warnings)
    assert any("no switch-in record" in w for w in p.meta.warnings)


LEAF_STOP = ["ptrace_stop", "get_signal", "__lll_lock_wait", "take", "main"]


def test_time_before_the_first_record_is_never_the_tracers_stop() -> None:
    # thread 2 is blocked from the capture's first record (900) to 2000 (leading, 1100 ns),
    # then stopped by the tracer for 300 ns and blocked in the mutex for 600 ns.  The stop is
    # exactly its 300 ns: the leading time is the mutex's, not the stop's.
    text = (sample(3, 900, LEAF_COND) + out(3, 901) + inn(2, 2_000)
            + sample(2, 2_100, LEAF_STOP, state="t") + out(2, 2_100) + inn(2, 2_400)
            + sample(2, 2_500, LEAF_MUTEX) + out(2, 2_500) + inn(2, 3_100) + inn(3, 3_200))
    stacks = by_stack(fold(text), 2)
    assert stacks[tuple(reversed(LEAF_STOP))] == 300
    assert stacks[tuple(reversed(LEAF_MUTEX))] == 600 + 1_100
    # a thread whose only sampled stack is a stop: its leading time stays unsampled
    text = (sample(3, 900, LEAF_COND) + out(3, 901) + inn(2, 2_000)
            + sample(2, 2_100, LEAF_STOP, state="t") + out(2, 2_100) + inn(2, 2_400)
            + inn(3, 3_200))
    assert by_stack(fold(text), 2) == {tuple(reversed(LEAF_STOP)): 300, (UNSAMPLED,): 1_100}


def test_blocked_time_per_class_over_time_sums_to_the_split() -> None:
    """``class_bins``: where in time each class's blocked time lay (the per-slice waits of
    ``wallflame check``), summing to the same per-class totals as the stacks."""
    ms = 1_000_000
    base = 10 * BIN_NS  # bins 10, 11, ...
    # thread 1: mutex for 30 ms from 10 ms into bin 10 (all in it), then a condvar wait
    # from 40 ms to 140 ms (10 ms in bin 10, 50 in bin 11, 40 in bin 12), every switch
    # sampled; thread 2: blocked from the first record until 60 ms (leading), then 20 ms
    # in a mutex wait standing for two switches (period 2) with an unsampled 20 ms one.
    text = (sample(1, base + 10 * ms - 5, LEAF_MUTEX) + out(1, base + 10 * ms)
            + inn(2, base + 60 * ms)
            + inn(1, base + 40 * ms - 1) + sample(1, base + 40 * ms - 1, LEAF_COND)
            + out(1, base + 40 * ms) + inn(1, base + 140 * ms)
            + sample(2, base + 149 * ms, LEAF_MUTEX, period=2) + out(2, base + 150 * ms)
            + inn(2, base + 170 * ms) + out(2, base + 200 * ms) + inn(2, base + 220 * ms))
    s = SampledSched(FoldOptions().get_rules())
    s.feed(io.BytesIO(text.encode()))
    p = Profile()
    s.finish(p)
    totals: dict[str, int] = {}
    for k, w in p.stacks.items():
        totals[k.wait] = totals.get(k.wait, 0) + w
    assert {c: sum(b.values()) for c, b in s.class_bins.items()} == pytest.approx(
        totals, abs=4)
    # mutex: thread 1's 30 ms (less 1 ns), thread 2's leading 50 ms (and 5 ns: the first
    # record is the sample 5 ns before thread 1's switch) and its 2 x 20 ms
    assert totals == {"mutex": 30 * ms - 1 + 50 * ms + 5 + 40 * ms, "condvar": 100 * ms}
    assert s.class_bins["condvar"] == {10: 10 * ms, 11: 50 * ms, 12: 40 * ms}
    mutex = s.class_bins["mutex"]
    # thread 1's 30 ms in bin 10; thread 2's leading 50 ms (from the first record, 10 ms
    # into bin 10, to 60 ms) over bins 10 and 11; its 40 ms of waits where its sample was
    # (150-170 ms: bin 13), the unsampled interval standing with it
    assert mutex[10] == pytest.approx(30 * ms + 40 * ms, abs=8)
    assert mutex[11] == pytest.approx(10 * ms, abs=4)
    assert mutex[13] == pytest.approx(40 * ms, abs=4)
    assert set(mutex) == {10, 11, 13}


def test_intervals_carry_across_chunks() -> None:
    p = fold(sample(1, 0, LEAF_MUTEX) + out(1, 10), inn(1, 5_010) + out(1, 6_000, True)
             + inn(1, 6_100))
    assert by_stack(p, 1) == {("main", "take", "__lll_lock_wait"): 5_000}
    assert p.meta.extra["runqueue_ns"] == {"1": 100}


def test_a_thread_name_cannot_forge_the_fields() -> None:
    evil = "a 100/9 1.0: P"  # 15 bytes that look like the start of a header
    text = (sample(1, 0, LEAF_MUTEX, comm=evil) + out(1, 10, comm=evil)
            + inn(1, 1_010, comm=evil))
    p = fold(text)
    assert by_stack(p, 1) == {("main", "take", "__lll_lock_wait"): 1_000}
    assert p.meta.threads[1] == evil
    assert not p.meta.losses


def test_lost_and_unparsed_records_are_counted() -> None:
    text = (f"w {PID}/1 {_t(5)}: PERF_RECORD_LOST lost 17\n" + "garbage line\n"
            + out(1, 10) + inn(1, 20))
    p = fold(text)
    assert p.meta.losses["lost perf events (PERF_RECORD_LOST)"].count == 17
    assert p.meta.losses["unparsed scheduler record"].count == 1


def test_budget_plan_fills_up_to_the_budget() -> None:
    rates = {1: 5.0, 2: 50.0, 3: 2_000.0, 4: 10_000.0}
    p = budget.plan(rates, 4.0, 499, 8192, cpus=2)
    per = 8192 + budget.STACK_OVERHEAD_BYTES
    fixed = (sum(rates.values()) * (budget.SWITCH_BYTES + budget.WAKE_BYTES)
             + 499 * 2 * budget.ONCPU_SAMPLE_BYTES)
    stacks = sum(min(r, p.stack_hz) for r in rates.values())
    assert stacks * per + fixed == pytest.approx(4e6, rel=1e-6)
    assert 50 < p.stack_hz < 2_000 and not p.over_budget
    assert p.expected_mb_per_s == pytest.approx(4.0, rel=1e-6)


def test_budget_plan_quiet_target_gets_every_switch_and_a_busy_one_is_flagged() -> None:
    quiet = budget.plan({1: 3.0, 2: 10.0}, 4.0, 499, 8192, cpus=2)
    assert quiet.stack_hz == budget.MAX_HZ and quiet.stacks_per_s == 13.0
    busy = budget.plan({i: 10_000.0 for i in range(10)}, 4.0, 499, 8192, cpus=2)
    assert busy.over_budget and busy.stack_hz == budget.MIN_HZ
    # the switch records alone exceed it: said, not hidden
    assert busy.expected_mb_per_s > 100_000 * budget.SWITCH_BYTES / 1e6 > 4.0


def test_an_attached_target_gets_a_budget_only_when_every_switch_costs_too_much() -> None:
    per_switch = (budget.SWITCH_BYTES + budget.WAKE_BYTES + 8192 + budget.STACK_OVERHEAD_BYTES)
    # a program switching 2,000 times a second (the queue sample's rate): every switch; the
    # 2 kHz heartbeat target (4,115 a second read before its window): sampled
    assert budget.automatic({1: 1_000.0, 2: 1_000.0}, 499, 8192, cpus=2) is None
    assert budget.automatic({1: 4_115.0}, 499, 8192, cpus=2) == budget.AUTO_MB_PER_S
    at = budget.AUTO_ABOVE_MB_PER_S * 1e6 / per_switch  # switches a second at the threshold
    assert budget.automatic({1: at * 0.99}, 0, 8192, cpus=2) is None
    assert budget.automatic({1: at * 1.01}, 0, 8192, cpus=2) == budget.AUTO_MB_PER_S
    # MariaDB under sysbench: about 39,000 switches a second over 46 threads
    server = {i: 39_000 / 46 for i in range(46)}
    assert budget.every_switch_mb_per_s(server, 499, 8192, cpus=2) == pytest.approx(
        (39_000 * per_switch + 499 * 2 * budget.ONCPU_SAMPLE_BYTES) / 1e6)
    assert budget.automatic(server, 499, 8192, cpus=2) == budget.AUTO_MB_PER_S
    assert not budget.plan(server, budget.AUTO_MB_PER_S, 499, 32768, cpus=2).over_budget


def test_switch_counts_of_this_process() -> None:
    import os

    counts = budget.switch_counts(os.getpid())
    assert os.getpid() in counts and counts[os.getpid()] > 0


def test_chunks_in_time_order_with_an_unrenamed_one_last(tmp_path: Path) -> None:
    for name in ("perf.data", "perf.data.2026112306400391", "perf.data.2026112306400252",
                 "sched.data.2026112306400252"):
        (tmp_path / name).write_bytes(b"x")
    assert [p.name for p in data_chunks(tmp_path, "perf")] == [
        "perf.data.2026112306400252", "perf.data.2026112306400391", "perf.data"]


def test_system_wide_on_cpu_is_filtered_to_the_target(tmp_path: Path) -> None:
    from wallflame.collect.perf import PerfOptions, record_command, script_command

    on = record_command(1234, tmp_path / "perf.data", PerfOptions(499, "fp", system_wide=True), 2)
    assert "-a" in on and "-p" not in on
    sched = record_command(1234, tmp_path / "sched.data",
                           PerfOptions(499, "dwarf", True, 10.0, system_wide=True), 2)
    assert sched[sched.index("-p") + 1] == "1234" and "-a" not in sched  # per thread
    assert "--pid=1234" in script_command(tmp_path / "perf.data.1", False, 1234)
    assert not any(a.startswith("--pid") for a in script_command(tmp_path / "s", True, 1234))


def test_perf_script_reads_the_kernel_symbols_saved_in_raw(tmp_path: Path) -> None:
    from wallflame.collect.perf import KALLSYMS, KALLSYMS_MIN, save_kallsyms, script_command

    src = tmp_path / "proc_kallsyms"
    raw = tmp_path / "raw"
    raw.mkdir()
    src.write_bytes(b"0000000000000000 T _text\n0000000000000000 T schedule\n")
    assert not save_kallsyms(raw, src)  # hidden addresses (kptr_restrict): no copy
    assert not (raw / KALLSYMS).exists() and not (raw / KALLSYMS_MIN).exists()
    chunk, wake = raw / "sched.data.1", raw / "wake.data.1"
    assert not any(a.startswith("--kallsyms") for a in script_command(chunk, True))
    text = (b"ffffffff81000000 T _stext\nffffffff81000000 T _text\n"
            b"ffffffff81001000 T schedule\nffffffffc0000000 t _text\t[fake_module]\n"
            b"ffffffff82209988 T _etext\n")
    src.write_bytes(text)
    assert save_kallsyms(raw, src)
    assert (raw / KALLSYMS).read_bytes() == text
    assert (raw / KALLSYMS_MIN).read_bytes() == (
        b"ffffffff81000000 T _stext\nffffffff81000000 T _text\nffffffff82209988 T _etext\n")
    assert f"--kallsyms={raw / KALLSYMS}" in script_command(chunk, True)
    assert f"--kallsyms={raw / KALLSYMS}" in script_command(raw / "perf.data.1", False, 7)
    assert f"--kallsyms={raw / KALLSYMS_MIN}" in script_command(wake, False)
    # The command written into meta.json names the copy whether or not it is there yet.
    assert "--kallsyms=raw/kallsyms" in script_command(Path("raw/sched.data.<chunk>"), True,
                                                        kallsyms=True)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ffffffff81000000", "0", ""]),
                          st.sampled_from(["T", "t", "D"]),
                          st.sampled_from(["_text", "_stext", "_etext", "__text", "x_text",
                                           "_text_", "schedule", ""]),
                          st.sampled_from(["", "\t[mod]", " ", "\t"])), max_size=8),
       st.booleans())
def test_the_kernel_bounds_are_the_lines_that_name_them(
        rows: list[tuple[str, str, str, str]], newline_at_end: bool) -> None:
    from wallflame.collect.perf import _KERNEL_BOUNDS, _bound_lines

    text = "\n".join(f"{a} {t} {n}{m}" for a, t, n, m in rows).encode()
    text += b"\n" if newline_at_end and rows else b""
    assert [line for _, line in _bound_lines(text)] == [
        line for line in text.splitlines()
        if line.rpartition(b" ")[2] in _KERNEL_BOUNDS and b"\t" not in line]


def test_the_wake_ups_kernel_symbols_name_the_wakers_functions_and_where_they_end() -> None:
    """The wake-up chunks' symbols: each function that names a waker (``WAKER_MARKS``) and
    the symbol after it, so that no other address is named after one of them."""
    from wallflame.collect.perf import _marker_lines

    text = (b"ffffffff81000000 T _text\nffffffff8142de20 t __pfx_hrtimer_wakeup\n"
            b"ffffffff8142de30 t hrtimer_wakeup\nffffffff8142de60 t hrtimer_reprogram\n"
            b"ffffffff8142f000 t unrelated\nffffffffc0000000 t hrtimer_wakeup\t[mod]\n"
            b"ffffffff82253950 T __do_softirq")
    assert [line for _, line in _marker_lines(text)] == [
        b"ffffffff8142de20 t __pfx_hrtimer_wakeup", b"ffffffff8142de30 t hrtimer_wakeup",
        b"ffffffff8142de60 t hrtimer_reprogram", b"ffffffff82253950 T __do_softirq"]


def test_a_run_over_its_budget_says_so() -> None:
    from wallflame.fold.perf.chunks import budget_warnings
    from wallflame.rundir import Capture

    data: dict[str, Any] = {"window": {"window_ns": 10_000_000_000},
           "postprocess": {"budget": {"budget_mb_per_s": 4.0, "over_budget": True,
                                      "switches_per_s": 90_000, "expected_mb_per_s": 6.2},
                           "cost": {"perf_data_mb": 60.0}}}
    said = budget_warnings(Capture.from_json(data))
    assert len(said) == 2 and "90,000" in said[0] and "6.0 MB/s" in said[1]
    data["postprocess"]["budget"]["over_budget"] = False
    data["postprocess"]["cost"]["perf_data_mb"] = 41.0
    assert budget_warnings(Capture.from_json(data)) == []


def test_unsampled_and_unswitched_threads_take_their_snapshot_stacks() -> None:
    from wallflame.fold.perf.chunks import from_snapshots
    from wallflame.profile import StackKey

    sched = fold(out(1, 0) + inn(1, 9_000) + inn(3, 9_500))  # no stack sampled at all
    pmp = Profile()
    pmp.add(StackKey(("main", "idle", "pthread_cond_wait"), 1, "w", PID, OFF, "condvar"), 3)
    pmp.add(StackKey(("main", "take", "__lll_lock_wait"), 1, "w", PID, OFF, "mutex"), 1)
    pmp.add(StackKey(("main", "poll"), 2, "w", PID, OFF, "poll"), 500)  # never switched
    merged = Profile()
    merged.merge(sched)
    from_snapshots(merged, pmp, sched)
    assert by_stack(merged, 1) == {("main", "idle", "pthread_cond_wait"): 6_750,
                                   ("main", "take", "__lll_lock_wait"): 2_250}
    assert by_stack(merged, 2) == {("main", "poll"): 500}
    assert by_stack(merged, 3) == {(UNSAMPLED,): 9_500}  # no snapshot of it: kept as it was


def wake(tid: int, ns: int, waker: int = 999, comm: str = "w") -> str:
    """A ``sched:sched_wakeup`` of ``tid`` as the wake-up capture prints it (``-F
    tid,time,event,trace``): the header names the waker, the fields the wakee."""
    return (f"{waker:>7} {_t(ns)}: sched:sched_wakeup: comm={comm} pid={tid} prio=120 "
            "target_cpu=001\n")


def test_wakeup_latency_is_runnable_time_with_the_stack_it_blocked_at() -> None:
    """Blocked from the switch-out to the wake-up, runnable from the wake-up to the
    switch-in; on-CPU from each switch-in to the next switch-out; all three add up to the
    window."""
    s = SampledSched(FoldOptions().get_rules())
    s.set_window(500, None, at_start=[1])
    # a forged comm cannot name another wakee
    s.feed_wakes(io.BytesIO((wake(1, 4_000, comm="x pid=2 prio=1 target_cpu=0")
                             + wake(1, 14_000) + wake(2, 15_000)).encode()))
    s.feed(io.BytesIO((sample(1, 1_000, LEAF_MUTEX) + out(1, 1_010) + inn(1, 5_010)
                       + sample(1, 6_000, LEAF_COND) + out(1, 6_005) + inn(1, 16_005)
                       + out(1, 17_000, preempt=True) + inn(1, 17_500)).encode()))
    s.window = (500, 20_000)
    p = Profile()
    s.finish(p)
    assert by_stack(p, 1) == {("main", "take", "__lll_lock_wait"): 2_990,
                              ("main", "idle", "pthread_cond_wait"): 7_995}
    runnable = {k.frames: w for k, w in p.stacks.items() if k.wait == RUNNABLE}
    # 1010 ns woken in take, 2005 in idle, 500 preempted (no sample: split like the rest)
    assert sum(runnable.values()) == 1_010 + 2_005 + 500
    exact = p.meta.extra["sched_threads"]["1"]
    assert exact["on_ns"] == (1_010 - 500) + (6_005 - 5_010) + (17_000 - 16_005) + (20_000 - 17_500)
    assert exact["on_ns"] + exact["runnable_ns"] + exact["blocked_ns"] == 20_000 - 500
    assert p.meta.extra["sched"]["woken_intervals"] == 2
    # binned for wallflame check's slices like the wait classes (exact: no scaling)
    assert sum(s.class_bins["runnable"].values()) == exact["runnable_ns"]
    assert not any("no wake-up capture" in w for w in p.meta.warnings)


def test_blocked_intervals_wait_for_wakeups_read_later() -> None:
    """The wake-up capture's chunk may be read after the switches': the same result."""
    switches = (sample(1, 1_000, LEAF_MUTEX) + out(1, 1_010) + inn(1, 5_010)).encode()
    wakes = wake(1, 4_000).encode()
    results = []
    for order in ((wakes, switches), (switches, wakes)):
        s = SampledSched(FoldOptions().get_rules())
        s.expect_wakes()
        for i, chunk in enumerate(order):
            (s.feed_wakes if chunk is wakes else s.feed)(io.BytesIO(chunk))
            del i
        p = Profile()
        s.finish(p)
        results.append(sorted(p.stacks.items()))
    assert results[0] == results[1]
    assert dict((k.wait, w) for k, w in results[0]) == {"mutex": 2_990, RUNNABLE: 1_010}


def test_window_clips_every_interval_and_new_threads_have_no_leading_span() -> None:
    """Records before the window open intervals at its start; past its end they are cut
    there; a thread created during the window is not blocked before it existed."""
    s = SampledSched(FoldOptions().get_rules())
    s.set_window(10_000, 20_000, at_start=[1])
    text = (sample(1, 5_000, LEAF_MUTEX) + out(1, 5_010) + inn(1, 12_000)
            + inn(2, 13_000) + sample(2, 14_000, LEAF_COND) + out(2, 14_000)
            + inn(2, 25_000) + out(1, 26_000))
    s.feed(io.BytesIO(text.encode()))
    p = Profile()
    s.finish(p)
    exact = p.meta.extra["sched_threads"]
    assert exact["1"] == {"on_ns": 8_000, "runnable_ns": 0, "blocked_ns": 2_000}
    # thread 2 began in the window: it lived 7 us of it, all accounted for
    assert exact["2"] == {"on_ns": 1_000, "runnable_ns": 0, "blocked_ns": 6_000, "alive_ns": 7_000}
    assert p.meta.extra["outside_window"]["sched_ns"] > 0
    assert any("no wake-up capture" in w for w in p.meta.warnings)


def _ping_pong(n: int, late: int) -> tuple[str, dict[str, Any]]:
    """Two threads taking turns ``n`` times: each runs 20 µs, then blocks 30 µs, then waits
    10 µs for a CPU after its wake-up; perf's ``IN`` comes ``late`` ns after the kernel's
    switch.  Returns the switches' text and the listings whose ``schedstat`` run times are the
    kernel's (every on-CPU interval ``late`` ns longer than the records say)."""
    lines = []
    wakes = []
    t = 1_000_000
    ran = {1: 0, 2: 0}
    for _ in range(n):
        for tid in (1, 2):
            lines.append(inn(tid, t + late))
            lines.append(out(tid, t + 20_000))
            ran[tid] += 20_000
            wakes.append(wake(tid, t + 50_000))
            t += 30_000
    end = t + 100_000
    listings = {"start": {"mono_ns": 0, "threads": [
                    {"tid": tid, "schedstat": [0, 0, 0], "schedstat_ns": 1_000_000}
                    for tid in (1, 2)]},
                "end": {"mono_ns": end, "threads": [
                    {"tid": tid, "schedstat": [ran[tid], 0, 0], "schedstat_ns": end}
                    for tid in (1, 2)]}}
    return "".join(lines) + "".join(wakes), listings


def _lagged(n: int, late: int) -> tuple[SampledSched, Profile, dict[str, Any]]:
    text, listings = _ping_pong(n, late)
    s = SampledSched(FoldOptions().get_rules())
    s.set_window(1_000_000, None, at_start=[1, 2])
    switches = "".join(line + "\n" for line in text.splitlines() if "SWITCH" in line)
    wakes = "".join(line + "\n" for line in text.splitlines() if "SWITCH" not in line)
    s.feed_wakes(io.BytesIO(wakes.encode()))
    s.feed(io.BytesIO(switches.encode()))
    s.window = (1_000_000, int(listings["end"]["mono_ns"]))
    p = Profile()
    s.finish(p, None, None, listings)
    return s, p, listings


def test_switch_ins_move_by_the_lag_the_kernel_shows() -> None:
    """perf's IN 2.5 µs late on every switch-in: the lag is measured from the kernel's run
    time, every on-CPU interval starts that much earlier and the runnable one before it ends
    that much earlier; the totals, the log (the timeline's spans) and the kernel agree."""
    n = 6_000  # 12,000 switch-ins: over LAG_MIN_SWITCH_INS
    s, p, listings = _lagged(n, 2_500)
    lag = p.meta.extra["sched"]["switch_in_lag"]
    assert lag["applied"] and lag["ns"] == 2_500 and lag["switch_ins"] == 2 * n
    exact = p.meta.extra["sched_threads"]
    for tid in (1, 2):
        kernel = listings["end"]["threads"][tid - 1]["schedstat"][0]
        # thread 1's first switch-in is the capture's first record: it ends no interval and
        # cannot move (thread 2's ends the span before its first record)
        assert exact[str(tid)]["on_ns"] == kernel - (2_500 if tid == 1 else 0)
        # 10 µs from a wake-up to the kernel's switch-in, n - 1 times, and the last wake-up
        # (50 µs after its last switch-in) to the window's end
        last_in = max(s.threads[tid].ins) - 2_500  # the kernel's
        trailing = s.window[1] - (last_in + 50_000)
        assert exact[str(tid)]["runnable_ns"] == (n - 1) * 10_000 + trailing
    lo, hi = s.window
    logged = sum(max(0, min(hi, st + d) - max(lo, st))
                 for st, d in zip(s.log.start, s.log.dur, strict=True))
    assert logged == sum(r["runnable_ns"] + r["blocked_ns"] for r in exact.values())
    for r in exact.values():
        # the capture's first record (thread 1's first, late, switch-in) is 2.5 µs into it
        assert r["on_ns"] + r["runnable_ns"] + r["blocked_ns"] == hi - lo - 2_500


def test_no_lag_is_applied_on_too_few_switch_ins_or_without_listings() -> None:
    _, p, _ = _lagged(1_000, 2_500)
    lag = p.meta.extra["sched"]["switch_in_lag"]
    assert not lag["applied"] and lag["switch_ins"] == 2_000
    # 12.5 µs from each wake-up to its late record, and 110 µs after the last wake-up
    assert p.meta.extra["sched_threads"]["1"]["runnable_ns"] == 999 * 12_500 + 110_000
    assert fold(inn(1, 1_000) + out(1, 2_000)).meta.extra["sched"]["switch_in_lag"] is None


def test_a_negative_lag_shortens_the_on_cpu_intervals() -> None:
    """The records say more run time than the kernel (a late OUT): each switch-in moves
    later."""
    n = 6_000
    text, listings = _ping_pong(n, 0)
    for row in listings["end"]["threads"]:
        row["schedstat"][0] -= n * 1_000
    s = SampledSched(FoldOptions().get_rules())
    s.feed(io.BytesIO("".join(line + "\n" for line in text.splitlines()
                              if "SWITCH" in line).encode()))
    p = Profile()
    s.finish(p, None, (1_000_000, int(listings["end"]["mono_ns"])), listings)
    assert p.meta.extra["sched"]["switch_in_lag"]["ns"] == -1_000
    # (thread 1's first switch-in, the capture's first record, stays)
    assert p.meta.extra["sched_threads"]["1"]["on_ns"] == n * 19_000 + 1_000
    assert p.meta.extra["sched_threads"]["2"]["on_ns"] == n * 19_000


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=50), st.integers(0, 600_000))
def test_level_fills_the_caps_to_the_total(caps: list[int], total: int) -> None:
    x = _level(caps, total)
    filled = sum(min(x, c) for c in caps)
    if total >= sum(caps):
        assert x == max(caps)
    else:
        # rounded down: at most one ns short per cap still above the level
        assert total - len(caps) < filled <= total


def _one_by_one(pairs: list[int], window: tuple[int, int] | None) -> int:
    lo, hi = window if window is not None else (-(1 << 62), 1 << 62)
    return sum(max(0, min(hi, pairs[i + 1]) - max(lo, pairs[i]))
               for i in range(0, len(pairs), 2))


_WINDOW = st.one_of(st.none(), st.tuples(st.integers(-50, 1_050), st.integers(-50, 1_050)))


@given(st.lists(st.integers(0, 60), max_size=40), st.integers(0, 1_000), _WINDOW)
def test_clipped_sum_of_pairs_in_order(gaps: list[int], first: int,
                                       window: tuple[int, int] | None) -> None:
    """A thread's on-CPU pairs, one after the other (zero-length ones and pairs touching
    included): summed by slices, as one by one."""
    from wallflame.fold.perf.sched_passes import clipped_sum as _clipped_sum

    times = list(itertools.accumulate(gaps[: len(gaps) // 2 * 2], initial=first))[1:]
    pairs = array("q", times)
    assert _clipped_sum(pairs, window) == _one_by_one(times, window)


@given(st.lists(st.integers(0, 1_000), max_size=40).map(lambda v: v[: len(v) // 2 * 2]),
       _WINDOW)
def test_clipped_sum_of_pairs_in_any_order(values: list[int],
                                           window: tuple[int, int] | None) -> None:
    from wallflame.fold.perf.sched_passes import clipped_sum as _clipped_sum

    assert _clipped_sum(array("q", values), window) == _one_by_one(values, window)


_ROW = st.tuples(st.integers(0, 20), st.integers(1, 5), st.integers(0, 9), st.integers(0, 2),
                 st.integers(-1, 3), st.integers(0, 4))


@given(st.lists(_ROW, max_size=30), st.lists(_ROW, max_size=30))
def test_merge_log_keeps_start_order_and_ties_in_place(
        rows: list[tuple[int, ...]], extra: list[tuple[int, ...]]) -> None:
    """The log's rows and the extra ones, stably sorted by start: rows that start together
    keep the log's order, then the extra rows' order."""
    from unit.fold.reference_switches import merge_log as _merge_log
    from wallflame.timeline import IntervalLog

    log = IntervalLog()
    for r in rows:
        for name, v in zip(("start", "tid", "dur", "kind", "sample", "period"), r, strict=True):
            getattr(log, name).append(v)
    _merge_log(log, list(extra))  # type: ignore[arg-type]
    got = list(zip(log.start, log.tid, log.dur, log.kind, log.sample, log.period, strict=True))
    assert got == sorted([*rows, *extra], key=lambda r: r[0])
