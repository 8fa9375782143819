#!/usr/bin/env python3
"""A busy server's own throughput levels with no profiler, against the machine's speed.

MariaDB (``benchmarks/servers.py``, 8 tables of 100,000 rows, as ``server_collect.py``) under
``sysbench TEST`` with 32 clients for ``--seconds``, and nothing else: no collect.  Each
second it keeps sysbench's transactions, the server's CPU time (``utime + stime`` of its
``/proc/PID/stat``) and the machine's speed: a fixed piece of work (``PROBE_ITERS`` steps of
an integer loop, about 3 ms) timed four times a second in this thread's own CPU time.  A host
that takes cycles from this machine, or a CPU running slower, makes the work take longer; the
server's threads preempting the probe do not (waiting for a CPU is not the thread's CPU time).

It prints each 10 s (transactions against the run's median, the probe's median, the server's
CPUs), the probe in the seconds under 85% of the median against those at 95% or more, and the
loss figure of ``server_collect.py`` computed on windows where nothing ran: the run cut into
windows of ``--window`` seconds, each odd one set against the mean of the two either side of it,
as a collect's window is.  That is the figure's spread when nothing is collected.

    .venv/bin/python benchmarks/lab/server_levels.py [--test oltp_read_write] [--seconds 600] \
        [--window 60]

Needs ``mariadb-server`` and ``sysbench``.  Holds ``/tmp/wallflame-measure.lock`` while the
server runs.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.server_collect import LOCK, mean_tps  # noqa: E402
from benchmarks.servers import (  # noqa: E402
    THROUGHPUT_TABLE_SIZE,
    THROUGHPUT_TABLES,
    MariaDB,
    Missing,
    first_line,
    require,
)

#: The probe's work: about 3 ms of one CPU on this machine's Python, four times a second.
PROBE_ITERS = 40_000
PROBE_EVERY_S = 0.25


def probe_ms() -> float:
    """The probe's work, in this thread's CPU milliseconds."""
    t0 = time.thread_time()
    x = 1
    for _ in range(PROBE_ITERS):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
    return (time.thread_time() - t0) * 1000


class Sampler(threading.Thread):
    """The probe and the server's CPU time, in ``time.monotonic()`` seconds."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.stop = threading.Event()
        self.probes: list[tuple[float, float]] = []
        self.cpu: list[tuple[float, float]] = []
        self.tick = os.sysconf("SC_CLK_TCK")

    def run(self) -> None:
        last = 0.0
        while not self.stop.wait(PROBE_EVERY_S):
            self.probes.append((time.monotonic(), probe_ms()))
            now = time.monotonic()
            if now - last >= 1.0:
                last = now
                try:
                    with open(f"/proc/{self.pid}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                self.cpu.append((now, (int(fields[11]) + int(fields[12])) / self.tick))


def null_losses(intervals: list[tuple[float, float]], start: float, end: float,
                window: float) -> list[float]:
    """``server_collect.py``'s loss figure on windows where nothing ran: ``[start, end)`` cut
    into windows of ``window`` seconds, each odd one set against the mean of the windows on
    either side of it (percent)."""
    means = []
    t = start
    while t + window <= end:
        means.append(mean_tps(intervals, t, t + window))
        t += window
    out = []
    for k in range(1, len(means) - 1, 2):
        before, during, after = means[k - 1], means[k], means[k + 1]
        if before and during and after:
            out.append(100 * (1 - during / ((before + after) / 2)))
    return out


def by_block(intervals: list[tuple[float, float]], probes: list[tuple[float, float]],
             cpu: list[tuple[float, float]], block: float = 10.0) -> list[
                 tuple[float, float, float | None, float | None]]:
    """Each ``block`` seconds: its start, the transactions against the run's median, the
    probe's median (ms) and the server's CPUs."""
    med = statistics.median(r for _, r in intervals)
    rows = []
    end = max(t for t, _ in intervals)
    t = min(t for t, _ in intervals) - 1
    while t + block <= end:
        tps = [r for s, r in intervals if t < s <= t + block]
        pr = [p for s, p in probes if t < s <= t + block]
        cp = [(s, c) for s, c in cpu if t <= s <= t + block]
        cpus = ((cp[-1][1] - cp[0][1]) / (cp[-1][0] - cp[0][0])
                if len(cp) > 1 and cp[-1][0] > cp[0][0] else None)
        rows.append((t, statistics.mean(tps) / med if tps and med > 0 else float("nan"),
                     statistics.median(pr) if pr else None, cpus))
        t += block
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--test", default="oltp_read_write")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--window", type=float, default=60)
    a = ap.parse_args()
    if not 60 <= a.seconds <= 86400 or not 5 <= a.window <= a.seconds / 3:
        ap.error("--seconds must be 60 to 86400, and --window 5 or more and at most a third "
                 "of --seconds")
    try:
        require("mariadb")
    except Missing as e:
        print(f"server_levels.py: {e}", file=sys.stderr)
        return 6
    try:
        with open(LOCK, "w") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            with MariaDB(THROUGHPUT_TABLES, THROUGHPUT_TABLE_SIZE) as db:
                db.prepare()
                job = db.sysbench_start(a.test, 32, a.seconds + 5)
                sampler = Sampler(db.pid)
                sampler.start()
                try:
                    job.result(a.seconds + 180)
                finally:
                    sampler.stop.set()
                    job.stop()
                # read here: the log is in the server's private directory, removed with it
                iv = job.intervals()
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"server_levels.py: the server or its load failed: {first_line(e)}", file=sys.stderr)
        return 1
    t_job = job.started
    probes = [(t - t_job, p) for t, p in sampler.probes]
    cpu = [(t - t_job, c) for t, c in sampler.cpu]
    if not iv or not probes:
        print("server_levels.py: no sysbench figure or no probe: nothing to print",
              file=sys.stderr)
        return 1
    print(f"{a.test}, {len(iv)} s with no profiler; each 10 s: transactions against the run's "
          "median, the probe's median (ms of its own CPU), the server's CPUs")
    for t, ratio, pr, cpus in by_block(iv, probes, cpu):
        print(f"  {t:6.0f} s  {ratio:5.2f}  "
              + (f"{pr:6.3f} ms" if pr is not None else "     - ms")
              + (f"  {cpus:5.2f}" if cpus is not None else "      -"))
    med = statistics.median(r for _, r in iv)

    def probe_in(seconds: list[float]) -> str:
        pr = [p for s, p in probes if any(x - 1 < s <= x for x in seconds)]
        return f"{statistics.median(pr):.3f} ms ({len(pr)} probes)" if pr else "-"

    low = [s for s, r in iv if r < 0.85 * med]
    high = [s for s, r in iv if r >= 0.95 * med]
    print(f"probe in the {len(low)} seconds under 85% of the median: {probe_in(low)}; in the "
          f"{len(high)} at 95% or more: {probe_in(high)}")
    losses = null_losses(iv, 5.0, max(s for s, _ in iv), a.window)
    if losses:
        print(f"server_collect.py's loss figure on {a.window:.0f} s windows with no profiler "
              f"({len(losses)}): " + ", ".join(f"{x:.1f}" for x in losses)
              + f"%; median {statistics.median(losses):.1f}%, median of the sizes "
              f"{statistics.median(abs(x) for x in losses):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
