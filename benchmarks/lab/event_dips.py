#!/usr/bin/env python3
"""What one event of a collect costs a busy server, at the moment it happens.

MariaDB (``benchmarks/servers.py``, 8 tables of 100,000 rows) under ``sysbench
oltp_read_write`` with 32 clients.  The server's own count of commits (``Com_commit``) is read
every 20 ms through one client kept connected, in every phase alike.  Phases of ``--phase``
seconds take turns, ``--rounds`` times:

* ``none``: nothing, at the times the events of the other kinds would be (0.5-1.5 s apart);
* ``snapshot``: one snapshot by the collect's own backend (``collect.snapshots.LibdwBackend``: each
  thread stopped on its own, ``SCHED_FIFO`` while it unwinds; a thread its /proc ``stat``
  reads running is left running, as the collect leaves it), 0.5-1.5 s apart, as a light
  collect takes one a second;
* ``snapshot_all``: the same, every thread stopped, running ones too (as the backend did
  before it left the threads /proc reads running alone);
* ``read``: ``perf script`` of a 10 s on-CPU chunk (``perf record -e cpu-clock -F 99
  --call-graph fp -a``, recorded from the same server before the phases, read with the
  kernel's symbols from a copy, as the collect reads it) at the collect's folding process's
  priority (``SCHED_IDLE``, nice 19, idle I/O class), every 10 s.

For each kind it prints the commit rate in 50 ms bins from 0.2 s before each event to 0.6 s
after it, against that phase's mean rate, and what the event cost: the commits missing in the
bins after it (against the mean of the bins before it), in milliseconds of the server's mean
rate.  A snapshot a second that costs S ms costs S/10 percent of the server's minute.

    .venv/bin/python benchmarks/lab/event_dips.py [--phase 120] [--rounds 2] \
        [--kinds snapshot,snapshot_all,read]

Needs root (perf, ptrace, ``SCHED_FIFO``), ``mariadb-server`` and ``sysbench``.  Holds
``/tmp/wallflame-measure.lock`` while the server runs.
"""

from __future__ import annotations

import argparse
import bisect
import fcntl
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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
from wallflame.collect.perf import script_command  # noqa: E402
from wallflame.collect.snapshots import LibdwBackend  # noqa: E402
from wallflame.collect.target import thread_states  # noqa: E402

KINDS = ("none", "snapshot", "snapshot_all", "read")
#: Bins around each event: 50 ms wide, from 0.2 s before it to 0.6 s after it.
BIN_S = 0.05
BINS = [(-0.2 + BIN_S * k, -0.2 + BIN_S * (k + 1)) for k in range(16)]
POLL_S = 0.02


def count_at(times: list[float], counts: list[float], t: float) -> float | None:
    """The commit count at ``t``, interpolated between the two polls around it."""
    i = bisect.bisect_left(times, t)
    if i <= 0 or i >= len(times):
        return None
    t0, t1, c0, c1 = times[i - 1], times[i], counts[i - 1], counts[i]
    return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c0


def around(times: list[float], counts: list[float], events: list[float],
           mean_rate: float, bins: list[tuple[float, float]] | None = None,
           ) -> tuple[list[float], float] | None:
    """The commit rate in each of ``bins`` (``BINS``) around the events, against
    ``mean_rate``, and the events' cost: the commits missing in the bins after each (against
    the mean of the bins before it), in milliseconds of ``mean_rate``."""
    bins = bins or BINS
    if not mean_rate or not events:
        return None
    ratios = []
    for lo, hi in bins:
        rates = []
        for e in events:
            a, b = count_at(times, counts, e + lo), count_at(times, counts, e + hi)
            if a is not None and b is not None:
                rates.append((b - a) / (hi - lo))
        if not rates:
            return None
        ratios.append(statistics.mean(rates) / mean_rate)
    before = [r for (lo, _), r in zip(bins, ratios, strict=True) if lo < 0]
    level = statistics.mean(before)
    lost = sum((level - r) * (hi - lo) for (lo, hi), r in zip(bins, ratios, strict=True)
               if lo >= 0)
    return ratios, 1000 * lost


@dataclass
class KindSummary:
    """What the phases of one kind measured: its events, each phase's mean rate and the
    events' cost in it (``around``), and the mean curve over the phases."""

    events: int
    rates: list[float]
    costs: list[float]
    curve: list[float]


def kind_summary(phases: list[tuple[str, float, float, list[float]]], times: list[float],
                 counts: list[float], kind: str,
                 bins: list[tuple[float, float]] | None = None) -> KindSummary | None:
    """``phases`` (kind, start, end, events) of ``kind``, each against its own mean rate
    from a second after its start to a second before its end; ``None`` if none measured."""
    bins = bins or BINS
    costs, curves, rates = [], [], []
    n = 0
    for k, t0, t1, events in phases:
        if k != kind:
            continue
        c0, c1 = count_at(times, counts, t0 + 1), count_at(times, counts, t1 - 1)
        if c0 is None or c1 is None:
            continue
        rate = (c1 - c0) / (t1 - t0 - 2)
        got = around(times, counts, events, rate, bins)
        if got is None:
            continue
        curves.append(got[0])
        costs.append(got[1])
        rates.append(rate)
        n += len(events)
    if not curves:
        return None
    return KindSummary(n, rates, costs,
                       [statistics.mean(c[i] for c in curves) for i in range(len(bins))])


