"""The collect's own stops, live: the time the scheduler saw each thread stopped in
``ptrace_stop`` (from the switch into the stop to the wake-up that ended it) agrees with the
tracer's own timing of every stop it made of that thread, stop by stop summed: at least the
time from the first of its frames read to the last (it stands stopped throughout), at most the
time from the attach request to the release.  What follows the release, waiting for a CPU, is
shown apart.

Measured (2026-11-25, 2 vCPUs; 5 threads each, 6-34 stops per thread; the test prints its
figures as ``SPREAD``), 5 runs of each target on a quiet machine and 3 beside two CPU-bound
processes: the scheduler's figure at most 8 us per stop below the lower bound (the two clocks'
granularity) and never above the upper bound (at least 69 us per stop under it).  The slack
allowed, ``SLACK_US`` per stop, is outside that spread.  (With the time to the release as the
lower bound, as first written, a loaded run fell 727 us per stop short of it: the tracer reads
its clock once it holds Python's interpreter lock again, which another thread of the collect
can keep for milliseconds.)

Twice in full runs of the suite the ``busy`` target fell 341 and 536 us a stop below the
lower bound. In the run that was kept, the collect's first snapshot came 396 ms before the
window opened and took 3 ms to read the ticker: the tracer counted that stop, the scheduler
(cut at the window's edges) did not. The tracer's timing is now cut at the same edges
(``fold.snapshots.windowed_stops``); that run, finished again, is 37 us a stop inside the bound.

The upper bound is held only when the hypervisor took at most
``collect.machine.STEAL_NOTE_ABOVE`` of the CPUs over the window (the collect warns above it):
in a full run of the suite it took 34% of them, and ``busy``'s ``mix-2`` stood 1,238 us a stop
above the bound (4 stops; the lower bound held, 2,113 us inside).  Which of the two figures
the taken time moved was not pinned down.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from livehelp import SLACK_US, stops_against_bounds

from wallflame.collect.machine import steal_note

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


TARGETS = {
    # threads mostly asleep: stopped while blocked, released onto an idle CPU
    "asleep": ["critsec", "--duration", "4", "--threads", "4", "--spin-us", "0",
               "--sleep-us", "2000", "--outside-us", "0", "--outside-sleep-us", "3000"],
    # four threads that want a CPU on two: released threads wait for one
    "busy": ["mix", "--duration", "4"],
}


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_the_stopped_time_lies_within_the_tracers_own_timing(
        target: str, tmp_path: Path, live: None, sample_bin: Path) -> None:
    argv = TARGETS[target]
    out = tmp_path / target
    r = subprocess.run([sys.executable, "-m", "wallflame", "collect", "-o", str(out),
                        "--duration", "4", "--", str(sample_bin / argv[0]), *argv[1:]],
                       capture_output=True, text=True, timeout=180, check=False)
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "summary.json").read_text())
    rows = stops_against_bounds(summary)
    machine = json.loads((out / "meta.json").read_text())["machine"]
    stolen = steal_note(machine) is not None
    print("SPREAD", target, machine.get("steal_cpus"), json.dumps(rows))
    assert rows, "no stop of the tracer's was timed"
    assert sum(n for *_, n in rows) >= 10, rows
    for name, below, above, _n in rows:
        assert below <= SLACK_US, f"{name}: {below:.0f} us per stop below the tracer's lower bound"
        assert above <= SLACK_US or stolen, (
            f"{name}: {above:.0f} us per stop above the tracer's upper bound")
    # the stops are the tracer's, not the target's: no stack of the target's holds them
    folded = (out / "offcpu.folded").read_text(errors="replace")
    assert "ptrace_stop" not in folded
