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
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
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
    mount_tracefs,
    require,
    warm_bytecode,
)
from wallflame.collect.target import read_text  # noqa: E402
from wallflame.fold.procrecords import SYS_FUTEX, SYSCALL_CLASS  # noqa: E402

#: The groups compared, by code in the program's output (0: on a CPU).
GROUPS = ("on_cpu", "mutex", "futex wait", "io", "poll", "sleep", "other", "runqueue")
ON, MUTEX, FUTEX, IO, POLL, SLEEP, OTHER, RUNQ = range(len(GROUPS))
#: A collect's classes, as grouped here.
COLLECT_GROUPS = {"mutex": MUTEX, "rwlock": FUTEX, "lock": FUTEX, "condvar": FUTEX, "io": IO,
                  "poll": POLL, "sleep": SLEEP, "other": OTHER}
#: An off-CPU interval of a thread that has entered no system call since the tracing began:
#: still in the one /proc showed then (``Truth.first``), or in none.
BEFORE = len(GROUPS)
OUTSIDE = 1_000_000
#: ``restart_syscall``: how a timed wait interrupted by a signal or a ptrace stop (a
#: snapshot's) goes on; /proc then shows it instead of the call it continues.
SYS_RESTART = 219
#: Intervals longer than this are printed one by one (ns).
LONG_NS = 100_000_000


def program() -> str:
    """The bpftrace program; ``$1`` is the target's PID."""
    by_group: dict[int, list[int]] = defaultdict(list)
    for nr, cls in sorted(SYSCALL_CLASS.items()):
        by_group[GROUPS.index(cls)].append(nr)
    # @sc holds the system call's number plus one (OUTSIDE: not in one; none: its thread
    # has entered none since the tracing began)
    tests = "\n".join(
        f"        {'if' if i == 0 else 'else if'} ("
        + " || ".join(f"$s == {nr + 1}" for nr in nrs) + f") {{ $c = {g}; }}"
        for i, (g, nrs) in enumerate(sorted(by_group.items())))
    emit = """
      $d = $e - $o;
      if ($d > {long}) {{ printf("L %d %d %lld %lld\\n", $q, {cls}, $o, $e); }}
      else {{ @sum[$q, {cls}, $e / 1000000000] = sum($d); }}"""
    return f"""
BEGIN {{ printf("READY %lld\\n", nsecs); }}
tracepoint:raw_syscalls:sys_enter /pid == $1/
{{
  if (args->id == {SYS_RESTART}) {{
    @sc[tid] = @last[tid];  // restart_syscall: the call a signal or a stop interrupted
  }} else {{
    @sc[tid] = args->id + 1;
    @last[tid] = args->id + 1;
  }}
  if (args->id == {SYS_FUTEX}) {{ @fop[tid] = args->args[1]; @fval[tid] = args->args[2]; }}
}}
tracepoint:raw_syscalls:sys_exit /pid == $1/ {{ @sc[tid] = {OUTSIDE}; }}
tracepoint:sched:sched_wakeup, tracepoint:sched:sched_wakeup_new
{{
  if (@out[args->pid]) {{ @wk[args->pid] = nsecs; }}
}}
tracepoint:sched:sched_switch
{{
  $now = nsecs;
  if (pid == $1) {{
    $p = args->prev_pid;
    @seen[$p] = 1;
    $i = @in[$p];
    $q = $p; $o = $i; $e = $now;{emit.format(long=LONG_NS, cls=ON)}
    $st = args->prev_state & 0xff;
    if ($st & 0x30) {{ delete(@out[$p]); }} else {{ @out[$p] = $now; }}  // 0x30: exited
    $c = {RUNQ};
    if ($st != 0) {{
      if ($st & 2) {{ $c = {IO}; }}
      else {{
        $s = @sc[$p];
        $c = $s == 0 ? {BEFORE} : {OTHER};
        if ($s == {SYS_FUTEX + 1}) {{
          $c = ((@fop[$p] & 0x7f) == 0 && @fval[$p] == 2) ? {MUTEX} : {FUTEX};
        }}
{tests}
      }}
    }}
    @cls[$p] = $c;
  }}
  $q = args->next_pid;
  if (@seen[$q] == 0) {{ @seen[$q] = 1; printf("F %d %lld\\n", $q, $now); }}
  @in[$q] = $now;
  $o = @out[$q];
  if ($o) {{
    $c = @cls[$q];
    $e = $now;
    if ($c == {RUNQ}) {{{emit.format(long=LONG_NS, cls=RUNQ)}
    }} else {{
      $w = @wk[$q];
      if ($w > $o) {{
        $e = $w;{emit.format(long=LONG_NS, cls="$c")}
        $o = $w; $e = $now;{emit.format(long=LONG_NS, cls=RUNQ)}
      }} else {{{emit.format(long=LONG_NS, cls="$c")}
      }}
    }}
    delete(@out[$q]);
  }}
}}
END
{{
  printf("END %lld\\n", nsecs);
  print(@out); print(@cls); print(@wk); print(@sum); print(@seen);
  clear(@out); clear(@cls); clear(@wk); clear(@sum); clear(@sc); clear(@last); clear(@fop);
  clear(@fval); clear(@seen); clear(@in);
}}
"""


