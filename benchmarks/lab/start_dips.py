#!/usr/bin/env python3
"""What each piece of an attached collect's start costs a busy server, at the moment it
happens.

Every light collect of MariaDB under sysbench costs the server about half a second of its
transactions in the seconds around its window's opening (``server_collect.py --by-second``),
whatever the window's length.  This times the pieces of that start one kind at a time, each
in a fresh process as a collect runs it (nothing cached from the one before):

* ``python``: a Python that imports the collect (``wallflame.collect.run``) and ends;
* ``reader``: the same, then one reading of every thread's /proc record by the snapshot
  thread's reader (``collect.locks.owners.ProcReader.read``: the futex waiters' locks named, with
  ``nm`` of each module the first time);
* ``warm``: the same, then the libdw backend's start (``LibdwBackend.warm``, as the snapshot
  thread runs it before the window opens);
* ``perf``: ``perf record`` of on-CPU samples on every CPU as a light collect starts it (99 Hz,
  frame pointers, ``-k mono``), over 0.3 s, then stopped.

MariaDB (``benchmarks/servers.py``, 8 tables of 100,000 rows) under ``sysbench TEST`` with 32
clients; the server's count of the test's statements (``Com_update`` for
``oltp_update_index``, ``Com_commit`` otherwise) read every 20 ms through one client kept
connected.  Phases of ``--phase`` seconds take turns, one kind each (``none``: nothing, at the
same times), events 3-4 s apart.  For each kind it prints the rate in 0.1 s bins from 0.4 s
before each event to 2 s after it, against the phase's mean, and the cost of an event: the
statements missing in the 2 s after it against the 0.4 s before it, in milliseconds of the
server's mean rate, and those missing in the first 0.5 s of the mean curve.

    .venv/bin/python benchmarks/lab/start_dips.py [--test oltp_update_index] [--phase 60]
        [--rounds 2] [--kinds python,reader,warm,perf]

Needs root (perf on every CPU, ptrace), ``mariadb-server`` and ``sysbench``.  Holds
``/tmp/wallflame-measure.lock`` while the server runs.
"""

from __future__ import annotations

import argparse
import fcntl
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.lab.event_dips import kind_summary  # noqa: E402
from benchmarks.server_collect import LOCK  # noqa: E402
from benchmarks.servers import (  # noqa: E402
    THROUGHPUT_TABLE_SIZE,
    THROUGHPUT_TABLES,
    MariaDB,
    Missing,
    first_line,
    require,
)

KINDS = ("none", "python", "reader", "warm", "perf")
BIN_S = 0.1
BINS = [(-0.4 + BIN_S * k, -0.4 + BIN_S * (k + 1)) for k in range(24)]
POLL_S = 0.02
#: The span after an event that ``first_ms`` sums over.
FIRST_S = 0.5
#: What each kind runs in its fresh process (``PID``: the server's).
PROGRAMS = {
    "python": "import wallflame.collect.run",
    "reader": "import wallflame.collect.run\n"
              "from wallflame.collect.locks.owners import ProcReader\n"
              "ProcReader(PID).read()",
    "warm": "import wallflame.collect.run\n"
            "from wallflame.collect.locks.owners import ProcReader\n"
            "from wallflame.collect.snapshots import LibdwBackend\n"
            "recs = ProcReader(PID).read()\n"
            "b = LibdwBackend(PID)\n"
            "b.warm([int(r['tid']) for r in recs if r.get('state') not in ('Z', 'X', 'D')])\n"
            "b.close()",
}


def first_ms(curve: list[float]) -> float:
    """The statements missing in the first ``FIRST_S`` after the events, in milliseconds of
    the phase's mean rate, from the mean curve (``BINS``).  Steadier than each phase's cost
    over 2 s: the server's own moves over those 2 s are as large as what a piece costs."""
    return 1000 * sum((1 - r) * (hi - lo) for (lo, hi), r in zip(BINS, curve, strict=True)
                      if 0 <= lo < FIRST_S - 1e-9)


