#!/usr/bin/env python3
"""Does a snapshot's own reading of /proc change what it reads?

MariaDB (``benchmarks/servers.py``, 8 tables of 100,000 rows) under ``sysbench TEST`` with 32
clients.  Every 0.5-1.5 s, in turn:

* ``one``: 40 times, 5-25 ms apart, one thread picked at random, read alone (its ``stat``
  and ``wchan``, from the files the collect's reader keeps open): the least a reading can
  disturb;
* ``full``: every thread read by the collect's own reader (``collect.locks.owners.ProcReader``, as
  each snapshot reads them: ``stat``, ``syscall``, ``wchan``, and each futex waiter's lock and
  stack words), then every thread read that way again at once (``again``);
* ``group``: 10 times, 50-150 ms apart, ``--group`` threads picked at random read at once by
  the collect's reader (``ProcReader.read_one``, one after the other).

Each record is asleep in ``poll`` (state ``S``, ``wchan`` a ``poll`` function), asleep on a
futex (``wchan`` a ``futex`` function), or neither.  It prints, for the threads seen asleep in
``poll`` at least once (MariaDB's connection threads, which wait there for their client's next
statement), the share of ``poll`` among the two kinds of sleep in each kind of reading, and
how long a ``full`` reading took.  If the reading itself put threads in ``poll`` (its CPU
taken while the clients wait for one), ``full`` would show more of it than ``one``, and
``again`` more than ``full``.

    .venv/bin/python benchmarks/lab/proc_read_bias.py [--test oltp_read_write] [--seconds 120] \
        [--group 5]

Needs ``mariadb-server`` and ``sysbench``.  Holds ``/tmp/wallflame-measure.lock`` while the
server runs.
"""

from __future__ import annotations

import argparse
import fcntl
import random
import statistics
import subprocess
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
    first_line,
    require,
)
from wallflame.collect.locks.owners import ProcReader  # noqa: E402
from wallflame.collect.target import list_tids  # noqa: E402
from wallflame.fold.procrecords import WCHAN_CLASS  # noqa: E402

KINDS = ("one", "full", "again", "group")
#: Readings of ``--group`` threads in a ``group`` turn, each after its own wait of 50-150 ms.
GROUP_READS = 10
#: Threads read alone in a ``one`` turn, each after its own wait of 5-25 ms.
ONE_READS = 40


def sleep_kind(state: str, wchan: str) -> str:
    """``poll``, ``futex`` or ``other`` for one record, by the table the snapshot folder reads
    ``wchan`` with (a futex there is ``condvar`` until its call says more)."""
    if state != "S" or not wchan:
        return "other"
    cls = next((c for prefix, c in WCHAN_CLASS if wchan.startswith(prefix)), None)
    return "poll" if cls == "poll" else "futex" if wchan.startswith("futex") else "other"


def record_kind(rec: dict[str, object]) -> str:
    """``sleep_kind`` of a record of the collect's reader."""
    return sleep_kind(str(rec.get("state", "")), str(rec.get("wchan") or ""))


def read_one(reader: ProcReader, tid: int) -> tuple[str, str] | None:
    """One thread's state and ``wchan``, read alone, from the files the collect's reader
    keeps open (so that the two reads are as far apart as in a full reading)."""
    stat = reader.threads.stat.read(tid)
    wchan = reader.threads.wchan.read(tid)
    if stat is None or wchan is None:
        return None
    state = stat.rsplit(")", 1)[1].split()[0]
    return state, wchan.strip() if wchan.strip() != "0" else ""


def poll_shares(records: dict[str, list[tuple[int, str]]]) -> dict[str, tuple[float, int]]:
    """For the threads seen asleep in ``poll`` at least once, each kind's share of ``poll``
    among its records asleep in ``poll`` or on a futex, and how many those were."""
    conn = {tid for recs in records.values() for tid, k in recs if k == "poll"}
    out = {}
    for kind, recs in records.items():
        mine = [k for tid, k in recs if tid in conn and k in ("poll", "futex")]
        out[kind] = (mine.count("poll") / len(mine) if mine else float("nan"), len(mine))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--test", default="oltp_read_write")
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--group", type=int, default=5,
                    help="threads read at once in a group turn (default 5)")
    a = ap.parse_args()
    if not 20 <= a.seconds <= 86400:
        ap.error("--seconds must be 20 to 86400")
    if not 1 <= a.group <= 1000:
        ap.error("--group must be 1 to 1000")
    try:
        require("mariadb")
    except Missing as e:
        print(f"proc_read_bias.py: {e}", file=sys.stderr)
        return 6
    records: dict[str, list[tuple[int, str]]] = {k: [] for k in KINDS}
    spans: list[float] = []
    rng = random.Random()
    try:
        with open(LOCK, "w") as lk:
            fcntl.flock(lk, fcntl.LOCK_EX)
            with MariaDB(THROUGHPUT_TABLES, THROUGHPUT_TABLE_SIZE) as db:
                db.prepare()
                job = db.sysbench_start(a.test, 32, a.seconds + 10)
                reader = ProcReader(db.pid)
                try:
                    time.sleep(5)
                    end = time.monotonic() + a.seconds
                    turn = 0
                    while time.monotonic() < end:
                        time.sleep(rng.uniform(0.5, 1.5))
                        if turn % 3 == 2:
                            for _ in range(GROUP_READS):
                                time.sleep(rng.uniform(0.05, 0.15))
                                tids = list_tids(db.pid)
                                alive = set(tids)
                                for tid in rng.sample(tids, min(a.group, len(tids))):
                                    r = reader.read_one(tid, alive)
                                    if r is not None:
                                        records["group"].append((tid, record_kind(r)))
                        elif turn % 3 == 0:
                            tids = list_tids(db.pid)
                            for _ in range(ONE_READS if tids else 0):
                                time.sleep(rng.uniform(0.005, 0.025))
                                tid = rng.choice(tids)
                                got = read_one(reader, tid)
                                if got is not None:
                                    records["one"].append((tid, sleep_kind(*got)))
                        else:
                            for kind in ("full", "again"):
                                t0 = time.monotonic()
                                recs = reader.read()
                                if kind == "full":
                                    spans.append((time.monotonic() - t0) * 1000)
                                records[kind].extend((int(r["tid"]), record_kind(r))
                                                     for r in recs)
                        turn += 1
                finally:
                    job.stop()
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"proc_read_bias.py: the server or its load failed: {first_line(e)}", file=sys.stderr)
        return 1
    shares = poll_shares(records)
    print(f"{a.test}, {a.seconds:.0f} s: share of poll among the connection threads' records "
          "asleep in poll or on a futex")
    for kind in KINDS:
        share, n = shares[kind]
        print(f"  {kind:6s} {share:6.3f}  ({n} records)")
    if spans:
        print(f"a full reading took {statistics.median(spans):.2f} ms (median; "
              f"{min(spans):.2f}-{max(spans):.2f}) for {len(records['full']) // len(spans)} "
              "threads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
