"""Accuracy: samples/bin/mix measures its own time per phase (clock_gettime around each); the
default ``wallflame collect -- mix`` must agree per thread and per class within 5 percentage
points, cover at least 90% of each thread's window, and name the mutex and its holder.

The scheduler measures one more thing mix cannot tell apart: time a thread was runnable but
waiting for a CPU (``runnable_s``; on a busy 2-core machine it is large).  mix counts it
inside whichever phase it fell in: preempted in the spin phase, or woken from a wait and not
yet running, still inside that wait's call.  So it is compared here by the class of the stack
the thread waited for a CPU at (``runnable_after``: ``other`` for a preempted running stack,
counted as on-CPU), and counted in the coverage.

mix's condvar phase (``wait_for_tick``) also takes ``tick_lock``, before waiting and, inside
``pthread_cond_wait``, again after being woken; wallflame rightly reports those as mutex
waits (on ``tick_lock``, at 2-5% of a busy machine's time), so for the comparison with mix's
phases the mutex waits under ``wait_for_tick`` are counted in the condvar phase.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from livehelp import collect, load, start_mix, stop_mix

from wallflame.fold import FoldOptions, fold_file
from wallflame.report.phases import thread_phases

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


CLASSES = (("on_ns", None), ("mutex_ns", "mutex"), ("sleep_ns", "sleep"),
           ("condvar_ns", "condvar"))
MARGIN_PP = 5.0


def test_mix_time_split_matches_its_own_measurement(live: None, sample_bin: Path,
                                                    tmp_path: Path) -> None:
    run = tmp_path / "run"
    r = collect("-o", str(run), "--", str(sample_bin / "mix"), "--duration", "8", timeout=180)
    assert r.returncode == 0, r.stderr
    truth = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert len(truth) == 3
    summary = load(run, "summary.json")
    window = summary["window_s"]
    offcpu = fold_file(str(run / "offcpu.folded"), FoldOptions(), "wallflame")
    phases = thread_phases(summary, offcpu, "wait_for_tick")
    report = []
    alive = {t["tid"]: t.get("alive_s", window) for t in summary["threads"]}
    for mine in truth:
        phase = phases[mine["tid"]]
        coverage = phase.total / window
        report.append(f"{mine['name']}: coverage {coverage:.3f}")
        assert coverage >= 0.90, report
        # The command is held until every recorder is ready (collect.launch): each thread's
        # whole life, as its own clock measured it, is inside the window (started at once,
        # mix ran 0.6-7 s before the window opened).
        report.append(f"  alive in the window {alive[mine['tid']]:.3f} s, "
                      f"its own wall {mine['wall_ns'] / 1e9:.3f} s")
        assert alive[mine["tid"]] >= mine["wall_ns"] / 1e9 - 0.01, report
        report.append(f"  mutex waits under wait_for_tick: {phase.moved:.3f} s")
        for field, cls in CLASSES:
            expected = 100 * mine[field] / mine["wall_ns"]
            got = phase.share(cls or "on")
            report.append(f"  {field}: mix {expected:.1f}% wallflame {got:.1f}%")
            assert abs(got - expected) <= MARGIN_PP, "\n".join(report)
    locks = [lk for lk in summary["locks"] if lk["lock"].endswith("<shared_lock>")]
    assert locks, summary["locks"]
    lock = locks[0]
    workers = {m["tid"] for m in truth}
    assert {w["tid"] for w in lock["waiters"]} <= workers
    assert lock["holders"], "no holder attributed"
    assert {h["tid"] for h in lock["holders"]} <= workers
    assert lock["held_confirmed_s"] > 0


#: The sampled split against mix's own clock, its sampling aliased (below).  Measured over 20
#: runs on the 2-vCPU machine (2026-11-27, ``mix --sleep-ms 300`` attached for 10 s with
#: ``--max-data-mb-per-s 0.3``, one switch in 36-40 per CPU with a stack; ``python3
#: benchmarks/lab/sched_split.py 10 --attach --mix "--sleep-ms 300" -- --max-data-mb-per-s 0.3``):
#: the worst thread's worst class 0.1-2.8 points off mix's own figure (median 1.5).  Before
#: the split used the duration strata it was 36-48 points off in 7 runs of 8 of one sitting (a
#: worker's 300 ms sleeps given to its sampled 2 ms condition-variable waits), and this test
#: failed 2 runs of 8 of another: how often the sampling locks onto one phase varies.  The
#: margin is about twice the largest seen.
SAMPLED_MARGIN_PP = 6.0


def test_sampled_stacks_split_a_periodic_program_as_its_own_clock(live: None, sample_bin: Path,
                                                                 tmp_path: Path) -> None:
    """With a data budget only one switch in about 37 per CPU carries a stack, and mix's
    workers switch in a fixed cycle (a 300 ms sleep, then a wait for the 10 ms tick), so the
    sampled switches of a worker can all fall on its short waits.  Each worker's exact blocked
    time must still be split over its classes as mix measures them."""
    run = tmp_path / "run"
    mix = start_mix(sample_bin, "--sleep-ms", "300", "--duration", "14")
    try:
        r = collect("--pid", str(mix.pid), "--duration", "10", "--max-data-mb-per-s", "0.3",
                    "-o", str(run), timeout=180)
    finally:
        out = stop_mix(mix)
    assert r.returncode == 0, r.stderr
    truth = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
    assert len(truth) == 3, out
    meta = load(run, "meta.json")
    period = meta["options"].get("sched_stack_period")
    assert period and period > 1, meta["options"]  # the stacks were sampled
    summary = load(run, "summary.json")
    offcpu = fold_file(str(run / "offcpu.folded"), FoldOptions(), "wallflame")
    phases = thread_phases(summary, offcpu, "wait_for_tick")
    report = [f"one switch in {period} per CPU with a stack"]
    worst = 0.0
    for mine in truth:
        phase = phases[mine["tid"]]
        for field, cls in CLASSES:
            # mix's whole life against the 10 s window inside it: both are shares of a steady
            # cycle of about 320 ms
            expected = 100 * mine[field] / mine["wall_ns"]
            got = phase.share(cls or "on")
            report.append(f"{mine['name']} {field}: mix {expected:.1f}% wallflame {got:.1f}%")
            worst = max(worst, abs(got - expected))
    assert worst <= SAMPLED_MARGIN_PP, "\n".join(report)
