#!/usr/bin/env python3
"""What recording the scheduler costs a busy server, recorder by recorder.

MariaDB (``benchmarks/servers.py``: 4 tables of 10,000 rows) under one long sysbench
``oltp_update_index`` (or ``--test oltp_read_write``) run with 32 clients.  Windows of
``--window`` seconds alternate, in a rotating order, between no recorder and each recorder
below; each window's transactions/s is the mean of sysbench's per-second figures inside it
(its first 1.5 s left out).  Prints, per recorder, the median over the rounds and the loss
against the median with no recorder.

Recorders (every one is a process of its own beside the server, as a collect's are):

* ``p_sched``: what ``wallflame collect --off-cpu sched`` records today: ``-p PID``,
  ``--switch-events`` and ``sched:sched_switch`` with a DWARF stack at 1 per second per thread;
* ``p_switch`` / ``a_switch``: switch events alone, for the process / on every CPU;
* ``p_tp`` / ``a_tp``: ``sched:sched_switch`` at every switch without a stack, for the
  process / on every CPU;
* ``bpf_acct``: ``bpftrace`` on ``sched:sched_switch`` and ``sched:sched_wakeup``, adding each
  of the server's threads' blocked and runnable time up in kernel maps (no record per switch,
  no stack), printed once at the end;
* ``bpf_offcpu``: ``bpftrace`` as a scheduler recorder with in-kernel aggregation would be
  (``OFFCPU``): each thread's runnable time, its blocked time by length stratum (factors of
  4, as the sampled split's strata), and, at every ``--bpf-every``-th switch out of a thread,
  its kernel and user (frame-pointer) stacks, summed by stack and stratum in kernel maps; the
  user stacks printed as addresses (``BPFTRACE_NO_USER_SYMBOLS``), to be symbolised by the
  reader.  ``--check-offcpu`` holds its per-thread runnable and blocked time against the
  kernel's (``/proc/PID/task/TID/schedstat``) on ``samples/bin/queue``;
* ``wf_*+bpf_offcpu``: a whole collect (``COLLECTS``) with ``bpf_offcpu`` running beside it,
  attached before the collect starts and stopped after it: what a collect whose scheduler
  evidence came from the kernel's maps would cost, with ``wf_none`` (on-CPU samples alone);
* ``wf_rec_sched``, ``wf_rec_sched_nostack``, ``wf_rec_wake``: one of a collect's own perf
  recorders alone, from the commands it builds (``collect.perf``): the scheduler's per thread
  (``-p``: switch events and ``sched:sched_switch`` with DWARF stacks at 3 a second per thread,
  as the budget sets it on this server; or the same without stacks), as a launched command's
  collect records it, and the wake-ups';
* ``wf_rec_sched_wide``: the scheduler's perf as an attached collect records it, on every CPU
  (every task's switch records, the server's switches out with a DWARF stack at the period that
  takes as many stacks as 3 a second per thread);
* ``idle_burn`` / ``idle_burn1``: no recorder, two (one) busy loops at ``SCHED_IDLE`` for the
  window: what CPU the collect's post-processing takes at that policy costs the server, whatever
  the work is;
* ``idle_duty<N>``: no recorder, one loop at ``SCHED_IDLE`` busy N ms of every 10 (N% of a
  CPU at most: the CPU a collect's own processes take, ``machine.collect_cpus``, without
  their work);
* ``wf_*_shm``: the same collect with its run directory in ``/dev/shm`` (memory), not on the
  disk the server's data directory is on;
* ``p_cpu`` / ``p_cpu199``: the on-CPU samples alone, ``perf record -e cpu-clock -F 499|199
  --call-graph fp -p PID``; ``a_cpu`` / ``a_cpu99``: the same on every CPU (``-a``, at 499 or
  99 Hz), as an attached collect takes them;
* ``eustack1``: ``eu-stack -p PID``, then a second's sleep, in a loop: the peer's snapshot;
* ``snap1``: the collect's own snapshots alone, once a second: its libdw backend
  (``collect.snapshots.LibdwBackend``, under ``SCHED_FIFO`` while threads are stopped, as in a
  collect) on every thread, with no perf, watch or folding beside it;
* ``proc_poll``: no recorder, what the collect's watch and memory sampler read, alone: every
  thread's ``/proc/PID/task/TID/schedstat`` and ``/proc/PID/status``, four times a second;
* ``a_cpu99_script``: ``a_cpu99`` in 10 s chunks (``--switch-output=10s``), each chunk read by
  ``perf script`` at ``SCHED_IDLE`` and nice 19 as it closes, as the collect's folding process
  reads them (perf script's default fields, not the collect's; no folding; the last chunk,
  written as perf ends, is not read);
* ``wf_base`` (with ``--base CHECKOUT``): a default collect run from another checkout, to
  compare a change with the code before it in the same sysbench run; ``--base`` given again
  adds ``wf_base2``, ``wf_base3``... (one checkout each, in the order given);
* ``wf_*``: a whole ``wallflame collect --pid PID --duration WINDOW`` with the options in
  ``COLLECTS`` (``wf_default``: none), its window read from its ``meta.json`` (what comes
  before and after the window, the rate read and the post-processing, is left out of the
  window's figure, and ends before the next window starts).  Together they split what a
  default collect costs over its parts.

    .venv/bin/python benchmarks/lab/sched_recorders.py --window 8 --rounds 6
    .venv/bin/python benchmarks/lab/sched_recorders.py \
        --recorders wf_default,wf_no_owners,wf_sched,wf_none

It holds ``/tmp/wallflame-measure.lock``; the server's own figures move by 10-30% from window
to window on a shared 2-core machine, so quote medians of several rounds.
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
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.server_collect import collect as run_collect  # noqa: E402
from benchmarks.servers import (  # noqa: E402
    THROUGHPUT_TABLE_SIZE,
    THROUGHPUT_TABLES,
    MariaDB,
    require,
    warm_bytecode,
)
from tests.classtruth import mount_tracefs  # noqa: E402
from wallflame.collect import budget, threads  # noqa: E402
from wallflame.collect import perf as wf_perf  # noqa: E402

LOCK = "/tmp/wallflame-measure.lock"
RECORDERS = ("p_sched", "p_switch", "a_switch", "p_tp", "a_tp", "a_tp_filt", "a_tp_dwarf",
             "bpf_acct", "bpf_offcpu", "wf_rec_sched", "wf_rec_sched_nostack", "wf_rec_sched_wide",
             "wf_rec_wake", "idle_burn", "idle_burn1", "p_cpu", "p_cpu199", "a_cpu", "a_cpu99",
             "eustack1", "proc_poll", "a_cpu99_script", "snap1")
#: Whole collects: the extra options of each.
COLLECTS = {
    "wf_default": [],
    "wf_no_owners": ["--owner-rate", "0"],
    "wf_owners_5": ["--owner-rate", "5"],
    "wf_sched": ["--off-cpu", "sched"],
    "wf_pmp": ["--off-cpu", "pmp"],
    "wf_snapshots": ["--off-cpu", "pmp", "--owner-rate", "0", "--pmp-rate", "2"],
    "wf_pmp2": ["--off-cpu", "pmp", "--pmp-rate", "2"],
    "wf_pmp1_owners5": ["--off-cpu", "pmp", "--pmp-rate", "1", "--owner-rate", "5"],
    "wf_pmp_half": ["--pmp-rate", "0.5"],
    "wf_light": ["--pmp-rate", "0.5", "--owner-rate", "5"],
    "wf_none": ["--off-cpu", "none"],
    "wf_none199": ["--off-cpu", "none", "-F", "199"],
    "wf_none99": ["--off-cpu", "none", "-F", "99"],
    "wf_light_no_owners": ["--off-cpu", "pmp", "--pmp-rate", str(budget.LIGHT_PMP_HZ),
                           "--owner-rate", "0"],
    "wf_light_owners2": ["--off-cpu", "pmp", "--pmp-rate", str(budget.LIGHT_PMP_HZ),
                         "--owner-rate", "2"],
    "wf_light_owners5": ["--off-cpu", "pmp", "--pmp-rate", str(budget.LIGHT_PMP_HZ),
                         "--owner-rate", "5"],
    "wf_light_owners5_nostop": ["--off-cpu", "pmp", "--pmp-rate", str(budget.LIGHT_PMP_HZ),
                                "--owner-rate", "5", "--no-holder-stacks"],
    "wf_light99": ["--off-cpu", "pmp", "--pmp-rate", str(budget.LIGHT_PMP_HZ), "--owner-rate",
                   str(budget.LIGHT_OWNER_HZ), "-F", "99"],
    "wf_light199": ["--off-cpu", "pmp", "--pmp-rate", str(budget.LIGHT_PMP_HZ), "--owner-rate",
                    str(budget.LIGHT_OWNER_HZ), "-F", "199"],
}

#: Per thread of the process given as $1: blocked time up to its wake-up, then runnable to its
#: switch-in; preempted (state running: 0, or 0x100 when the kernel marks a preemption):
#: runnable to its switch-in.
ACCOUNTING = r"""
tracepoint:sched:sched_switch
{
  if (pid == $1) {
    @s[args->prev_pid] = nsecs;
    @r[args->prev_pid] = args->prev_state == 0 ? 1 : 0;
  }
  $t = @s[args->next_pid];
  if ($t) {
    $w = @w[args->next_pid];
    if (@r[args->next_pid]) {
      @runq[args->next_pid] = sum(nsecs - $t);
    } else {
      if ($w > $t) {
        @blk[args->next_pid] = sum($w - $t);
        @runq[args->next_pid] = sum(nsecs - $w);
      } else {
        @blk[args->next_pid] = sum(nsecs - $t);
      }
    }
    delete(@s[args->next_pid]);
  }
}
tracepoint:sched:sched_wakeup
{
  if (@s[args->pid]) { @w[args->pid] = nsecs; }
}
"""

#: ``ACCOUNTING``'s sums with the blocked time by stratum (a wait of d ns is in stratum s when
#: d >> 10 needs s shifts by 2 to reach 0), and at every $2-th switch out of a thread its
#: kernel and user stacks, the wait's length added to that stack's sum in its stratum.
OFFCPU = r"""
BEGIN { @out[0] = (uint64)0; delete(@out[0]); }
tracepoint:sched:sched_wakeup, tracepoint:sched:sched_wakeup_new
{
  if (@out[args->pid]) { @wk[args->pid] = nsecs; }
}
tracepoint:sched:sched_switch
{
  if (pid == $1) {
    $p = args->prev_pid;
    @out[$p] = nsecs;
    @run[$p] = (args->prev_state & 0xff) == 0 ? 1 : 0;
    @n[$p] = @n[$p] + 1;
    if (@n[$p] >= $2) { @n[$p] = 0; @ks[$p] = kstack; @us[$p] = ustack; @smp[$p] = 1; }
  }
  $q = args->next_pid;
  $o = @out[$q];
  if ($o) {
    if (@run[$q]) {
      @runq[$q] = sum(nsecs - $o);
    } else {
      $w = @wk[$q];
      $e = nsecs;
      if ($w > $o) { $e = $w; @runq[$q] = sum(nsecs - $w); }
      $d = $e - $o;
      $b = 0; $x = $d >> 10;
      while ($x > 0) { $x = $x >> 2; $b++; }
      @blk[$q, $b] = sum($d);
      @cnt[$q, $b] = count();
      if (@smp[$q]) { @stk[$q, $b, @ks[$q], @us[$q]] = sum($d); @smp[$q] = 0; }
    }
    delete(@out[$q]);
  }
}
END { clear(@out); clear(@run); clear(@n); clear(@ks); clear(@us); clear(@smp); clear(@wk); }
"""
BPF = "+bpf_offcpu"


def command(kind: str, pid: int, out: Path, window: float, program: Path) -> list[str]:
    perf = ["perf", "record", "-q", "-k", "mono", "-m", "2M", "-o", str(out)]
    sleep = ["--", "sleep", f"{window:g}"]
    if kind == "p_sched":
        return [*perf, "-e", "sched:sched_switch", "-F", "1", "--switch-events",
                "--call-graph", "dwarf,8192", "-p", str(pid), *sleep]
    if kind in ("idle_burn", "idle_burn1"):  # busy loops the kernel runs only on an idle CPU
        loops = 2 if kind == "idle_burn" else 1
        return ["chrt", "-i", "0", "timeout", f"{window:g}", sys.executable, "-c",
                "import os\n"
                f"for _ in range({loops} - 1):\n    if os.fork() == 0: break\n"
                "while True: pass\n"]
    if kind.startswith("idle_duty"):  # N ms busy of every 10, one thread, SCHED_IDLE
        busy = float(kind.removeprefix("idle_duty")) / 1000
        return ["chrt", "-i", "0", "timeout", f"{window:g}", sys.executable, "-c",
                "import time\n"
                "while True:\n"
                f"    t = time.monotonic() + {busy!r}\n"
                "    while time.monotonic() < t: pass\n"
                f"    time.sleep({0.010 - busy!r})\n"]
    if kind in ("p_cpu", "p_cpu199"):  # the on-CPU samples alone, as the collect takes them
        hz = "199" if kind == "p_cpu199" else "499"
        return [*perf, "-e", "cpu-clock", "-F", hz, "--call-graph", "fp", "-p", str(pid),
                *sleep]
    if kind in ("a_cpu", "a_cpu99"):  # the same on every CPU, as an attached collect takes them
        hz = "99" if kind == "a_cpu99" else "499"
        return [*perf, "-e", "cpu-clock", "-F", hz, "--call-graph", "fp", "-a", *sleep]
    if kind == "proc_poll":  # what the collect's watch and memory sampler read, alone
        return ["timeout", f"{window:g}", sys.executable, "-c",
                "import glob, time\n"
                "while True:\n"
                f"    for f in glob.glob('/proc/{pid}/task/*/schedstat'):\n"
                "        try:\n"
                "            open(f).read()\n"
                "        except OSError:\n"
                "            pass\n"
                f"    open('/proc/{pid}/status').read()\n"
                "    time.sleep(0.25)\n"]
    if kind == "a_cpu99_script":  # a_cpu99 in 10 s chunks, each read by perf script at
        # SCHED_IDLE and nice 19 as it closes, as the collect's folding process reads them
        rec = " ".join([*perf, "-e", "cpu-clock", "-F", "99", "--call-graph", "fp", "-a",
                        "--switch-output=10s", *sleep])
        return ["sh", "-c",
                f"{rec} & r=$!; done=''; "
                f"while kill -0 $r 2>/dev/null; do sleep 1; "
                f"for c in {out}.2*; do [ -f \"$c\" ] || continue; "
                "case \" $done \" in *\" $c \"*) continue;; esac; "
                "chrt -i 0 nice -n 19 perf script -i \"$c\" >/dev/null 2>&1; "
                "done=\"$done $c\"; done; done; wait $r"]
    if kind == "snap1":  # the collect's own snapshots alone: its libdw backend once a second
        return [sys.executable, "-c",
                f"import os, sys, time\nsys.path.insert(0, {str(ROOT)!r})\n"
                "from wallflame.collect.snapshots import LibdwBackend\n"
                f"b = LibdwBackend({pid})\n"
                f"end = time.monotonic() + {window!r}\n"
                "while time.monotonic() < end:\n"
                "    t = time.monotonic()\n"
                f"    b.snapshot(5.0, [int(x) for x in os.listdir('/proc/{pid}/task')])\n"
                "    time.sleep(max(0.0, 1.0 - (time.monotonic() - t)))\n"
                "b.close()\n"]
    if kind == "eustack1":  # the peer's snapshot: eu-stack -p PID once a second, as pt-pmp does
        return ["timeout", f"{window:g}", "sh", "-c",
                f"while :; do eu-stack -p {pid} >/dev/null 2>&1; sleep 1; done"]
    if kind in ("p_switch", "a_switch"):
        who = ["-p", str(pid)] if kind == "p_switch" else ["-a"]
        return [*perf, "-e", "dummy", "--switch-events", *who, *sleep]
    if kind in ("p_tp", "a_tp"):
        who = ["-p", str(pid)] if kind == "p_tp" else ["-a"]
        return [*perf, "-e", "sched:sched_switch", "-c", "1", *who, *sleep]
    if kind in ("wf_rec_sched", "wf_rec_sched_nostack"):
        # the collect's own scheduler perf, as a budget sets it on this server (3 stacks a
        # second per thread), with its stacks or without any
        cmd = wf_perf.record_command(pid, out, wf_perf.sched_options(499, "dwarf", 3.0), window)
        if kind == "wf_rec_sched_nostack":
            at = cmd.index("--call-graph")
            del cmd[at:at + 2]
        return [*cmd[:-1], f"{window:g}"]  # perf's sleep: the window, not the collect's bound
    if kind in ("a_tp_filt", "a_tp_dwarf"):
        # every CPU, filtered in the kernel on the server's threads (and threads to come):
        # every switch into or out of one without a stack, or every 20th switch out of one
        # (per CPU) with a DWARF stack
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        f = threads.wake_filter(tids, threads.new_pid_ranges())
        if kind == "a_tp_filt":
            return [*perf, "-e", "sched:sched_switch", "--filter",
                    f"({f.replace('pid', 'prev_pid')})||({f.replace('pid', 'next_pid')})",
                    "-c", "1", "-a", *sleep]
        return [*perf, "-e", "sched:sched_switch", "--filter", f.replace("pid", "prev_pid"),
                "-c", "20", "--call-graph", "dwarf,32768", "-a", *sleep]
    if kind == "wf_rec_sched_wide":
        # the collect's own scheduler perf on every CPU (an attached collect's): every task's
        # switch records, and the server's switches out with a stack at the period that
        # takes 3 stacks a second per thread
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        opts = replace(wf_perf.sched_options(499, "dwarf", 3.0), system_wide=True,
                       stack_period=budget.stack_period(budget.switch_rates(pid), 3.0),
                       switch_filter=threads.wake_filter(tids, threads.new_pid_ranges(),
                                                         "prev_pid"))
        cmd = wf_perf.record_command(pid, out, opts, window)
        return [*cmd[:-1], f"{window:g}"]
    if kind == "wf_rec_wake":  # the collect's own wake-up perf, filtered on the threads
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
        cmd = wf_perf.wake_command(out, threads.wake_filter(tids, threads.new_pid_ranges()),
                                window)
        return [*cmd[:-1], f"{window:g}"]
    if kind == "bpf_acct":
        return ["timeout", "-s", "INT", f"{window:g}", "bpftrace", str(program), str(pid)]
    raise ValueError(kind)


def holder_stops(out: Path) -> list[float]:
    """Every lock-holder stop of a collect's owner sampler (``raw/owners.log``): from the
    owner's first frame read to its last, in ms (the time the holder was certainly stopped,
    every waiter of its lock waiting with it).  A probe shared by several waiters is counted
    once."""
    seen: set[str] = set()
    held: list[float] = []
    with contextlib.suppress(OSError), open(out / "raw" / "owners.log", encoding="utf-8") as f:
        for line in f:
            with contextlib.suppress(ValueError, TypeError, KeyError):
                rec = json.loads(line)
                probe = rec.get("holder")
                if not probe or not probe.get("stops"):
                    continue
                key = f"{rec['mono_ns']}:{rec['lock']}:{probe['tid']}"
                if key in seen:
                    continue
                seen.add(key)
                held.extend(float(s[1]) for s in probe["stops"])
    return held


def wallflame_window(pid: int, out: Path, window: float, extra: list[str],
                     root: Path = ROOT, stops: list[float] | None = None,
                     cpus: list[float] | None = None,
                     light: list[bool] | None = None) -> tuple[float, float]:
    """Run one collect (``server_collect.collect``); its window in this process's
    ``time.monotonic()``, or ``(0, -1)`` (no figure) when it wrote none.  ``stops``: the
    collect's lock-holder stops are added to it (``holder_stops``); ``cpus``: the CPUs its
    own processes took over the window (``meta.json`` ``machine.collect_cpus``)."""
    shutil.rmtree(out, ignore_errors=True)
    try:
        c = run_collect(pid, out, window, extra, root)
        if stops is not None:
            stops.extend(holder_stops(out))
        if cpus is not None and c["meta"].get("machine", {}).get("collect_cpus") is not None:
            cpus.append(float(c["meta"]["machine"]["collect_cpus"]))
        if light is not None:
            light.append(bool((c["meta"].get("postprocess", {}).get("light") or {})
                              .get("chosen")))
    except (RuntimeError, OSError, ValueError, KeyError):
        return 0.0, -1.0
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return c["start"], c["end"]


class Bpftrace:
    """A bpftrace program running beside the server, from its attaching to ``stop``."""

    def __init__(self, program: Path, args: list[str]) -> None:
        mount_tracefs()
        self.proc = subprocess.Popen(
            ["bpftrace", str(program), *args], stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "BPFTRACE_NO_USER_SYMBOLS": "1"})
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # "Attaching N probes..."

    def stop(self) -> tuple[int, int]:
        """Stop it (its maps printed and read); the bytes it printed, and the stacks among
        them (``@stk`` entries)."""
        self.proc.send_signal(signal.SIGINT)
        out = ""
        with contextlib.suppress(subprocess.TimeoutExpired):
            out = self.proc.communicate(timeout=120)[0] or ""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return len(out), out.count("@stk[")


def bpf_window(window: float, program: Path, args: list[str],
               printed: list[tuple[int, int]]) -> tuple[float, float]:
    """Run a bpftrace program for ``window`` seconds once it is attached (its start,
    compiling and attaching, about a second of CPU, is left out of the window as a
    collect's start is); its window in this process's ``time.monotonic()``.  What it
    printed (``Bpftrace.stop``) is added to ``printed``."""
    bt = Bpftrace(program, args)
    start = time.monotonic()
    time.sleep(window)
    end = time.monotonic()
    printed.append(bt.stop())
    return start, end


SHM = "_shm"


def collect_kind(kind: str) -> str:
    """The collect a kind runs (``wf_default_shm``: ``wf_default`` with its run directory in
    ``/dev/shm``; ``wf_none+bpf_offcpu``: ``wf_none`` beside ``bpf_offcpu``)."""
    return kind.removesuffix(BPF).removesuffix(SHM)


def measure(kinds: list[str], window: float, rounds: int, work: Path, tables: int,
            table_size: int, bases: dict[str, Path] | None = None,
            base_args: list[str] | None = None,
            stops: dict[str, list[float]] | None = None,
            cpus: dict[str, list[float]] | None = None,
            bpf_every: int = 20,
            printed: dict[str, list[tuple[int, int]]] | None = None,
            lights: dict[str, list[bool]] | None = None,
            test: str = "oltp_update_index",
            by_round: dict[str, dict[int, float]] | None = None) -> dict[str, list[float]]:
    """Each kind's transactions a second, one figure per round.  ``printed``: per kind run
    with bpftrace, what bpftrace printed at each stop (bytes, stacks); ``by_round``: each
    kind's figures by round."""
    printed = {} if printed is None else printed
    program = work / "accounting.bt"
    program.write_text(ACCOUNTING)
    offcpu = work / "offcpu.bt"
    offcpu.write_text(OFFCPU)
    result: dict[str, list[float]] = {k: [] for k in kinds}
    marks: list[tuple[str, float, float, int]] = []
    with MariaDB(tables=tables, table_size=table_size, base_dir=work) as db:
        db.prepare()
        db.sysbench(test, 8, 5)  # warm the buffer pool
        # A collect also reads the rate first and post-processes after its window.
        total = rounds * sum(window + (63 if collect_kind(k) in COLLECTS
                                       or collect_kind(k) in (bases or {}) else 3)
                            for k in kinds) + 15
        load = db.sysbench_start(test, 32, total)
        time.sleep(5)
        for r in range(rounds):
            for i in range(len(kinds)):
                kind = kinds[(r + i) % len(kinds)]
                start = time.monotonic() - load.started
                if kind == "none":
                    time.sleep(window)
                elif kind in ("bpf_acct", "bpf_offcpu"):
                    s, e = (bpf_window(window, program, [str(db.pid)],
                                       printed.setdefault(kind, []))
                            if kind == "bpf_acct" else
                            bpf_window(window, offcpu, [str(db.pid), str(bpf_every)],
                                       printed.setdefault(kind, [])))
                    marks.append((kind, s - load.started, e - load.started, r))
                    time.sleep(2)
                    continue
                elif collect_kind(kind) in COLLECTS or collect_kind(kind) in (bases or {}):
                    # ``..._shm``: the run directory in memory (``/dev/shm``), not on the disk
                    # the server writes to; ``...+bpf_offcpu``: that recorder beside it
                    name = collect_kind(kind)
                    beside = (Bpftrace(offcpu, [str(db.pid), str(bpf_every)])
                              if kind.endswith(BPF) else None)
                    s, e = wallflame_window(db.pid, (Path("/dev/shm") if kind.endswith(SHM)
                                                     else work) / f"wallflame-{kind}", window,
                                            COLLECTS.get(name, base_args or []),
                                            (bases or {}).get(name, ROOT),
                                            None if stops is None else
                                            stops.setdefault(kind, []),
                                            None if cpus is None else
                                            cpus.setdefault(kind, []),
                                            None if lights is None else
                                            lights.setdefault(kind, []))
                    if beside is not None:
                        printed.setdefault(kind, []).append(beside.stop())
                    marks.append((kind, s - load.started, e - load.started, r))
                    time.sleep(2)
                    continue
                else:
                    out = work / f"{kind}.data"
                    subprocess.run(command(kind, db.pid, out, window, program),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   check=False, timeout=window + 120)
                    out.unlink(missing_ok=True)
                marks.append((kind, start, time.monotonic() - load.started, r))
                time.sleep(2)
        per_second = load.intervals()
        load.stop()  # sysbench can take minutes to stop on SIGINT: killed after 30 s
        with contextlib.suppress(subprocess.TimeoutExpired, RuntimeError):
            load.result(30)
    for kind, s, e, r in marks:
        inside = [tps for t, tps in per_second if s + 1.5 <= t <= e]
        if inside:
            result[kind].append(statistics.mean(inside))
            if by_round is not None:
                by_round.setdefault(kind, {})[r] = result[kind][-1]
    return result


def check_offcpu(seconds: float = 10.0) -> int:
    """``OFFCPU`` against the kernel: ``samples/bin/queue`` (a producer, 8 consumers on a
    mutex-bound queue) for ``seconds`` with the program attached; per thread, its runnable
    time against the run-queue delay of ``schedstat``, its blocked time against what the
    kernel leaves of the window (window - run time - run-queue delay), both in points of the
    window.  bpftrace's window is longer by the second between its attaching and the
    kernel's first reading, and a wait in progress when it stops is in neither sum: a
    thread's figures can differ by one of its waits over the window.  Exit 1 when a thread
    is off by more than 2 points."""
    queue = ROOT / "samples" / "bin" / "queue"
    if not queue.exists():
        print(f"sched_recorders: {queue} not built (make -C samples)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="wallflame-offcpu-"))
    target = subprocess.Popen([str(queue), "--duration", f"{seconds + 15:g}"],
                              stdout=subprocess.DEVNULL)
    try:
        (work / "offcpu.bt").write_text(OFFCPU)
        time.sleep(0.5)
        bt = Bpftrace(work / "offcpu.bt", [str(target.pid), "20"])
        time.sleep(1.0)  # attached; every thread's current wait then ends inside the window

        def listing() -> dict[int, tuple[int, int]]:
            out = {}
            for t in os.listdir(f"/proc/{target.pid}/task"):
                with contextlib.suppress(OSError, ValueError):
                    run, delay, _ = map(int, Path(f"/proc/{target.pid}/task/{t}/schedstat")
                                        .read_text().split())
                    out[int(t)] = (run, delay)
            return out

        t0, s0 = time.monotonic_ns(), listing()
        time.sleep(seconds)
        s1, t1 = listing(), time.monotonic_ns()
        bt.proc.send_signal(signal.SIGINT)
        text = bt.proc.communicate(timeout=120)[0] or ""
    finally:
        target.terminate()
        target.wait()
        shutil.rmtree(work, ignore_errors=True)
    runq = {int(t): int(v) for t, v in re.findall(r"^@runq\[(\d+)\]: (\d+)", text, re.M)}
    blocked: dict[int, int] = {}
    for t, _, v in re.findall(r"^@blk\[(\d+), (\d+)\]: (\d+)", text, re.M):
        blocked[int(t)] = blocked.get(int(t), 0) + int(v)
    # bpftrace's window: from its attaching (1 s before t0) to its stop (just after t1)
    bpf_ns = t1 - t0 + 1_000_000_000
    window = t1 - t0
    worst = 0.0
    print(f"samples/bin/queue, {window / 1e9:.3f} s; points of the window, kernel / bpftrace")
    for tid in sorted(set(s0) & set(s1)):
        ran, delay = s1[tid][0] - s0[tid][0], s1[tid][1] - s0[tid][1]
        k_rq, k_blk = 100 * delay / window, 100 * (window - ran - delay) / window
        b_rq, b_blk = 100 * runq.get(tid, 0) / bpf_ns, 100 * blocked.get(tid, 0) / bpf_ns
        worst = max(worst, abs(k_rq - b_rq), abs(k_blk - b_blk))
        print(f"  {tid}: on-CPU {100 * ran / window:5.1f}  runnable {k_rq:5.1f} / {b_rq:5.1f}"
              f"  blocked {k_blk:5.1f} / {b_blk:5.1f}")
    print(f"largest difference {worst:.2f} points")
    return 0 if worst <= 2.0 else 1


def paired_loss(values: dict[int, float], none: dict[int, float]) -> float | None:
    """The median over rounds of each round's loss against that round's window with no
    profiler (a fraction), over the rounds that have both; None without two such rounds."""
    losses = [1 - v / none[r] for r, v in values.items() if none.get(r)]
    return statistics.median(losses) if len(losses) > 1 else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--test", default="oltp_update_index",
                    choices=["oltp_update_index", "oltp_read_write"],
                    help="the sysbench test the server runs")
    ap.add_argument("--recorders", default=",".join(RECORDERS),
                    help=f"comma-separated, of: {', '.join([*RECORDERS, *COLLECTS])}")
    ap.add_argument("--tables", type=int, default=THROUGHPUT_TABLES)
    ap.add_argument("--table-size", type=int, default=THROUGHPUT_TABLE_SIZE)
    ap.add_argument("--base", type=Path, action="append", default=[],
                    help="another checkout: adds wf_base, a default collect of that checkout's "
                         "code, to compare a change with the code before it in one run")
    ap.add_argument("--check-offcpu", action="store_true",
                    help="hold bpf_offcpu's sums against the kernel's schedstat on "
                         "samples/bin/queue, and exit (no MariaDB)")
    ap.add_argument("--bpf-every", type=int, default=20,
                    help="bpf_offcpu: the stacks of every N-th switch out of a thread")
    ap.add_argument("--base-args", default="",
                    help="options given to the collects of every --base checkout")
    args = ap.parse_args()
    if args.check_offcpu:
        if shutil.which("bpftrace") is None:
            print("sched_recorders: bpftrace not installed (apt-get install bpftrace)",
                  file=sys.stderr)
            return 2
        return check_offcpu()
    if min(args.tables, args.table_size, args.rounds, args.bpf_every) < 1 \
            or not 0 < args.window < 1e6:
        ap.error("--tables, --table-size, --rounds and --bpf-every must be at least 1, "
                 "--window above 0")
    for b in args.base:
        if not (b / "wallflame" / "__init__.py").is_file():
            ap.error(f"--base {b}: not a checkout of wallflame (no wallflame/__init__.py)")
    require("mariadb")
    kinds = ["none", *[k for k in args.recorders.split(",") if k]]
    for k in kinds:
        if k != "none" and k not in RECORDERS and collect_kind(k) not in COLLECTS and not (
                args.base and collect_kind(k).startswith("wf_base")) and not (
                k.startswith("idle_duty") and k.removeprefix("idle_duty").isdigit()
                and 0 < int(k.removeprefix("idle_duty")) < 10):
            ap.error(f"--recorders: {k} is none of {', '.join([*RECORDERS, *COLLECTS])}, "
                     "idle_duty1..idle_duty9")
    bases = {("wf_base" if i == 0 else f"wf_base{i + 1}"): b for i, b in enumerate(args.base)}
    kinds.extend(bases)
    if shutil.which("bpftrace") is None:
        gone = [k for k in kinds if k.startswith("bpf_") or k.endswith(BPF)]
        if gone:
            print("sched_recorders: bpftrace not installed (apt-get install bpftrace): "
                  f"{', '.join(gone)} left out", file=sys.stderr)
            kinds = [k for k in kinds if k not in gone]
    work = Path(tempfile.mkdtemp(prefix="wallflame-recorders-"))
    try:
        with open(LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            # inside the lock: the imports are a burst of CPU another sitting would see
            for root in (ROOT, *bases.values()):
                warm_bytecode(root)
            stops: dict[str, list[float]] = {}
            cpus: dict[str, list[float]] = {}
            printed: dict[str, list[tuple[int, int]]] = {}
            lights: dict[str, list[bool]] = {}
            by_round: dict[str, dict[int, float]] = {}
            result = measure(kinds, args.window, args.rounds, work, args.tables,
                             args.table_size, bases, args.base_args.split(), stops, cpus,
                             args.bpf_every, printed, lights, args.test, by_round)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(result["none"]) if result["none"] else None
    print(f"MariaDB {args.test}, 32 clients, {args.tables} tables of "
          f"{args.table_size:,} rows, {args.rounds} rounds of {args.window:g} s")
    for kind, values in result.items():
        if not values:
            print(f"{kind:9s} no figures")
            continue
        med = statistics.median(values)
        loss = "" if kind == "none" or not base else f"  loss {100 * (1 - med / base):+.1f}%"
        paired = None if kind == "none" else paired_loss(by_round.get(kind, {}),
                                                         by_round.get("none", {}))
        if paired is not None:
            # each round against the window with no profiler of the same round: the server's
            # drift over the sitting (minutes) cancels, its moves between windows do not
            loss += f" (paired {100 * paired:+.1f}%)"
        print(f"{kind:9s} median {med:8,.0f} tps{loss}   rounds: "
              + ", ".join(f"{v:,.0f}" for v in values))
        if cpus.get(kind):
            print(f"{'':9s} the collect's own CPUs over its window: "
                  + ", ".join(f"{c:.2f}" for c in cpus[kind]))
        if any(lights.get(kind, [])):
            print(f"{'':9s} light (no scheduler recording, ``postprocess.light``): "
                  + ", ".join("yes" if x else "no" for x in lights[kind]))
        if printed.get(kind):
            print(f"{'':9s} bpftrace printed (KB, stacks): "
                  + ", ".join(f"{b / 1e3:,.0f} KB {n:,}" for b, n in printed[kind]))
    for kind, held in stops.items():
        if held:
            held.sort()
            q = statistics.quantiles(held, n=100) if len(held) > 1 else held * 99
            print(f"{kind:9s} lock-holder stops (first frame to last): {len(held)}, median "
                  f"{statistics.median(held):.3f} ms, p99 {q[98]:.3f} ms, max {held[-1]:.3f} "
                  f"ms, total {sum(held):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