def record_chunk(out: Path, kallsyms: Path) -> None:
    """A 10 s on-CPU chunk of the whole machine, as a light collect records it."""
    shutil.copyfile("/proc/kallsyms", kallsyms)
    subprocess.run(["perf", "record", "-q", "-k", "mono", "-e", "cpu-clock", "-F", "99",
                    "--call-graph", "fp", "-a", "-o", str(out), "--", "sleep", "10"],
                   check=True, capture_output=True)


def read_chunk(chunk: Path, pid: int) -> None:
    cmd = script_command(chunk, False, pid, kallsyms=True)
    subprocess.run(["chrt", "-i", "0", "nice", "-n", "19", "ionice", "-c", "3", *cmd],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def phase(kind: str, seconds: float, backend: LibdwBackend, pid: int, chunk: Path,
          rng: random.Random) -> tuple[float, float, list[float]]:
    """One phase; its bounds and its events (``time.monotonic()``)."""
    t0 = time.monotonic()
    end = t0 + seconds
    events: list[float] = []
    nxt = t0 + 1.0
    while True:
        nxt += 10.0 if kind == "read" else 0.5 + rng.random()
        if nxt > end - 1.0:
            break
        time.sleep(max(0.0, nxt - time.monotonic()))
        events.append(time.monotonic())
        if kind == "snapshot":
            states = thread_states(pid)
            backend.snapshot(5.0, [t for t, st in states.items() if st not in "RDZX"],
                             None, [t for t, st in states.items() if st == "R"])
        elif kind == "snapshot_all":
            backend.snapshot(5.0, [int(t) for t in os.listdir(f"/proc/{pid}/task")])
        elif kind == "read":
            read_chunk(chunk, pid)
    time.sleep(max(0.0, end - time.monotonic()))
    return t0, end, events


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--phase", type=float, default=120.0, help="seconds per phase")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kinds", default="snapshot,snapshot_all,read",
                    help="events besides none, comma-separated: " + ", ".join(KINDS[1:]))
    a = ap.parse_args()
    kinds = ["none", *[k for k in a.kinds.split(",") if k]]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        ap.error(f"--kinds takes {', '.join(KINDS[1:])}, not {', '.join(bad)}")
    if a.phase < 20 or a.rounds < 1:
        ap.error("--phase must be at least 20 and --rounds at least 1")
    try:
        require("mariadb")
    except Missing as e:
        print(f"event_dips.py: {e}", file=sys.stderr)
        return 6
    rng = random.Random()
    phases: list[tuple[str, float, float, list[float]]] = []
    with open(LOCK, "w") as lk, tempfile.TemporaryDirectory(prefix="wf-dips-") as tmp:
        fcntl.flock(lk, fcntl.LOCK_EX)
        chunk, ksyms = Path(tmp) / "perf.data", Path(tmp) / "kallsyms"
        with MariaDB(THROUGHPUT_TABLES, THROUGHPUT_TABLE_SIZE) as db:
            db.prepare()
            job = db.sysbench_start("oltp_read_write", 32,
                                    a.rounds * len(kinds) * a.phase + 60)
            poll = db.status_poll(["Com_commit"], POLL_S)
            backend = LibdwBackend(db.pid)
            try:
                time.sleep(5)
                record_chunk(chunk, ksyms)
                poll.start()
                backend.snapshot(5.0, [int(t) for t in os.listdir(f"/proc/{db.pid}/task")])
                for r in range(a.rounds):
                    for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                        phases.append((kind, *phase(kind, a.phase, backend, db.pid, chunk,
                                                    rng)))
                        print(f"round {r}: {kind} done", flush=True)
            finally:
                backend.close()
                poll.stop()
                job.stop()
    rows = [(t, row["com_commit"]) for t, row in poll.rows if "com_commit" in row]
    times, counts = [t for t, _ in rows], [c for _, c in rows]
    print(f"\ncommits against each phase's mean rate, in 50 ms bins from -0.2 to +0.6 s around "
          f"each event (polled every {1000 * POLL_S:.0f} ms)")
    for kind in kinds:
        got = kind_summary(phases, times, counts, kind)
        if got is None:
            print(f"{kind:9s} no phase measured")
            continue
        print(f"{kind:9s} {got.events:4d} events, {statistics.median(got.rates):6.0f} commits/s; "
              f"cost per event by phase: {', '.join(f'{c:.1f}' for c in got.costs)} ms")
        print("          " + " ".join(f"{x:.2f}" for x in got.curve))
    return 0


if __name__ == "__main__":
    sys.exit(main())
