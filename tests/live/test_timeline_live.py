"""The time axis, live, against the program's own clock: ``samples/stall`` holds its mutex for
300 ms once and prints when (CLOCK_MONOTONIC); its workers print their longest lock wait.

The timeline must put each worker's wait at that moment, the per-thread totals must be those
of ``summary.json``, and ``report --from --to`` around the stall must show the holder's stack
(the spin inside the critical section) as the heaviest on-CPU stack, the workers' lock wait
as the heaviest off-CPU one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from live.test_samples_e2e_live import collect, read_target_stdout
from wallflame import timeline
from wallflame.timeline import KINDS, RUNNABLE, STOPPED, UNSAMPLED

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


def _events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in read_target_stdout(run_dir).splitlines()
            if line.startswith('{"event"')]


def test_the_stall_is_where_the_program_says(tmp_path: Path, live: None,
                                              sample_bin: Path) -> None:
    argv = [str(sample_bin / "stall"), "--stall-at", "2.5", "--duration", "8"]
    run = collect(tmp_path, "stall", argv,
                  duration=4.0, own_duration=False)
    events = _events(run.dir)
    stall = next(e for e in events if e["event"] == "stall")
    tl = timeline.load(run.dir)
    assert tl.clock == "CLOCK_MONOTONIC"
    assert tl.t0 < stall["start_ns"] < stall["end_ns"] < tl.t1
    waits = [e for e in events if e["event"] == "longest_wait"]
    assert len(waits) == 2
    for w in waits:
        th = tl.threads[w["tid"]]
        # The wait as spans: mutex, cut where a snapshot stopped the thread (stopped, then
        # runnable until it got a CPU back to wait again).
        spans = [(s, s + d, KINDS[k]) for s, d, k in zip(th.p_start, th.p_dur, th.p_kind,
                                                         strict=True)
                 if s < w["end_ns"] and s + d > w["start_ns"]
                 and KINDS[k] in ("mutex", "stopped", "runnable")]
        mutex = [sp for sp in spans if sp[2] == "mutex"]
        assert mutex, (w, spans)
        # Measured over 9 runs (4 s windows, this 2-core machine shared with other jobs):
        # the first mutex span starts 6-17 us after the program's clock_gettime before the
        # lock call, the last span ends 2-6 us before the program's clock_gettime after it
        # (once 111 ms of it runnable: the machine's other jobs had the CPUs), and the spans
        # cover all but 10-65 us of the wait.  The bound is the time axis's
        # promise (50 ms).
        assert abs(mutex[0][0] - w["start_ns"]) < 50_000_000, (mutex[0], w)
        # (woken when the lock was released, a worker may wait for a CPU: runnable)
        assert abs(spans[-1][1] - w["end_ns"]) < 50_000_000, (spans[-1], w)
        covered = sum(min(b, w["end_ns"]) - max(a, w["start_ns"]) for a, b, _ in spans)
        assert covered > w["end_ns"] - w["start_ns"] - 50_000_000, (covered, w, spans)

    # Each thread's states inside the window add up to what summary.json says, and cover
    # the window: perf's records before it opened and after it closed are not counted.
    rows = {r["tid"]: r for r in run.summary["threads"]}
    for th in tl.sorted_threads():
        row = rows[th.tid]
        on = sum(w for t, w in zip(th.s_time, th.s_weight, strict=True) if tl.t0 <= t < tl.t1)

        def clipped(kinds: range, th: timeline.ThreadLine = th) -> float:
            return sum(max(0, min(tl.t1, s + d) - max(tl.t0, s)) for s, d, k in zip(
                th.p_start, th.p_dur, th.p_kind, strict=True) if k in kinds) / 1e9

        if on:  # (on-CPU time with no sample at all is not in the timeline)
            assert on / 1e9 == pytest.approx(row["on_cpu_s"], abs=1e-6), row
        assert clipped(range(UNSAMPLED + 1)) == pytest.approx(row["off_cpu_s"], rel=0.01,
                                                              abs=0.002), row
        assert clipped(range(RUNNABLE, RUNNABLE + 1)) == pytest.approx(
            row["runqueue_s"], rel=0.01, abs=1e-6), row
        assert clipped(range(STOPPED, STOPPED + 1)) == pytest.approx(
            row["stopped_s"], rel=0.01, abs=0.002), row
        # Measured over 9 runs: coverage 99.95-100.22% for every thread.
        assert 0.98 <= row["coverage"] <= 1.02, row

    # A range around the stall: the holder's spin on top of the on-CPU stacks, the lock wait
    # on top of the off-CPU ones but the idle main thread's.
    a = (stall["start_ns"] - tl.t0) / 1e9 - 0.05
    b = (stall["end_ns"] - tl.t0) / 1e9 + 0.05
    out = tmp_path / "range.folded"
    r = subprocess.run([sys.executable, "-m", "wallflame", "report", str(run.dir), "--from",
                        f"{a:.3f}", "--to", f"{b:.3f}", "--format", "folded", "-o", str(out)],
                       capture_output=True, text=True, check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [ln.rsplit(" ", 1) for ln in out.read_text().splitlines() if ln]
    on = sorted(((int(w), s) for s, w in lines if "[off " not in s), reverse=True)
    # (the main thread idles in sigtimedwait, [off poll], through the whole range; the
    # time waiting for a CPU is not a wait on anything)
    off = sorted(((int(w), s) for s, w in lines if "[off " in s and "[off poll]" not in s
                  and "[off runnable" not in s), reverse=True)
    assert "hold_during_stall" in on[0][1], on[:3]
    assert "[off mutex" in off[0][1] and "worker_loop" in off[0][1], off[:3]
    # (snapshots that stopped the worker, and the run queue after them, take their share)
    assert off[0][0] >= 100_000_000, off[:3]

    # The Perfetto export of the same run: inside the window, the summary's totals.
    pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from unit.report.test_perfetto import Decoded, check_totals

    trace = tmp_path / "run.pftrace"
    r = subprocess.run([sys.executable, "-m", "wallflame", "report", str(run.dir), "-o",
                        str(trace)], capture_output=True, text=True, check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    d = Decoded(trace.read_bytes())
    check_totals(d, run.summary)
    assert all(tl.t0 <= s["start"] < s["end"] <= tl.t1 for v in d.slices.values() for s in v)
    assert all(tl.t0 <= t < tl.t1 for v in d.samples.values() for t, _, _ in v)
    for w in waits:  # the stall is in the trace where the program says
        stalled = [s for s in d.slices[w["tid"]] if s["name"].startswith("mutex")
                   and abs(s["start"] - w["start_ns"]) < 50_000_000]
        assert stalled, w
