#!/usr/bin/env python3
"""What one round of the owner sampler and one snapshot cost in CPU, on a busy server.

MariaDB (``benchmarks/servers.py``: a private ``mariadbd`` with a sysbench schema) under
``sysbench oltp_update_index --threads 32``; then, in this process, ``--rounds`` rounds of the
collect's owner sampler (``collect.locks.owners.OwnerSampler``, holder probes on) and
``--snapshots`` libdw snapshots with their ``/proc`` records
(``collect.locks.owners.ProcReader`` and ``collect.snapshots.LibdwBackend``, as
``collect.snapshots.SnapshotLoop`` takes them), each timed with this thread's CPU clock.
Prints the median per round and per snapshot.

    .venv/bin/python benchmarks/lab/sampler_cost.py [--rounds 200] [--snapshots 30]

Needs ``mariadb-server sysbench`` and root (ptrace).
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.servers import (  # noqa: E402
    THROUGHPUT_TABLE_SIZE,
    THROUGHPUT_TABLES,
    MariaDB,
    Missing,
    require,
)
from wallflame.collect.locks.holders import HolderProbe  # noqa: E402
from wallflame.collect.locks.owners import OwnerSampler, ProcReader  # noqa: E402
from wallflame.collect.locks.targetmemory import MemReader, Symbols  # noqa: E402
from wallflame.collect.snapshots import LibdwBackend  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--snapshots", type=int, default=30)
    a = ap.parse_args()
    try:
        require("mariadb")
    except Missing as e:
        print(f"sampler_cost.py: {e}", file=sys.stderr)
        return 6
    with MariaDB(THROUGHPUT_TABLES, THROUGHPUT_TABLE_SIZE) as db:
        db.prepare()
        job = db.sysbench_start("oltp_update_index", 32, 60 + a.rounds // 5 + 2 * a.snapshots)
        try:
            time.sleep(8)  # warm-up
            owners = OwnerSampler(db.pid, io.StringIO(), 5.0, threading.Event())
            mem, sym, names = MemReader(db.pid), Symbols(db.pid), {}
            owners.prober = HolderProbe(db.pid, 0, False, mem)
            cpu = []
            for i in range(a.rounds + 20):
                t = time.thread_time()
                owners._sample(mem, sym, names)
                if i >= 20:  # the first rounds read every file's symbols
                    cpu.append(time.thread_time() - t)
                time.sleep(0.01)
            owners.prober.close()
            mem.close()
            print(f"owner sampler: {statistics.median(cpu) * 1e3:.2f} ms of CPU a round "
                  f"(median of {len(cpu)}; {owners.waiters} waiters recorded)")
            backend, reader = LibdwBackend(db.pid), ProcReader(db.pid)
            records, dumps, threads = [], [], 0
            for i in range(a.snapshots + 3):
                t0 = time.thread_time()
                procs = reader.read()
                t1 = time.thread_time()
                backend.snapshot(5.0, [int(r["tid"]) for r in procs
                                       if r.get("state") not in ("Z", "X", "D")])
                t2 = time.thread_time()
                if i >= 3:
                    records.append(t1 - t0)
                    dumps.append(t2 - t1)
                threads = len(procs)
                time.sleep(0.2)
            backend.close()
            reader.close()
            print(f"snapshot of {threads} threads: /proc records "
                  f"{statistics.median(records) * 1e3:.1f} ms, unwinding "
                  f"{statistics.median(dumps) * 1e3:.1f} ms of CPU (medians of {len(dumps)})")
        finally:
            job.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
