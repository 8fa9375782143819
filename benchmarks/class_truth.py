#!/usr/bin/env python3
"""Where a busy server's threads' wall time went, from the kernel, against a collect's classes.

A ``bpftrace`` program (tracepoints only: ``sched:sched_switch``, ``sched:sched_wakeup``,
``raw_syscalls:sys_enter/sys_exit``) follows every thread of the target from the moment it
attaches: each interval off a CPU, cut where the thread was woken (blocked before, waiting for
a CPU after), with the system call the thread had entered when it switched out (and, for a
futex, its operation and value).  Nothing is sampled and nothing is lost: the sums are made in
the kernel, and only intervals longer than 100 ms are printed one by one (the rest are summed
per second of their end, so a window's edges are placed to the second at worst for those).

Each off-CPU interval gets the class its system call gives, by the same table the snapshot
folder uses for what /proc shows (``wallflame.fold.procrecords.SYSCALL_CLASS``; the D state is
``io``); a futex wait is a lock wait (``mutex``) when it is glibc's low-level lock's
(``FUTEX_WAIT`` for the value 2), else ``futex wait`` (a condition variable, a semaphore, a
rwlock or a latch: the classes ``condvar``, ``rwlock`` and ``lock`` together).  Waiting for a
CPU is ``runqueue``.

During that time one ``wallflame collect --duration WINDOW`` of the target runs (its
defaults, or the options after ``--``), and its ``summary.json`` per-class totals (summed over
the threads, as a share of their wall time, the classes grouped as above) are printed beside
the kernel's over the collect's own window, and the largest difference in points.  The
kernel's figures also cover every thread's whole window (the coverage column): a check of the
program itself.

    .venv/bin/python benchmarks/class_truth.py [--tests oltp_update_index,oltp_read_write]
        [--window 60] [--rounds 1] [--threads 32] [--keep DIR] [-- COLLECT OPTIONS]
    .venv/bin/python benchmarks/class_truth.py --replay DIR

``--replay DIR`` compares the rounds a sitting kept with ``--keep DIR`` again, each run folded
anew from its ``raw/`` by this checkout (``wallflame finish``), against the same kernel trace:
a change to the folding, measured on the same minutes.

Needs root, ``bpftrace``, ``mariadb-server`` and ``sysbench`` (it says which are missing).
Holds ``/tmp/wallflame-measure.lock`` as the other server benchmarks do.  bpftrace costs the
server some throughput (every system call and switch of it is traced): the loss is measured
by ``server_collect.py``, not here.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.server_collect import LOCK, collect  # noqa: E402
from benchmarks.servers import (  # noqa: E402
    THROUGHPUT_TABLE_SIZE,
    THROUGHPUT_TABLES,
    MariaDB,
    Missing,
    first_line,
    require,
    warm_bytecode,
)
from tests.classtruth import GROUPS, Truth, collect_groups, kernel_groups, shares  # noqa: E402


def compare(run: Path, kernel: dict[int, list[float]], window_s: float) -> float:
    k, c, cover = shares(run, kernel, window_s)
    mine = collect_groups(run)
    tids = sorted(mine)
    print(f"\n== {run.name}: {len(tids)} threads, {window_s:.1f} s; share of the threads' "
          "wall time, points")
    print(" " * 10 + "".join(f"{g:>11}" for g in GROUPS))
    for name, row in (("kernel", k), ("collect", c)):
        print(f"{name:>10}" + "".join(f"{100 * x:11.2f}" for x in row))
    diff = max(abs(100 * (a - b)) for a, b in zip(c, k, strict=True))
    print(f"largest difference {diff:.2f} points; the kernel's coverage of each thread "
          f"{min(cover):.3f}-{max(cover):.3f} ({sum(1 for t in tids if t in kernel)} of "
          f"{len(tids)} threads seen)")
    worst = sorted(tids, key=lambda t: -sum(abs(a - b) for a, b in
                                            zip(mine[t], kernel.get(t, [0.0] * len(GROUPS)),
                                                strict=True)))[:5]
    for t in worst:
        print(f"   thread {t}: kernel " + " ".join(f"{x:.1f}" for x in kernel.get(t, []))
              + " / collect " + " ".join(f"{x:.1f}" for x in mine[t]))
    return diff


def replay(keep: Path) -> int:
    """``--replay``: each kept round's run folded again from its ``raw/`` by this checkout,
    and compared with its kernel trace (``NAME-kernel.out``, ``NAME-kernel.first.json``)."""
    traces = sorted(keep.glob("*-kernel.out"))
    if not traces:
        print(f"class_truth.py: --replay {keep}: no kept round (NAME-kernel.out) there",
              file=sys.stderr)
        return 2
    diffs: list[float] = []
    for out in traces:
        name = out.name[:-len("-kernel.out")]
        run = keep / name
        try:
            first = {int(k): int(v) for k, v in json.loads(
                (keep / f"{name}-kernel.first.json").read_text()).items()}
            r = subprocess.run([sys.executable, "-m", "wallflame", "finish", str(run)],
                               cwd=ROOT, capture_output=True, text=True, timeout=600,
                               check=False)
            if r.returncode != 0:
                raise RuntimeError(r.stderr.strip() or f"exit {r.returncode}")
            w = json.loads((run / "meta.json").read_text())["window"]
        except (OSError, ValueError, KeyError, RuntimeError,
                subprocess.TimeoutExpired) as e:
            print(f"class_truth.py: --replay {name}: {first_line(e)}", file=sys.stderr)
            return 2
        per = kernel_groups(out.read_text(), first, w["mono_start_ns"], w["mono_end_ns"])
        diffs.append(compare(run, per, w["window_ns"] / 1e9))
    print("\nlargest difference per round, points: " + ", ".join(f"{d:.2f}" for d in diffs))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--tests", default="oltp_update_index,oltp_read_write")
    ap.add_argument("--window", type=float, default=60)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--keep", type=Path, default=None)
    ap.add_argument("--replay", type=Path, default=None, metavar="DIR",
                    help="compare the rounds a sitting kept in DIR (--keep) again, each run "
                         "finished anew by this checkout's wallflame (wallflame finish), "
                         "against the same kernel trace")
    ap.add_argument("collect_args", nargs="*", help="wallflame collect options (after --)")
    a = ap.parse_args()
    if a.replay is not None:
        return replay(a.replay)
    try:
        require("mariadb")
    except Missing as e:
        print(f"class_truth.py: {e}", file=sys.stderr)
        return 6
    if shutil.which("bpftrace") is None:
        print("class_truth.py: needs bpftrace (apt-get install bpftrace)", file=sys.stderr)
        return 6
    keep = a.keep or Path(tempfile.mkdtemp(prefix="wallflame-class-truth-"))
    keep.mkdir(parents=True, exist_ok=True)
    diffs: dict[str, list[float]] = {}
    try:
        for test in a.tests.split(","):
            with open(LOCK, "w") as lk:
                fcntl.flock(lk, fcntl.LOCK_EX)
                # inside the lock: the imports are a burst of CPU another sitting would see
                warm_bytecode(ROOT)
                with MariaDB(THROUGHPUT_TABLES, THROUGHPUT_TABLE_SIZE) as db:
                    db.prepare()
                    job = db.sysbench_start(test, a.threads,
                                            int(a.rounds * (a.window + 90) + 30))
                    try:
                        time.sleep(5)
                        for i in range(a.rounds):
                            run = keep / f"{test}-{i}"
                            truth = Truth(db.pid, keep, f"{test}-{i}-kernel")
                            try:
                                time.sleep(2)
                                c = collect(db.pid, run, a.window, a.collect_args)
                                time.sleep(1)
                            finally:
                                # bpftrace left behind would tax every switch and system
                                # call of the machine
                                text = truth.stop()
                            w = c["meta"]["window"]
                            per = kernel_groups(text, truth.first, w["mono_start_ns"],
                                                w["mono_end_ns"])
                            diffs.setdefault(test, []).append(
                                compare(run, per, w["window_ns"] / 1e9))
                    finally:
                        job.stop()
                        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                            job.result(60)
        print("\nlargest difference per round, points: "
              + "; ".join(f"{t}: " + ", ".join(f"{d:.2f}" for d in ds)
                          for t, ds in diffs.items()))
    finally:
        if a.keep is None:
            shutil.rmtree(keep, ignore_errors=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