_MAP = re.compile(r"^@(\w+)\[([\d, ]+)\]: (\d+)$")


class Truth:
    """The kernel's intervals of one process's threads, from ``start`` to ``stop``."""

    def __init__(self, pid: int, work: Path, name: str = "classes") -> None:
        self.pid = pid
        path = work / f"{name}.bt"
        path.write_text(program())
        self.out = work / f"{name}.out"
        mount_tracefs()
        self.proc = subprocess.Popen(
            ["bpftrace", str(path), str(pid)], stdout=self.out.open("w"),
            stderr=subprocess.PIPE, text=True,
            env={**os.environ, "BPFTRACE_NO_USER_SYMBOLS": "1",
                 "BPFTRACE_MAP_KEYS_MAX": "1000000", "BPFTRACE_PERF_RB_PAGES": "1024"})
        deadline = time.monotonic() + 60
        while "READY" not in self.out.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"bpftrace did not start: {self.proc.stderr.read()[-800:]}"
                                   if self.proc.stderr else "bpftrace did not start")
            time.sleep(0.1)
        # what each thread was doing as the tracing began, for the part of its first
        # interval before it (a thread blocked since before it is seen only when it wakes)
        self.first = read_threads(pid)
        (work / f"{name}.first.json").write_text(json.dumps(self.first))

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=300)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return self.out.read_text()


def read_threads(pid: int) -> dict[int, int]:
    """Every thread's group from /proc now: its state and, asleep, its system call."""
    out = {}
    for name in os.listdir(f"/proc/{pid}/task"):
        base = f"/proc/{pid}/task/{name}"
        try:
            stat = Path(base, "stat").read_text()
            call = Path(base, "syscall").read_text().split()
        except OSError:
            continue
        state = stat[stat.rindex(")") + 2]
        if state == "R":
            out[int(name)] = ON  # running or waiting for a CPU: its switch says which
        elif state == "D":
            out[int(name)] = IO
        elif (read_text(f"{base}/wchan") or "").startswith("io_wq_worker"):
            # an idle io_uring worker (``iou-wrk-N``): it makes no system call of its own (its
            # syscall file shows its creator's ``io_uring_enter``), so no trace event will
            out[int(name)] = OTHER
        elif call and call[0].isdigit():
            nr = int(call[0])
            if nr == SYS_RESTART:  # the call it continues, by where it sleeps
                wchan = Path(base, "wchan").read_text()
                out[int(name)] = (FUTEX if wchan.startswith("futex") else
                                  SLEEP if "nanosleep" in wchan
                                  or wchan.startswith("do_syscall_64") else
                                  POLL if "poll" in wchan or "select" in wchan else OTHER)
            elif nr == SYS_FUTEX:
                op, val = int(call[2], 16), int(call[3], 16)
                out[int(name)] = MUTEX if (op & 0x7F) == 0 and val == 2 else FUTEX
            else:
                out[int(name)] = GROUPS.index(SYSCALL_CLASS.get(nr, "other"))
        else:
            out[int(name)] = OTHER
    return out


