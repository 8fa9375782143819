#!/usr/bin/env python3
"""Lock attribution on a real server: MariaDB under sysbench, checked against the raw evidence.

Starts MariaDB (``benchmarks/servers.py``: private data directory and port), loads it with
sysbench (32 clients by default), runs ``wallflame collect --pid`` against ``mariadbd``
``--runs`` times, and for every lock entry of every run's ``summary.json`` checks, from the
run's own ``raw/`` files:

* **waiters**: every thread listed as a waiter of lock L was observed waiting on L (a record
  of ``raw/owners.log`` or a snapshot's ``# wallflame-proc`` line naming L for that thread);
* **total**: the lock's wait is the sum of its waiters' (no wait of another thread in it);
* **holders**: every holder stack is one the owner sampler confirmed for L (the owner stopped
  while the lock still named it: ``lock_evidence`` of L), and its count is the number of
  confirmed observations with that stack;
* **counts**: each share is printed with the observations behind it.

It prints one line per lock per run and a JSON summary at the end::

    .venv/bin/python benchmarks/lab/locks_mariadb.py [--runs 3] [--seconds 8] [--threads 32]
        [--test oltp_read_write] [--release-sites] [--collect-args '--sched-stack-hz 0']

Run it under ``flock /tmp/wallflame-measure.lock`` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.servers import MariaDB, require  # noqa: E402


def observed(raw: Path) -> set[tuple[int, str]]:
    """(waiter tid, lock) pairs the owner sampler and the snapshots saw."""
    out: set[tuple[int, str]] = set()
    log = raw / "owners.log"
    if log.exists():
        for line in log.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("lock"):
                out.add((int(rec["tid"]), str(rec["lock"])))
    snaps = raw / "snapshots.log"
    if snaps.exists():
        for line in snaps.read_text(errors="replace").splitlines():
            if line.startswith("# wallflame-proc ") and '"lock"' in line:
                rec = json.loads(line[len("# wallflame-proc "):])
                out.add((int(rec["tid"]), str(rec["lock"])))
    return out


def check_run(run: Path) -> dict[str, Any]:
    summary = json.loads((run / "summary.json").read_text())
    meta = json.loads((run / "meta.json").read_text())
    evidence = (meta.get("profile") or {}).get("extra", {}).get("lock_evidence") or {}
    seen = observed(run / "raw")
    problems: list[str] = []
    rows = []
    for lk in summary["locks"]:
        name = lk["lock"]
        unobserved = [w["tid"] for w in lk["waiters"] if (w["tid"], name) not in seen]
        if unobserved:
            problems.append(f"{name}: waiters never observed on it: {unobserved}")
        if abs(sum(w["s"] for w in lk["waiters"]) - lk["wait_s"]) > 1e-5 * max(1, len(
                lk["waiters"])):
            problems.append(f"{name}: wait total is not its waiters' sum")
        ev = evidence.get(name) or {}
        confirmed: dict[str, int] = {}
        for _, _, stack, n in ev.get("holders") or []:
            confirmed[stack] = confirmed.get(stack, 0) + int(n)
        for h in lk["holders"]:
            n = confirmed.get(h["stack"])
            if n is None:
                problems.append(f"{name}: holder {h['tid']} with an unconfirmed stack")
            elif n != h["count"]:
                problems.append(f"{name}: holder stack count {h['count']} != {n}")
        rows.append({"lock": name, "wait_s": lk["wait_s"], "waiters": len(lk["waiters"]),
                     "observations": lk["observations"], "held_confirmed": lk["held_confirmed"],
                     "held_confirmed_s": lk["held_confirmed_s"],
                     "not_caught": lk["holder_not_caught"]["reasons"],
                     "holders": [(h["tid"], h["stack"].rsplit(";", 1)[-1], h["count"],
                                  h.get("share")) for h in lk["holders"]],
                     "call_sites": [s["frame"] for s in lk["call_sites"]][:3],
                     "released_from": [(r["frame"], r["count"]) for r in
                                       lk["released_from"]["sites"]][:3]})
    lock_wait = sum(t["wait"]["mutex"] + t["wait"]["rwlock"] for t in summary["threads"])
    identified = sum(lk["wait_s"] for lk in summary["locks"])
    owners = json.loads((run / "raw" / "capture.json").read_text()).get("owners") or {}
    return {"locks": rows, "problems": problems, "mutex_rwlock_wait_s": round(lock_wait, 3),
            "identified_s": round(identified, 3),
            "unidentified": [(u["call_site"], u["s"], len(u["waiters"]))
                             for u in summary.get("unidentified_lock_waits", [])][:5],
            "probe_pause": owners.get("pause"), "probes": owners.get("probes")}


def _share(x: dict[str, Any]) -> str:
    if "share" in x:
        return f"{100 * x['share']:.0f}% [{100 * x['low']:.0f}-{100 * x['high']:.0f}%] " \
               f"({x['count']} of {x['of']})"
    return f"{x['count']} of {x['of']} observations"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--test", default="oltp_read_write")
    ap.add_argument("--release-sites", action="store_true")
    ap.add_argument("--collect-args", default="",
                    help="more options for wallflame collect, e.g. '--sched-stack-hz 0'")
    args = ap.parse_args()
    require("mariadb")
    results = []
    with MariaDB() as db, tempfile.TemporaryDirectory(prefix="wf-locks-") as tmp:
        db.prepare()
        job = db.sysbench_start(args.test, threads=args.threads,
                                seconds=args.runs * (args.seconds + 90) + 30)
        time.sleep(5)  # the load reaches its steady state
        for i in range(args.runs):
            run = Path(tmp) / f"run{i}"
            cmd = [sys.executable, "-m", "wallflame", "collect", "--pid", str(db.pid),
                   "--duration", f"{args.seconds:g}", "-o", str(run)]
            if args.release_sites:
                cmd.append("--release-sites")
            cmd += args.collect_args.split()
            r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
            if r.returncode != 0:
                print(f"run {i}: collect failed: {r.stderr.strip()[-300:]}", file=sys.stderr)
                continue
            res = check_run(run)
            results.append(res)
            print(f"run {i}: mutex+rwlock wait {res['mutex_rwlock_wait_s']} s, on identified "
                  f"locks {res['identified_s']} s, {len(res['locks'])} locks, problems: "
                  f"{len(res['problems'])}; probes {res['probes']}, probe stop "
                  f"{res['probe_pause']}")
            for row in res["locks"]:
                print(f"  {row['lock'][:60]}: waited {row['wait_s']:.3f} s by "
                      f"{row['waiters']} threads ({row['observations']} observations), "
                      f"confirmed holder {row['held_confirmed_s']:.3f} s "
                      f"[{_share(row['held_confirmed'])}], not caught {row['not_caught']}")
                for tid, leaf, n, share in row["holders"][:3]:
                    print(f"    held by {tid} in {leaf[:60]}: {n} observations"
                          f"{f' ({100 * share:.0f}%)' if share is not None else ''}")
                if row["released_from"]:
                    print(f"    released from {row['released_from']}")
            for p in res["problems"]:
                print(f"  PROBLEM {p}")
            print(f"  lock not identified (top): {res['unidentified']}")
        job.stop()
    print(json.dumps({"runs": len(results),
                      "problems": sum(len(r["problems"]) for r in results)}))
    return 1 if any(r["problems"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
