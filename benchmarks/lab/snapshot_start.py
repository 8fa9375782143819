#!/usr/bin/env python3
"""What a collect's first snapshot costs against the ones after it, on MariaDB under sysbench.

MariaDB (``benchmarks/servers.py``, 8 tables of 100,000 rows) under ``sysbench
oltp_read_write`` with 32 clients; after 10 s of load, the collect's own snapshot backend
(``collect.snapshots.LibdwBackend``, as a collect uses it: ``SCHED_FIFO`` while it unwinds, where
allowed) takes ``--snapshots`` snapshots of every thread, one a second.  For each it prints
the wall time, the snapshotting thread's CPU time (``time.thread_time``), the number of
threads, the mean per-thread stop and the longest stop's upper bound (attach request to
release).  The first snapshot builds the libdw session: it reports the modules, loads each
one's ELF and CFI on first use and builds the symbol indexes; the later ones reuse it.

    .venv/bin/python benchmarks/lab/snapshot_start.py [--snapshots 5] [--runs 3] [--profile]

``--profile``: the first snapshot of each run under ``cProfile``, its eight most costly
functions by their own time printed after it (the profiler's own cost is in the figures).

Needs root (ptrace, ``SCHED_FIFO``), ``mariadb-server`` and ``sysbench``.  Holds
``/tmp/wallflame-measure.lock`` while the server runs.
"""

from __future__ import annotations

import argparse
import cProfile
import fcntl
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.server_collect import LOCK  # noqa: E402
from benchmarks.servers import (  # noqa: E402
    THROUGHPUT_TABLE_SIZE,
    THROUGHPUT_TABLES,
    MariaDB,
    Missing,
    require,
)
from wallflame.collect.snapshots import LibdwBackend  # noqa: E402


def one_run(snapshots: int, profile: bool = False) -> list[tuple[float, float]]:
    """One server, one backend: each snapshot's (wall ms, thread CPU ms), printed as taken."""
    out = []
    with MariaDB(THROUGHPUT_TABLES, THROUGHPUT_TABLE_SIZE) as db:
        db.prepare()
        job = db.sysbench_start("oltp_read_write", 32, 10 + snapshots * 2 + 30)
        try:
            time.sleep(10)
            backend = LibdwBackend(db.pid)
            try:
                for i in range(snapshots):
                    tids = [int(t) for t in os.listdir(f"/proc/{db.pid}/task")]
                    prof = cProfile.Profile() if profile and i == 0 else None
                    c0, w0 = time.thread_time(), time.monotonic()
                    if prof is not None:
                        prof.enable()
                    dump = backend.snapshot(5.0, tids)
                    if prof is not None:
                        prof.disable()
                    wall, cpu = 1000 * (time.monotonic() - w0), 1000 * (time.thread_time() - c0)
                    longest = max((hi for _, hi in dump.stops.values()), default=0.0)
                    print(f"snapshot {i}: wall {wall:6.1f} ms, thread CPU {cpu:5.1f} ms, "
                          f"{len(tids)} threads, mean stop {dump.pause_ms:.3f} ms, longest "
                          f"stop at most {longest:.2f} ms"
                          + (f", error {dump.error}" if dump.error else ""), flush=True)
                    if prof is not None:
                        pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(8)
                    out.append((wall, cpu))
                    time.sleep(max(0.0, 1.0 - (time.monotonic() - w0)))
            finally:
                backend.close()
        finally:
            job.stop()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--snapshots", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", action="store_true",
                    help="the first snapshot of each run under cProfile")
    a = ap.parse_args()
    if a.snapshots < 2 or a.runs < 1:
        ap.error("--snapshots must be at least 2 and --runs at least 1")
    try:
        require("mariadb")
    except Missing as e:
        print(f"snapshot_start.py: {e}", file=sys.stderr)
        return 6
    firsts, laters = [], []
    with open(LOCK, "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        for r in range(a.runs):
            print(f"== run {r}")
            rows = one_run(a.snapshots, a.profile)
            firsts.append(rows[0][1])
            laters += [cpu for _, cpu in rows[1:]]
    print(f"the snapshotting thread's CPU: first snapshot median {statistics.median(firsts):.1f} "
          f"ms ({', '.join(f'{x:.1f}' for x in firsts)}), later ones median "
          f"{statistics.median(laters):.1f} ms ({min(laters):.1f}-{max(laters):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
