"""Threads that exit during the window: each one's time ends at its exit.

A thread's last record is ``PERF_RECORD_EXIT``; its final switch-out comes after it, or not
at all (MariaDB's connection threads under sysbench: a thread switched in, exited, and no
switch-out followed, so it counted as on-CPU to the window's end, 4.26 s of a 20 s window
each, and a run's on-CPU summed to 34.0 s where the kernel counted 21.3 s).  Ground truth:
the kernel's CPU time of the whole process, exited threads included (``/proc/PID/stat``
utime + stime over the window, which each run records as ``machine.target_cpus``).

The target: a Python program that starts a thread every 20 ms which spins for 5-15 ms and
exits, beside a main thread that sleeps; attached on every CPU for 3 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from livehelp import collect

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


CHURN = """
import random, threading, time
def spin(ms):
    end = time.monotonic() + ms / 1000
    while time.monotonic() < end:
        pass
end = time.monotonic() + 30
while time.monotonic() < end:
    threading.Thread(target=spin, args=(random.uniform(5, 15),)).start()
    time.sleep(0.02)
"""


def test_threads_that_exit_count_until_their_exit(tmp_path: Path, live: None) -> None:
    target = subprocess.Popen([sys.executable, "-c", CHURN])
    run = tmp_path / "run"
    try:
        time.sleep(0.5)
        r = collect("--pid", str(target.pid), "--duration", "3", "--off-cpu", "sched", "-o",
                    str(run))
        assert r.returncode == 0, r.stderr
    finally:
        target.kill()
        target.wait()
    summary = json.loads((run / "summary.json").read_text())
    machine = json.loads((run / "meta.json").read_text())["machine"]
    on = sum(t.get("on_cpu_s", 0.0) for t in summary["threads"] if t["tid"])
    kernel = machine["target_cpus"] * machine["seconds"]
    threads = len([t for t in summary["threads"] if t["tid"]])
    print(f"\n{threads} threads; on-CPU {on:.3f} s, the kernel's {kernel:.3f} s")
    # About 120 threads, each seen from its start to its exit.  Measured, 22 runs (12 and
    # then 10 in a row, 2026-11-26/27): the difference -0.021 to +0.004 s in 21, +0.095 s in
    # one (1.225 s against 1.130 s), on about 1.2 s of CPU; before exits were read, 181-185 s
    # against 1.21-1.25 s (each exited thread on-CPU to the window's end).  The margin,
    # 10% + 0.05 s, lies outside the spread and a thousand times inside the error it guards
    # against.  Coverage: 1.0000 for every thread in the last 10 runs.  Beside two spinning
    # processes (3 runs): within 0.01 s of the kernel's 0.66-0.75 s.
    assert threads > 30  # 117-120 on a quiet machine, 97-106 beside two spinning processes
    assert abs(on - kernel) <= 0.10 * kernel + 0.05, (on, kernel)
    # and each thread's time adds up to the part of the window it lived (its first switch-in
    # to its exit): coverage as the report checks it, 90-110%
    cov = sorted(t["coverage"] for t in summary["threads"] if t["tid"] > 0)
    print(f"coverage {cov[0]:.4f} to {cov[-1]:.4f}")
    assert cov[0] >= 0.9 and cov[-1] <= 1.1
