#!/usr/bin/env python3
"""redis-server's main thread: its on-CPU share as ``wallflame collect`` (defaults) measures it
against the kernel's own accounting (``/proc/PID/task/TID/schedstat`` run time, read every
20 ms and interpolated at the window's ends from ``meta.json``).

    .venv/bin/python benchmarks/lab/redis_oncpu.py [RUNS] [KEEP_DIR]

Needs ``redis-server redis-tools`` (``benchmarks/servers.py`` says so).  Prints one line per
run: wallflame's share, the kernel's, the difference in points, then the runnable shares.
Not a test yet: since on-CPU is taken from the switches and clipped to the window it is within
3 points of the kernel's (-1.9 to +3.0 in four 10 s runs), but the runnable share is 3.4-8.1
points over the kernel's run-queue delay on this server (benchmarks/lab/RECORD.md), outside the
margin a live test would need.  ``benchmarks/lab/runnable_truth.py`` measures why: schedstat's
run-queue delay misses part of each wake-up's latency, and perf's switch-in records come about
2.3 µs after the scheduler's own instant.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.servers import Redis  # noqa: E402

WALLFLAME = [sys.executable, "-m", "wallflame"]


class RunTime:
    """The thread's run time (ns, from schedstat) every 20 ms, with wall-clock times."""

    def __init__(self, pid: int, tid: int) -> None:
        self.path = f"/proc/{pid}/task/{tid}/schedstat"
        self.points: list[tuple[int, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            with open(self.path) as f:
                run = int(f.read().split()[0])
            self.points.append((time.time_ns(), run))
            self.stop.wait(0.02)

    def at(self, t: int) -> float:
        """Run time at wall-clock ``t``, interpolated between the two samples around it."""
        pts = self.points
        for (t0, r0), (t1, r1) in itertools.pairwise(pts):
            if t0 <= t <= t1:
                return r0 + (r1 - r0) * (t - t0) / max(t1 - t0, 1)
        raise AssertionError(f"{t} outside the sampled span {pts[0][0]}..{pts[-1][0]}")


def measure(seconds: float = 10.0, keep: Path | None = None) -> tuple[float, float]:
    """(wallflame's on-CPU share, the kernel's) of redis-server's main thread, in percent;
    ``LAST`` also gets the runnable shares, wallflame's and the kernel's run-queue delay from
    the collect's own ``/proc`` listings at the window's ends."""
    with Redis() as r:
        pid = r.pid
        load = r.benchmark_start(clients=50, requests=100_000, seconds=seconds + 30)
        try:
            time.sleep(1.0)
            rt = RunTime(r.pid, r.pid)
            rt.thread.start()
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "run"
                res = subprocess.run([*WALLFLAME, "collect", "--pid", str(r.pid), "--duration",
                                      str(seconds), "-o", str(out)], capture_output=True,
                                     text=True, timeout=120, check=False, cwd=str(ROOT))
                time.sleep(0.1)
                rt.stop.set()
                rt.thread.join()
                assert res.returncode == 0, res.stderr
                meta = json.loads((out / "meta.json").read_text())
                summary = json.loads((out / "summary.json").read_text())
                cap = json.loads((out / "raw" / "capture.json").read_text())
                if keep is not None:
                    shutil.copytree(out, keep / f"run-{time.time_ns()}")
        finally:
            load.stop()
            load.proc.wait(30)
    w = meta["window"]
    window = w["end_ns"] - w["start_ns"]
    kernel = (rt.at(w["end_ns"]) - rt.at(w["start_ns"])) / window
    row = next(t for t in summary["threads"] if t["tid"] == pid)
    ours = float(row["on_cpu_s"]) * 1e9 / window
    ends = [next((x for x in (cap.get("threads") or {}).get(when, {}).get("threads", [])
                  if x["tid"] == pid), None) for when in ("start", "end")]
    if all(e and e.get("schedstat") for e in ends):
        mono = w["mono_end_ns"] - w["mono_start_ns"]
        LAST.update(runnable=100 * float(row.get("runnable_s", 0)) * 1e9 / window,
                    kernel_runnable=100 * (ends[1]["schedstat"][1] - ends[0]["schedstat"][1])
                    / mono)
    return 100 * ours, 100 * kernel


#: The runnable shares of the last ``measure`` (when the run has the ``/proc`` listings).
LAST: dict[str, float] = {}


if __name__ == "__main__":
    for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 10):
        o, k = measure(keep=Path(sys.argv[2]) if len(sys.argv) > 2 else None)
        rq = (f"  runnable {LAST['runnable']:.2f}% kernel {LAST['kernel_runnable']:.2f}%"
              if LAST else "")
        print(f"wallflame {o:.2f}%  kernel {k:.2f}%  difference {o - k:+.2f} points{rq}",
              flush=True)
