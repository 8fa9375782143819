"""The CI gate on a real server: MariaDB under sysbench (``benchmarks/servers.py``).

One private MariaDB (by default 4 tables of 10,000 rows; ``--tables 1 --table-size 100``
makes the rows hot, so that more clients wait on each other's row locks) is profiled with
``wallflame collect --pid --max-data-mb-per-s 4`` while sysbench ``oltp_update_index`` runs
against it.  Each round
collects, in a rotating order: two unchanged runs (``base-a``, ``base-b``: 8 clients), one
with 4x the clients (``clients4x``: 32) and one with ``innodb_flush_log_at_trx_commit=0``
(``flush0``: no log flush per commit, a faster server; set with ``SET GLOBAL`` and reset
after the run).  The work done in the window (sysbench's per-second transaction counts,
integrated over it, with progress points) is written to each run's ``work.json``.  Then,
with default settings:

* unchanged pairs (``base-a`` vs ``base-b``, both directions) must pass;
* ``base-a`` vs ``clients4x`` must fail, naming the wait that grew (with hot rows: the row
  locks, class ``lock``);
* ``base-a`` vs ``flush0`` must not be judged a regression.

Usage (the collection holds ``/tmp/wallflame-measure.lock``, about 6 minutes for 4 rounds)::

    .venv/bin/python benchmarks/lab/check_gate_mariadb.py --rounds 4 --out /tmp/gate-mariadb
    .venv/bin/python benchmarks/lab/check_gate_mariadb.py --out /tmp/gate-mariadb \
        --judge-only --noise

Series: every round's ``base-a`` against every round's ``base-b``, ``clients4x``, ``flush0``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.servers import MariaDB, which  # noqa: E402

LOCK = "/tmp/wallflame-measure.lock"
KINDS = ("base-a", "base-b", "clients4x", "flush0")
CLIENTS = {"base-a": 8, "base-b": 8, "clients4x": 32, "flush0": 8}
#: A stack at every switch of this server is 100-240 MB a second, and perf then loses a
#: quarter to two thirds of the events (runs that cannot be compared): the budget that
#: docs/collecting.md advises for a busy server.
DATA_BUDGET_MB_PER_S = 4


def sql(db: MariaDB, statement: str) -> None:
    client = which("mariadb")
    assert client is not None
    subprocess.run([client, "--no-defaults", f"--socket={db.socket}", "-uroot", "-e",
                    statement], check=True, capture_output=True, timeout=60)


def profile(db: MariaDB, run: Path, kind: str, seconds: float) -> None:
    """One run: sysbench in the background, the server profiled for ``seconds`` after a
    warm-up, the work done in the window written to ``work.json``."""
    if kind == "flush0":
        sql(db, "SET GLOBAL innodb_flush_log_at_trx_commit=0")
    try:
        start_ns = time.monotonic_ns()
        load = db.sysbench_start("oltp_update_index", CLIENTS[kind], seconds + 6)
        time.sleep(2)
        cmd = [sys.executable, "-m", "wallflame", "collect", "--pid", str(db.pid),
               "--duration", str(seconds), "-o", str(run),
               "--max-data-mb-per-s", str(DATA_BUDGET_MB_PER_S)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False,
                           cwd=ROOT)
        tps = load.result(120)
        if r.returncode != 0:
            sys.exit(f"check_gate_mariadb: {' '.join(cmd)} failed: {r.stderr[-500:]}")
    finally:
        if kind == "flush0":
            sql(db, "SET GLOBAL innodb_flush_log_at_trx_commit=1")
    # sysbench reports every second: (seconds since its start, transactions/s)
    done = 0.0
    progress = [[start_ns, 0.0]]
    for t, rate in load.intervals():
        done += rate
        progress.append([start_ns + int(t * 1e9), done])
    window = json.loads((run / "raw" / "capture.json").read_text()).get("window", {})
    (run / "work.json").write_text(json.dumps({
        "work": done, "unit": "transactions", "progress": progress,
        "sysbench_tps": tps, "clients": CLIENTS[kind], "window_ns": window.get("window_ns")}))
    # the window's own work, from the progress points, replaces "done" when check reads the
    # slices (wallflame.progress.work_in_slices)


def collect(out: Path, rounds: int, seconds: float, tables: int, table_size: int) -> None:
    """All rounds under one hold of the measurement lock (about 6 minutes for 4 rounds):
    starting and filling the server loads the machine too."""
    out.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with MariaDB(tables=tables, table_size=table_size) as db:
            db.prepare()
            db.sysbench("oltp_update_index", 8, 5)  # warm the buffer pool
            for r in range(rounds):
                order = [KINDS[(r + i) % len(KINDS)] for i in range(len(KINDS))]
                for kind in order:
                    run = out / f"{kind}-{r:02d}"
                    if not (run / "work.json").exists():
                        subprocess.run(["rm", "-rf", str(run)], check=True)
                        profile(db, run, kind, seconds)
                print(f"round {r + 1}/{rounds} collected ({', '.join(order)})", flush=True)


def check(a: Path, b: Path, tmp: Path) -> tuple[int, dict[str, object]]:
    out = tmp / "check.json"
    cmd = [sys.executable, "-m", "wallflame", "check", str(a), str(b), "--html", "",
           "--json", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)
    if r.returncode not in (0, 1, 7):
        sys.exit(f"check_gate_mariadb: {' '.join(cmd)} failed: {r.stderr}")
    return r.returncode, json.loads(out.read_text())


def describe(data: dict[str, object]) -> str:
    q = {x["quantity"]: x for x in data["quantities"]}  # type: ignore[attr-defined]
    parts = []
    for key in ("wait:mutex", "wait:rwlock", "wait:lock", "wait:io", "cpu_per_work"):
        if key in q:
            x = q[key]
            parts.append(f"{x['name']} {x['delta_text']} [{x['low_text']}, {x['high_text']}]"
                         f"{' REGRESSION' if x['regression'] else ''}")
    frames = [x for x in q.values() if x["kind"] in ("share", "per_work") and x["regression"]]
    parts += [f"frame {x['name']} {x['delta_text']} [{x['low_text']}, {x['high_text']}]"
              for x in frames[:3]]
    bad = [f"{r['name']}: {r['message']}" for r in data["results"]  # type: ignore[attr-defined]
           if r["status"] == "inconclusive"]
    return "; ".join(parts + bad)


def judge(out: Path) -> None:
    runs = {k: sorted(out.glob(f"{k}-[0-9][0-9]")) for k in KINDS}
    n = min(len(v) for v in runs.values())
    tmp = out / "_check"
    tmp.mkdir(exist_ok=True)
    tally: dict[str, list[int]] = {}
    for r in range(n):
        a, b = runs["base-a"][r], runs["base-b"][r]
        for name, x, y in (("unchanged", a, b), ("unchanged", b, a),
                           ("4x clients", a, runs["clients4x"][r]),
                           ("flush_log_at_trx_commit=0", a, runs["flush0"][r])):
            code, data = check(x, y, tmp)
            tally.setdefault(name, [0, 0, 0])[{0: 0, 1: 1, 7: 2}[code]] += 1
            q = {z["quantity"]: z for z in data["quantities"]}  # type: ignore[attr-defined]
            lock = next((c["name"] for res in data["results"]  # type: ignore[attr-defined]
                         if res["name"] == "wait_mutex" for c in res["changes"][1:2]), "")
            named = f" (lock named: {lock})" if code == 1 and lock else ""
            failed = [res["name"] for res in data["results"]  # type: ignore[attr-defined]
                      if res["status"] == "regression"]
            if failed:
                named += f" [failed: {', '.join(failed)}]"
            grown = [res["message"].split("; most grown wait: ")[1]
                     for res in data["results"]  # type: ignore[attr-defined]
                     if res["status"] == "regression" and "; most grown wait: " in res["message"]]
            moved = [res["name"] for res in data["results"]  # type: ignore[attr-defined]
                     if "time moved into this class" in res["message"]]
            named += "".join(f" [grown: {g}]" for g in grown)
            named += f" [moved, not judged a regression: {', '.join(moved)}]" if moved else ""
            mutex = "mutex judged a regression" if q.get("wait:mutex", {}).get("regression") \
                else ""
            print(f"  {name}: {x.name} vs {y.name}: exit {code} {mutex}{named}; "
                  f"{describe(data)}", flush=True)
    for name, kind in (("unchanged series", "base-b"), ("4x clients series", "clients4x"),
                       ("flush_log_at_trx_commit=0 series", "flush0")):
        sides = []
        for k in ("base-a", kind):
            d = tmp / f"series-{k}"
            d.mkdir(exist_ok=True)
            for run in runs[k][:n]:
                if not (d / run.name).is_symlink():
                    (d / run.name).symlink_to(run.resolve())
            sides.append(d)
        code, data = check(sides[0], sides[1], tmp)
        tally.setdefault(name, [0, 0, 0])[{0: 0, 1: 1, 7: 2}[code]] += 1
        print(f"  {name}: {n} base-a vs {n} {kind}: exit {code}; {describe(data)}", flush=True)
    print()
    for name, (ok, reg, inc) in tally.items():
        print(f"{name}: {ok + reg + inc} checks: {reg} regression, {ok} pass, "
              f"{inc} inconclusive")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/wallflame-gate-mariadb"))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0, help="collection window per run")
    ap.add_argument("--tables", type=int, default=4)
    ap.add_argument("--table-size", type=int, default=10_000)
    ap.add_argument("--judge-only", action="store_true")
    ap.add_argument("--noise", action="store_true",
                    help="also print how much the unchanged runs differ from one another")
    args = ap.parse_args()
    if not args.judge_only:
        collect(args.out, args.rounds, args.seconds, args.tables, args.table_size)
    judge(args.out)
    if args.noise:
        from benchmarks.check_gate import between_runs

        between_runs(sorted(p for k in ("base-a", "base-b")
                            for p in args.out.glob(f"{k}-[0-9][0-9]")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
