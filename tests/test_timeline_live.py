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
from test_samples_e2e import collect, read_target_stdout

from wallflame import timeline
from wallflame.timeline import KINDS, RUNNABLE, STOPPED, UNSAMPLED

pytestmark = pytest.mark.live


def _events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in read_target_stdout(run_dir).splitlines()
            if line.startswith('{"event"')]


def _longest_block(th: timeline.ThreadLine) -> int:
    return max(range(len(th.p_dur)), key=lambda i: th.p_dur[i] if th.p_kind[i] < RUNNABLE
               else -1)


def test_the_stall_is_where_the_program_says(tmp_path: Path, live: None,
                                              sample_bin: Path) -> None:
    run = collect(tmp_path, "stall", [str(sample_bin / "stall"), "--stall-at", "2.5"],
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
        i = _longest_block(th)
        # Measured over 10 runs (4 s windows, this 2-core machine shared with other jobs):
        # the span starts 3-15 us after the program's clock_gettime before the lock call and
        # lasts within 0.03 ms of the wait the program measured.  The bound is the time
        # axis's promise (50 ms).
        assert KINDS[th.p_kind[i]] == "mutex"
        assert abs(th.p_start[i] - w["start_ns"]) < 50_000_000, (th.p_start[i], w)
        assert abs(th.p_dur[i] - (w["end_ns"] - w["start_ns"])) < 50_000_000, (th.p_dur[i], w)

    # Each thread's states add up to what summary.json says.
    rows = {r["tid"]: r for r in run.summary["threads"]}
    for th in tl.sorted_threads():
        row = rows[th.tid]
        on = sum(th.s_weight) / 1e9
        blocked = sum(d for d, k in zip(th.p_dur, th.p_kind, strict=True) if k <= UNSAMPLED)
        runnable = sum(d for d, k in zip(th.p_dur, th.p_kind, strict=True) if k == RUNNABLE)
        stopped = sum(d for d, k in zip(th.p_dur, th.p_kind, strict=True) if k == STOPPED)
        assert on == pytest.approx(row["on_cpu_s"], abs=1e-6), row
        assert blocked / 1e9 == pytest.approx(row["off_cpu_s"], rel=0.01, abs=0.002), row
        assert runnable / 1e9 == pytest.approx(row["runqueue_s"], rel=0.01, abs=1e-6), row
        assert stopped / 1e9 == pytest.approx(row["stopped_s"], rel=0.01, abs=0.002), row

    # A range around the stall: the holder's spin on top of the on-CPU stacks, the lock wait
    # on top of the off-CPU ones.
    a = (stall["start_ns"] - tl.t0) / 1e9 - 0.05
    b = (stall["end_ns"] - tl.t0) / 1e9 + 0.05
    out = tmp_path / "range.folded"
    r = subprocess.run([sys.executable, "-m", "wallflame", "report", str(run.dir), "--from",
                        f"{a:.3f}", "--to", f"{b:.3f}", "--format", "folded", "-o", str(out)],
                       capture_output=True, text=True, check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [ln.rsplit(" ", 1) for ln in out.read_text().splitlines() if ln]
    on = sorted(((int(w), s) for s, w in lines if "[off " not in s), reverse=True)
    off = sorted(((int(w), s) for s, w in lines if "[off " in s), reverse=True)
    assert "hold_during_stall" in on[0][1], on[:3]
    assert "[off mutex" in off[0][1] and "worker_loop" in off[0][1], off[:3]
    assert off[0][0] >= 250_000_000, off[:3]
