#!/usr/bin/env python3
"""What a light collect's snapshot thread costs a busy server while its window is open, in short
phases that take turns with phases of nothing.

MariaDB (``benchmarks/servers.py``, 8 tables of 100,000 rows) under ``sysbench TEST`` with 32
clients.  A 60 s window set against windows of no profiler on either side of it
(``server_collect.py``) is at the mercy of the server's own levels, which move it by 5-10% for
tens of seconds to minutes at a time: a median of five such rounds has a standard error of
several points.  Here the phases are ``--phase`` seconds long (default 10) and strictly
alternate, nothing, something, nothing, something ... so that each phase with something is set
against the two phases of nothing either side of it, 10 s away, and a level that lasts longer
than that cancels out.  The server's own count of the test's statements (``Com_update`` for
``oltp_update_index``, ``Com_commit`` otherwise) is read every 0.1 s through one client kept
connected, in every phase alike; a phase's rate is taken from its second second to half a
second before its end.

What runs in a phase of something, by ``--kinds`` (in turn):

* ``light``: the light collect's snapshot thread as the collect runs it
  (``collect.snapshots.SnapshotLoop``, libdw backend, ``budget.LIGHT_PMP_HZ`` snapshots a
  second, each thread's /proc record read alone between them), started at the phase's start
  and stopped at its end.  The libdw backend is started once, before the phases (the collect
  does that before its window opens, ``LibdwBackend.warm``), and kept across them;
* ``snapshots``: the same without the records read alone;
* ``reads``: the records read alone, no snapshot (``SnapshotLoop._read_alone`` at the same
  pace).

What it leaves out, measured elsewhere: the on-CPU recorder (``server_collect.py --sham -- --off-cpu
none``), the collect's start and end (``server_collect.py --by-second``).  It prints each
kind's loss against the phases of nothing either side, phase by phase, their median, mean and
the mean's standard error, and the same figure for the phases of nothing themselves (each
against the two of nothing two phases away: what the estimate gives where nothing differs).

    .venv/bin/python benchmarks/lab/light_phases.py [--test oltp_update_index] [--phase 10]
        [--pairs 30] [--kinds light,snapshots,reads]

Needs root (ptrace, ``SCHED_FIFO``), ``mariadb-server`` and ``sysbench``.  Holds
``/tmp/wallflame-measure.lock`` while the server runs.
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

from benchmarks.lab.event_dips import count_at  # noqa: E402
from benchmarks.server_collect import LOCK  # noqa: E402
from benchmarks.servers import (  # noqa: E402
    THROUGHPUT_TABLE_SIZE,
    THROUGHPUT_TABLES,
    MariaDB,
    Missing,
    first_line,
    require,
)
from wallflame.collect.budget import LIGHT_PMP_HZ  # noqa: E402
from wallflame.collect.locks.owners import ProcReader  # noqa: E402
from wallflame.collect.snapshots import LibdwBackend, SnapshotLoop  # noqa: E402
from wallflame.collect.target import list_tids, open_target  # noqa: E402
from wallflame.rundir import CollectOptions  # noqa: E402

KINDS = ("light", "snapshots", "reads")
POLL_S = 0.1
#: A phase's rate is read from this long after its start to ``TAIL_S`` before its end.
HEAD_S, TAIL_S = 1.0, 0.5


class KeptBackend(LibdwBackend):
    """The libdw backend, started once and kept across the phases: a loop's end does not
    close it."""

    def close(self) -> None:
        return None

    def close_for_good(self) -> None:
        LibdwBackend.close(self)


class ReadsOnly(SnapshotLoop):
    """The records read alone at the light collect's pace, no snapshot taken."""

    def _one(self, reader: ProcReader, timeout: float) -> bool:
        return True


def run_phase(kind: str, seconds: float, backend: KeptBackend, pid: int) -> dict[str, float]:
    """One phase; its bounds (``time.monotonic()``) and what its loop did."""
    t0 = time.monotonic()
    out: dict[str, float] = {"t0": t0}
    if kind == "none":
        time.sleep(seconds)
    else:
        stop = threading.Event()
        cls = ReadsOnly if kind == "reads" else SnapshotLoop
        with open(os.devnull, "w", encoding="utf-8") as log:
            loop = cls(open_target(pid, allow_own_child=True), backend, log, LIGHT_PMP_HZ,
                       CollectOptions().max_pause_ms, stop, read_alone=kind != "snapshots")
            loop.start()
            time.sleep(max(0.0, t0 + seconds - time.monotonic()))
            stop.set()
            loop.join(30)
        if loop.start_error is not None:
            raise RuntimeError(f"the snapshot thread failed: {first_line(loop.start_error)}")
        out.update(cpu_s=loop.cpu_s, snapshots=loop.stats.snapshots)
    out["t1"] = time.monotonic()
    return out


def rate(times: list[float], counts: list[float], t0: float, t1: float) -> float | None:
    a, b = count_at(times, counts, t0 + HEAD_S), count_at(times, counts, t1 - TAIL_S)
    if a is None or b is None:
        return None
    return (b - a) / (t1 - t0 - HEAD_S - TAIL_S)