def kernel_groups(text: str, first: dict[int, int], w0: int, w1: int
                  ) -> dict[int, list[float]]:
    """Per thread of ``first`` (and any seen later), the seconds of each group inside the
    window ``[w0, w1)`` (monotonic ns)."""
    per: dict[int, list[float]] = defaultdict(lambda: [0.0] * len(GROUPS))

    def resolve(tid: int, g: int) -> int:
        if g != BEFORE:
            return g
        g = first.get(tid, OTHER)  # the system call it was in as the tracing began
        return OTHER if g == ON else g

    def add(tid: int, g: int, a: int, b: int) -> None:
        g = resolve(tid, g)
        lo, hi = max(a, w0), min(b, w1)
        if hi > lo:
            per[tid][g] += (hi - lo) / 1e9

    ready = end = 0
    firsts: dict[int, int] = {}
    maps: dict[str, dict[tuple[int, ...], int]] = defaultdict(dict)
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "READY":
            ready = int(parts[1])
        elif parts[0] == "END":
            end = int(parts[1])
        elif parts[0] == "F":
            firsts[int(parts[1])] = int(parts[2])
        elif parts[0] == "L":
            tid, g, a, b = (int(x) for x in parts[1:5])
            add(tid, g, a or ready, b)
        elif (m := _MAP.match(line)) is not None:
            maps[m.group(1)][tuple(int(x) for x in m.group(2).split(","))] = int(m.group(3))
    for (tid, g, sec), ns in maps["sum"].items():
        # summed by the second it ended in: spread over that second, cut by the window
        a, b = sec * 1_000_000_000, (sec + 1) * 1_000_000_000
        inside = max(0, min(b, w1) - max(a, w0)) / 1e9
        per[tid][resolve(tid, g)] += ns / 1e9 * inside
    for tid, g in first.items():
        # off a CPU from the start until its first switch in (``F``: a thread whose first
        # switch was out was running, and its intervals say so from there)
        if g != ON and tid in firsts:
            add(tid, g, ready, firsts[tid])
        elif g != ON and (tid,) not in maps["seen"]:
            add(tid, g, ready, end)  # never ran while traced
    for (tid,), o in maps["out"].items():
        if not o:
            continue
        # still off a CPU at the end: its class, and woken perhaps
        g = maps["cls"].get((tid,), OTHER)
        wk = maps["wk"].get((tid,), 0)
        if g != RUNQ and wk > o:
            add(tid, g, o, wk)
            add(tid, RUNQ, wk, end)
        else:
            add(tid, g, o, end)
    return per


def collect_groups(run: Path) -> dict[int, list[float]]:
    s = json.loads((run / "summary.json").read_text())
    out = {}
    for t in s["threads"]:
        if not t.get("tid"):
            continue
        row = [0.0] * len(GROUPS)
        row[ON] = float(t.get("on_cpu_s", 0))
        row[RUNQ] = float(t.get("runqueue_s", 0))
        for cls, sec in t["wait"].items():
            row[COLLECT_GROUPS.get(cls, OTHER)] += float(sec)
        out[int(t["tid"])] = row
    return out


def shares(run: Path, kernel: dict[int, list[float]], window_s: float
           ) -> tuple[list[float], list[float], list[float]]:
    """Per group, the kernel's and the collect's seconds summed over the collect's threads as
    a share of their wall time; and the kernel's coverage of each thread's window."""
    mine = collect_groups(run)
    tids = sorted(mine)
    wall = window_s * len(tids)
    k = [sum(kernel[t][g] for t in tids if t in kernel) / wall for g in range(len(GROUPS))]
    c = [sum(mine[t][g] for t in tids) / wall for g in range(len(GROUPS))]
    # a thread that began or ended inside the window: over the part of it the collect says
    # it lived
    alive = {int(t["tid"]): float(t["alive_s"]) for t in
             json.loads((run / "summary.json").read_text())["threads"]
             if t.get("tid") and t.get("alive_s")}
    return k, c, [sum(kernel[t]) / alive.get(t, window_s) if t in kernel else 0.0
                  for t in tids]


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
