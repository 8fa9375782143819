"""The kernel's own account of where a process's threads' wall time went (a ``bpftrace``
program on scheduler and system-call tracepoints), grouped as a collect's classes are: shared
by ``tests/live/test_class_truth_live.py`` and ``benchmarks/class_truth.py``.

Each off-CPU interval gets the class its system call gives, by the snapshot folder's table
(``wallflame.fold.procrecords.SYSCALL_CLASS``; the D state is ``io``); a futex wait is a lock
wait (``mutex``) when it is glibc's low-level lock's (``FUTEX_WAIT`` for the value 2), else
``futex wait``.  Waiting for a CPU is ``runqueue``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path

from wallflame.collect.target import read_text
from wallflame.fold.procrecords import SYS_FUTEX, SYSCALL_CLASS

#: Where tracefs is mounted.
TRACEFS = Path("/sys/kernel/tracing")


def mount_tracefs() -> None:
    """Mount tracefs where a machine has not yet (a fresh boot may not: perf mounts it the
    first time it records a tracepoint, bpftrace does not and says "tracepoint not found").
    Not root, or where it cannot be mounted: left as it is, for bpftrace to say why."""
    if (TRACEFS / "events").is_dir() or os.geteuid() != 0:
        return
    subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


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
            if cls != "runnable":  # ``runqueue_s`` above
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
