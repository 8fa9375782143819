#!/usr/bin/env python3
"""How much user stack a DWARF scheduler stack needs on a real server, and what a data budget
plans against what perf writes.

MariaDB (``benchmarks/servers.py``, 2 tables of 2,000 rows) under sysbench
``oltp_update_index`` with ``--clients`` clients:

1. ``perf record -e sched:sched_switch -F 20 --call-graph dwarf,SIZE -p MARIADBD`` for
   ``--seconds`` per size; for each size, how many stacks end at an ``[unknown]`` root (the
   copied stack did not reach the thread's root: ``clone3`` for MariaDB's threads);
2. ``wallflame collect --pid MARIADBD --max-data-mb-per-s 4``: the plan's expected MB/s
   against what perf wrote (``meta.json`` ``postprocess``), and the wake-up recorder's bytes
   per switch (``raw/wake.data.*``).

    .venv/bin/python benchmarks/lab/sched_stack_bytes.py [--seconds 5] [--clients 8]

It holds ``/tmp/wallflame-measure.lock``.
"""

from __future__ import annotations

import argparse
import collections
import fcntl
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.servers import MariaDB, require  # noqa: E402

LOCK = "/tmp/wallflame-measure.lock"
SIZES = (8192, 16384, 32768, 65528)  # 65528: perf's largest


def roots(data: Path) -> collections.Counter[str]:
    """The outermost frame of every stack in ``data``."""
    text = subprocess.run(["perf", "script", "-i", str(data), "-F", "tid,ip,sym"],
                          capture_output=True, text=True, check=False).stdout
    out: collections.Counter[str] = collections.Counter()
    for block in text.split("\n\n"):
        lines = [ln.split(None, 1) for ln in block.strip().split("\n")[1:]]
        frames = [parts[1] if len(parts) > 1 else "?" for parts in lines if parts]
        if frames:
            out[frames[-1]] += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=8)
    args = ap.parse_args()
    require("mariadb")
    work = Path(tempfile.mkdtemp(prefix="wallflame-stack-bytes-"))
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with MariaDB(tables=2, table_size=2000, base_dir=work) as db:
            db.prepare()
            db.sysbench("oltp_update_index", args.clients, 3)
            load = db.sysbench_start("oltp_update_index", args.clients,
                                     len(SIZES) * (args.seconds + 3) + args.seconds + 40)
            time.sleep(2)
            for size in SIZES:
                data = work / f"dwarf{size}.data"
                subprocess.run(["perf", "record", "-q", "-e", "sched:sched_switch", "-F", "20",
                                "--call-graph", f"dwarf,{size}", "-p", str(db.pid), "-o",
                                str(data), "--", "sleep", f"{args.seconds:g}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
                r = roots(data)
                n = sum(r.values())
                unknown = sum(c for k, c in r.items() if "unknown" in k)
                print(f"dwarf,{size:<6d} {n:5d} stacks, {unknown:4d} with an [unknown] root; "
                      f"roots: {dict(r.most_common(3))}", flush=True)
                data.unlink(missing_ok=True)
            run = work / "run"
            r2 = subprocess.run([sys.executable, "-m", "wallflame", "collect", "--pid",
                                 str(db.pid), "-d", f"{args.seconds:g}", "-o", str(run),
                                 "--max-data-mb-per-s", "4"], cwd=ROOT, capture_output=True,
                                text=True, check=False)
            load.stop()
    if r2.returncode != 0:
        sys.exit(f"sched_stack_bytes: wallflame collect failed: {r2.stderr[-400:]}")
    meta = json.loads((run / "meta.json").read_text())
    plan, cost = meta["postprocess"]["budget"], meta["postprocess"]["cost"]
    window_s = meta["window"]["window_ns"] / 1e9
    from wallflame.collect import packed  # the chunks are kept compressed once read
    wake = sum(max(0, packed.size_unpacked(p)) for p in (run / "raw").glob("wake.data.*"))
    print(f"budget 4 MB/s: plan {plan['expected_mb_per_s']} MB/s at {plan['switches_per_s']:,} "
          f"switches/s (stacks {plan['stack_hz']}/s per thread, over budget: "
          f"{plan['over_budget']}); perf wrote {cost['perf_data_mb'] / window_s:.2f} MB/s; "
          f"wake-ups {wake / window_s / max(1, plan['switches_per_s']):.0f} bytes a switch; "
          f"losses {meta.get('losses') or 'none'}")
    print(f"(run directory kept: {run})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