def phase_losses(kinds: list[str], rates: list[float | None], kind: str) -> list[tuple[int, float]]:
    """Each phase of ``kind`` (by index) and its loss in percent against the mean rate of the
    phases either side of it: the next ones for a kind of something (the plan alternates, so
    those are phases of nothing), two away for ``none`` (the phases of nothing beside the
    phases of something beside it: what the estimate gives where nothing differs).  A level
    that moves linearly over the three phases cancels out.  A phase at either end, or whose
    rate or a neighbour's is unknown, has none."""
    step = 2 if kind == "none" else 1
    out = []
    for i, k in enumerate(kinds):
        if k != kind or i - step < 0 or i + step >= len(kinds):
            continue
        here, before, after = rates[i], rates[i - step], rates[i + step]
        if here is None or not before or not after:
            continue
        out.append((i, 100 * (1 - here / ((before + after) / 2))))
    return out


def summary(losses: list[float]) -> str:
    if not losses:
        return "no phase measured"
    mean = statistics.mean(losses)
    se = statistics.stdev(losses) / len(losses) ** 0.5 if len(losses) > 1 else float("nan")
    return (f"median {statistics.median(losses):5.1f}%, mean {mean:5.1f}% "
            f"(standard error {se:.1f}), {len(losses)} phases, "
            f"{sum(x > 0 for x in losses) / len(losses):.2f} of them under their neighbours")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--test", default="oltp_update_index")
    ap.add_argument("--phase", type=float, default=10.0, help="seconds per phase (default 10)")
    ap.add_argument("--pairs", type=int, default=30,
                    help="phases of something, each followed by one of nothing (default 30)")
    ap.add_argument("--kinds", default="light",
                    help="what runs in the phases of something, in turn, comma-separated: "
                    + ", ".join(KINDS))
    a = ap.parse_args()
    kinds = [k for k in a.kinds.split(",") if k]
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        ap.error(f"--kinds takes {', '.join(KINDS)}, not {', '.join(bad) or 'nothing'}")
    if not 4 <= a.phase <= 600 or not 1 <= a.pairs <= 1000:
        ap.error("--phase must be 4 to 600 and --pairs 1 to 1000")
    try:
        require("mariadb")
    except Missing as e:
        print(f"light_phases.py: {e}", file=sys.stderr)
        return 6
    counter = "Com_update" if a.test == "oltp_update_index" else "Com_commit"
    plan = ["none"]
    for i in range(a.pairs):
        plan += [kinds[i % len(kinds)], "none"]
    phases: list[tuple[str, dict[str, float]]] = []
    try:
        with open(LOCK, "w") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            with MariaDB(THROUGHPUT_TABLES, THROUGHPUT_TABLE_SIZE) as db:
                db.prepare()
                job = db.sysbench_start(a.test, 32, len(plan) * a.phase + 90)
                poll = db.status_poll([counter], POLL_S)
                backend = KeptBackend(db.pid)
                try:
                    time.sleep(10)
                    backend.warm(list_tids(db.pid))
                    poll.start()
                    time.sleep(5)
                    for i, kind in enumerate(plan):
                        phases.append((kind, run_phase(kind, a.phase, backend, db.pid)))
                        print(f"phase {i + 1}/{len(plan)}: {kind}", flush=True)
                finally:
                    backend.close_for_good()
                    poll.stop()
                    job.stop()
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"light_phases.py: the server or its load failed: {first_line(e)}",
              file=sys.stderr)
        return 1
    rows = [(t, row[counter.lower()]) for t, row in poll.rows if counter.lower() in row]
    times, counts = [t for t, _ in rows], [c for _, c in rows]
    rates = [rate(times, counts, p["t0"], p["t1"]) for _, p in phases]
    print(f"\n{a.test}, {counter} a second in phases of {a.phase:g} s, each against the mean of "
          "the two of nothing either side (loss: positive when lower)")
    levels = [r for (k, _), r in zip(phases, rates, strict=True) if k == "none" and r]
    if levels:
        print(f"phases of nothing: median {statistics.median(levels):,.0f}/s "
              f"({min(levels):,.0f}-{max(levels):,.0f})")
    for kind in [*dict.fromkeys(kinds), "none"]:
        got = phase_losses([k for k, _ in phases], rates, kind)
        losses = [x for _, x in got]
        cpu = [phases[i][1]["cpu_s"] / a.phase for i, _ in got if kind != "none"]
        snaps = [phases[i][1]["snapshots"] / a.phase for i, _ in got if kind != "none"]
        label = "nothing (two phases away)" if kind == "none" else kind
        print(f"{label}: {summary(losses)}")
        if losses:
            print("  by phase: " + ", ".join(f"{x:.1f}" for x in losses))
        if cpu:
            print(f"  the loop's CPU {statistics.median(cpu):.3f} of a CPU, "
                  f"{statistics.median(snaps):.2f} snapshots a second (medians)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