def event(kind: str, pid: int, out: Path) -> None:
    if kind in PROGRAMS:
        subprocess.run([sys.executable, "-c", PROGRAMS[kind].replace("PID", str(pid))],
                       cwd=ROOT, check=True, capture_output=True, timeout=60)
    elif kind == "perf":
        subprocess.run(["perf", "record", "-q", "-k", "mono", "-e", "cpu-clock", "-F", "99",
                        "--call-graph", "fp", "-a", "-o", str(out), "--", "sleep", "0.3"],
                       check=True, capture_output=True, timeout=60)


def phase(kind: str, seconds: float, pid: int, out: Path,
          rng: random.Random) -> tuple[float, float, list[float]]:
    t0 = time.monotonic()
    end = t0 + seconds
    events: list[float] = []
    nxt = t0 + 1.0
    while True:
        nxt += 3.0 + rng.random()
        if nxt > end - 3.0:
            break
        time.sleep(max(0.0, nxt - time.monotonic()))
        events.append(time.monotonic())
        event(kind, pid, out)
    time.sleep(max(0.0, end - time.monotonic()))
    return t0, end, events


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--test", default="oltp_update_index")
    ap.add_argument("--phase", type=float, default=60.0, help="seconds per phase")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kinds", default="python,reader,warm,perf",
                    help="events besides none, comma-separated: " + ", ".join(KINDS[1:]))
    a = ap.parse_args()
    kinds = ["none", *[k for k in a.kinds.split(",") if k]]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        ap.error(f"--kinds takes {', '.join(KINDS[1:])}, not {', '.join(bad)}")
    if not 20 <= a.phase <= 3600 or not 1 <= a.rounds <= 100:
        ap.error("--phase must be 20 to 3600 and --rounds 1 to 100")
    try:
        require("mariadb")
    except Missing as e:
        print(f"start_dips.py: {e}", file=sys.stderr)
        return 6
    counter = "Com_update" if a.test == "oltp_update_index" else "Com_commit"
    rng = random.Random()
    phases: list[tuple[str, float, float, list[float]]] = []
    try:
        with open(LOCK, "w") as lk, tempfile.TemporaryDirectory(prefix="wf-start-") as tmp:
            fcntl.flock(lk, fcntl.LOCK_EX)
            with MariaDB(THROUGHPUT_TABLES, THROUGHPUT_TABLE_SIZE) as db:
                db.prepare()
                job = db.sysbench_start(a.test, 32, a.rounds * len(kinds) * a.phase + 60)
                poll = db.status_poll([counter], POLL_S)
                try:
                    time.sleep(10)
                    poll.start()
                    for r in range(a.rounds):
                        for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                            phases.append((kind, *phase(kind, a.phase, db.pid,
                                                        Path(tmp) / "perf.data", rng)))
                            print(f"round {r}: {kind} done", flush=True)
                finally:
                    poll.stop()
                    job.stop()
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        print(f"start_dips.py: the server, its load or an event failed: {first_line(e)}",
              file=sys.stderr)
        return 1
    rows = [(t, row[counter.lower()]) for t, row in poll.rows if counter.lower() in row]
    times, counts = [t for t, _ in rows], [c for _, c in rows]
    print(f"\n{a.test}: {counter} against each phase's mean rate, in 0.1 s bins from -0.4 to "
          f"+2.0 s around each event (polled every {1000 * POLL_S:.0f} ms)")
    for kind in kinds:
        got = kind_summary(phases, times, counts, kind, BINS)
        if got is None:
            print(f"{kind:7s} no phase measured")
            continue
        print(f"{kind:7s} {got.events:4d} events, {statistics.median(got.rates):6.0f}/s; cost per "
              f"event by phase: {', '.join(f'{c:.0f}' for c in got.costs)} ms; in the first "
              f"{FIRST_S:g} s of the mean curve: {first_ms(got.curve):.0f} ms")
        print("        " + " ".join(f"{x:.2f}" for x in got.curve))
    return 0


if __name__ == "__main__":
    sys.exit(main())
