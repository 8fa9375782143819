#!/usr/bin/env python3
"""Each thread's on-CPU share against the kernel's run time, with the switch-in lag moved and
without: a busy server (MariaDB under sysbench ``oltp_update_index``, or redis-server under
redis-benchmark), the default ``wallflame collect``.

The kernel's figure is the thread's ``schedstat`` run time between its two reads by the collect
(``raw/capture.json`` ``threads``, each row's ``schedstat_ns``), as a share of that span;
wallflame's is ``summary.json``'s ``on_cpu_s`` as a share of the window.  The run is then
finished again with the lag left out (``LAG_MIN_SWITCH_INS`` set out of reach), so both
figures come from the same recording.

    .venv/bin/python benchmarks/switch_in_lag.py [--server mariadb|redis] [--runs 3] [--clients 16]
        [--seconds 6]

Needs ``mariadb-server sysbench`` (or ``redis-server redis-tools``) and root.  Holds
``/tmp/wallflame-measure.lock``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.servers import MariaDB, Redis  # noqa: E402
from wallflame.assemble.assembly import assemble  # noqa: E402
from wallflame.fold.perf import sched_passes  # noqa: E402

LOCK = "/tmp/wallflame-measure.lock"


def gaps(run: Path) -> dict[int, float]:
    """Per thread listed at both reads: wallflame's on-CPU share minus the kernel's, points."""
    cap = json.loads((run / "raw" / "capture.json").read_text())
    w = cap["window"]
    window = w["mono_end_ns"] - w["mono_start_ns"]
    on = {t["tid"]: t["on_cpu_s"] * 1e9 / window
          for t in json.loads((run / "summary.json").read_text())["threads"]}
    start = {r["tid"]: r for r in cap["threads"]["start"]["threads"]}
    out = {}
    for r in cap["threads"]["end"]["threads"]:
        a = start.get(r["tid"])
        if a is None or not a["schedstat"] or not r["schedstat"]:
            continue
        span = r.get("schedstat_ns", cap["threads"]["end"]["mono_ns"]) - a.get(
            "schedstat_ns", cap["threads"]["start"]["mono_ns"])
        out[r["tid"]] = 100 * (on.get(r["tid"], 0.0)
                               - (r["schedstat"][0] - a["schedstat"][0]) / span)
    return out


def without_lag(run: Path, into: Path) -> dict[int, float]:
    """The same run finished again with no lag applied."""
    shutil.copytree(run / "raw", into / "raw")
    keep = sched_passes.LAG_MIN_SWITCH_INS
    sched_passes.LAG_MIN_SWITCH_INS = 1 << 62
    try:
        assemble(into)
    finally:
        sched_passes.LAG_MIN_SWITCH_INS = keep
    return gaps(into)


def collect(pid: int, seconds: int, run: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "wallflame", "collect", "--pid", str(pid), "-d",
                        str(seconds), "-o", str(run)], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])


def one(server: str, clients: int, seconds: int, tmp: Path) -> dict[str, Any]:
    run = tmp / "run"
    if server == "mariadb":
        with MariaDB(tables=2, table_size=2000) as db:
            db.prepare()
            load = db.sysbench_start("oltp_update_index", threads=clients,
                                     seconds=seconds + 60)
            try:
                time.sleep(3)
                collect(db.pid, seconds, run)
            finally:
                load.stop()
    else:
        with Redis() as r:
            load = r.benchmark_start(clients=clients, seconds=seconds + 60)
            try:
                time.sleep(1)
                collect(r.pid, seconds, run)
            finally:
                load.stop()
                load.proc.wait(30)
    lag = json.loads((run / "meta.json").read_text())["profile"]["extra"]["sched"][
        "switch_in_lag"]
    return {"with": gaps(run), "without": without_lag(run, tmp / "again"), "lag": lag}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", choices=("mariadb", "redis"), default="mariadb")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=int, default=6)
    a = ap.parse_args()
    print("threads | lag ns (switch-ins measured) | worst gap, points: with the lag / without "
          "| median |gap|: with / without")
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for _ in range(a.runs):
            with tempfile.TemporaryDirectory(prefix="wf-lag-") as tmp:
                m = one(a.server, a.clients, a.seconds, Path(tmp))
            w, wo = m["with"], m["without"]
            worst = [max(g.values(), key=abs) for g in (w, wo)]
            med = [sorted(abs(v) for v in g.values())[len(g) // 2] for g in (w, wo)]
            print(f"{len(w):7d} | {m['lag']['ns']:6,d} ({m['lag']['switch_ins']:,}, "
                  f"{'applied' if m['lag']['applied'] else 'not applied'}) | "
                  f"{worst[0]:+6.2f} / {worst[1]:+6.2f} | {med[0]:5.2f} / {med[1]:5.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
