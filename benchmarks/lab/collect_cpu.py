#!/usr/bin/env python3
"""Where a collect's own CPU goes: every thread of ``wallflame collect`` and of every process it
starts (``perf record``, ``perf script``, their ``addr2line``, the guard), read by ``bpftrace``
at each one's exit.

    .venv/bin/python benchmarks/lab/collect_cpu.py               # spin8 --heartbeat-hz 2000, 10 s
    .venv/bin/python benchmarks/lab/collect_cpu.py --pid PID -- --off-cpu sched
    .venv/bin/python benchmarks/lab/collect_cpu.py --mariadb   # MariaDB under sysbench, 32 clients
    .venv/bin/python benchmarks/lab/collect_cpu.py --mariadb --keep DIR # and keep the run directory

Without ``--pid`` it starts ``samples/bin/spin8 --threads 8 --heartbeat-hz 2000`` (the
8-thread CPU-bound target with a 2 kHz heartbeat) and stops it afterwards; with ``--mariadb``
it starts MariaDB on a private port and data directory (``benchmarks/servers.py``) under
sysbench ``oltp_update_index`` with 32 clients, lets it run 10 s, collects, and stops both.
It prints the CPU (the scheduler's run time, ``se.sum_exec_runtime`` at
``sched_process_exit``: the clock ``CLOCK_THREAD_CPUTIME_ID`` and ``schedstat`` read; user +
system time is sampled at the scheduler tick, which charges a whole tick to the thread it
finds running and so misplaces threads that run a few hundred microseconds at a time, as the
owner sampler does) of each process and thread of the collect, largest first, and the
total, beside the collect's own figures from ``meta.json`` ``postprocess``.  Needs root and
``bpftrace``; timed collects run with bytecode cached (``servers.wallflame_env``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.servers import MariaDB, wallflame_env, warm_bytecode  # noqa: E402
from tests.classtruth import mount_tracefs  # noqa: E402

PROGRAM = r"""
tracepoint:syscalls:sys_enter_execve { printf("E %d ", pid); join(args->argv); }
tracepoint:sched:sched_process_fork { printf("F %d %d\n", args->parent_pid, args->child_pid); }
tracepoint:sched:sched_process_exit {
  printf("X %d %d %llu %s\n", pid, tid, curtask->se.sum_exec_runtime, comm);
}
"""


def descendants(root: int, forks: dict[int, set[int]]) -> set[int]:
    seen, todo = {root}, [root]
    while todo:
        for child in forks.get(todo.pop(), ()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pid", type=int, help="collect from this process (default: start spin8)")
    ap.add_argument("--mariadb", action="store_true",
                    help="start MariaDB under sysbench and collect from it")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--keep", type=Path, help="move the collect's run directory here")
    ap.add_argument("collect_args", nargs="*", help="more wallflame collect options (after --)")
    a = ap.parse_args()
    if shutil.which("bpftrace") is None:
        print("collect_cpu.py: bpftrace not installed (apt-get install bpftrace)",
              file=sys.stderr)
        return 6
    warm_bytecode(ROOT)
    work = Path(tempfile.mkdtemp(prefix="wallflame-collect-cpu-"))
    target = None
    servers = contextlib.ExitStack()
    try:
        if a.mariadb:
            db = servers.enter_context(MariaDB())
            db.prepare()
            load = db.sysbench_start(seconds=a.duration + 120)
            servers.callback(load.stop)
            time.sleep(10)  # the server warmed up under its load
            a.pid = db.pid
        if a.pid is None:
            subprocess.run(["make", "-s", "-C", str(ROOT / "samples"), "bin/spin8"], check=True)
            target = subprocess.Popen([str(ROOT / "samples/bin/spin8"), "--threads", "8",
                                       "--duration", str(a.duration + 120), "--report-ms",
                                       "1000", "--heartbeat-hz", "2000"],
                                      stdout=subprocess.DEVNULL)
        pid = a.pid or target.pid  # type: ignore[union-attr]
        (work / "exit.bt").write_text(PROGRAM)
        mount_tracefs()
        with open(work / "exit.log", "w") as log:
            tracer = subprocess.Popen(["bpftrace", str(work / "exit.bt")], stdout=log,
                                      stderr=subprocess.STDOUT)
            time.sleep(3)  # bpftrace compiles and attaches
            run = work / "run"
            collect = subprocess.Popen([sys.executable, "-m", "wallflame", "collect", "--pid",
                                        str(pid), "--duration", f"{a.duration:g}", "-o",
                                        str(run), *a.collect_args], cwd=str(ROOT),
                                       env=wallflame_env(), stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
            code = collect.wait()
            time.sleep(1)
            tracer.terminate()
            tracer.wait(30)
        if code != 0:
            print(f"collect_cpu.py: the collect exited {code}", file=sys.stderr)
            return 1
        forks: dict[int, set[int]] = collections.defaultdict(set)
        rows = []
        argv: dict[int, str] = {}  # what each process ran, its last exec
        for line in (work / "exit.log").read_text(errors="replace").splitlines():
            f = line.split()
            if len(f) >= 3 and f[0] == "E" and f[1].isdigit():
                argv[int(f[1])] = " ".join(f[2:])
            elif len(f) == 3 and f[0] == "F":
                forks[int(f[1])].add(int(f[2]))
            elif len(f) >= 5 and f[0] == "X":
                rows.append((int(f[1]), int(f[2]), int(f[3]), " ".join(f[4:])))
        mine = descendants(collect.pid, forks)
        print(f"CPU of a {a.duration:g} s collect of PID {pid} "
              f"{' '.join(a.collect_args) or '(defaults)'}, per thread or process, seconds:")
        total = 0
        for p, tid, ns, comm in sorted(rows, key=lambda r: -r[2]):
            if p not in mine:
                continue
            total += ns
            if ns >= 5_000_000:
                kind = "process" if p != collect.pid and p == tid else \
                    ("main thread" if tid == collect.pid else "thread")
                what = argv.get(tid, "") if kind == "process" else ""
                print(f"{ns / 1e9:8.3f}  {comm:16s} {kind} {tid}  {what[:90]}")
        print(f"{total / 1e9:8.3f}  total")
        pp = json.loads((run / "meta.json").read_text()).get("postprocess") or {}
        cost, fin = pp.get("cost") or {}, pp.get("finish") or {}
        print(f"meta.json postprocess: perf script {cost.get('perf_script_cpu_s')} s over "
              f"{cost.get('chunks')} chunks, folding thread {cost.get('thread_cpu_s')} s, "
              f"finish {fin.get('cpu_s')} s")
        # the same threads by their own clocks (CLOCK_THREAD_CPUTIME_ID), to set beside the
        # kernel's figures above
        print(f"meta.json postprocess.samplers_cpu_s: {pp.get('samplers_cpu_s')}")
    finally:
        if target is not None:
            target.terminate()
            target.wait(30)
        servers.close()
        if a.keep is not None and (work / "run").is_dir():
            shutil.move(str(work / "run"), str(a.keep))
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
