#!/usr/bin/env python3
"""What profiling costs the target: throughput loss and pause per snapshot, side by side.

Target: ``samples/bin/spin8`` (eight CPU-bound threads counting units of work).  Each
configuration runs the target for ``--seconds`` with the profiler attached for its whole life,
``--runs`` times, interleaved with the other configurations so that drift on a shared machine
hits all of them alike; each configuration's loss is taken against a no-profiler run made
just before it.  Printed per configuration: median throughput (work/s), median loss
against no profiler, pause per snapshot as the tool reports it (wallflame's measured pause;
for pt-pmp, the wall time of each gdb run), the *effective* pause (throughput loss x snapshot
interval: how long the whole process was in effect stopped per snapshot), the CPU the
profiler itself used (user + system time of all its processes per second of window, as a share
of one CPU: unlike throughput this does not depend on what else a shared machine runs), and
the ratio of each to pt-pmp's.

The *est.* column is a loss estimate that hardly depends on what else the machine runs
(``Meter``): the CPU the profiler took (its processes' user + system time over the window)
and the target's work per CPU-second of its workers with and without the profiler give the
loss the target would see with the machine to itself, 1 - (1 - P/C) x (e1/e0).  On a shared
machine it is the figure to trust; the throughput loss beside it is the direct measurement.

The *stop* column is measured on the target's side, independently of what a tool reports:
spin8's worker threads never block, so each is always either on a CPU or waiting in the run
queue, and the kernel counts both (``/proc/PID/task/TID/schedstat``).  Over the window,
wall time minus run time minus run-queue time is the time a worker was stopped by the
profiler; divided by the number of snapshots it is the stop per snapshot each thread saw
(median over the workers).  For gdb, which stops all threads together, it is the process's
pause; for libdw and eu-stack, which stop one thread at a time, it is each thread's own stop.

    .venv/bin/python benchmarks/overhead.py [--runs 3] [--seconds 5] [--rate 10]

Configurations: none; wallflame pmp backends libdw, eu-stack, gdb, gdb-batch at ``--rate``/s
(snapshots only: ``wallflame.collect.snapshots``); perf on-CPU at the default -F
(``wallflame collect --off-cpu none``); the full default ``wallflame collect`` (collection
only); pt-pmp at full speed (``--interval 0``) and at ``--interval 1``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rows import Row, row, write_rows  # noqa: E402
from benchmarks.servers import progress_rate  # noqa: E402
from wallflame.collect.plan import DEFAULTS, Request  # noqa: E402
from wallflame.collect.run import collect as wf_collect  # noqa: E402
from wallflame.collect.snapshots import SnapshotLoop, make_backend  # noqa: E402
from wallflame.collect.target import open_target, thread_states  # noqa: E402
from wallflame.rundir import OffCpu  # noqa: E402

SPIN8 = ROOT / "samples" / "bin" / "spin8"


def build() -> None:
    r = subprocess.run(["make", "-s", "-C", str(ROOT / "samples"), "bin/spin8"],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0 or not SPIN8.exists():
        SPIN8.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cc", "-O2", "-g", "-fno-omit-frame-pointer", "-pthread", "-o",
                        str(SPIN8), str(ROOT / "samples/overhead/spin8.c")], check=True)


class Result:
    def __init__(self) -> None:
        self.rate: float = 0.0      # work units per second while the profiler was attached
        self.pauses: list[float] = []  # per-snapshot pause in ms, as reported
        self.snapshots = 0
        self.span_s = 0.0           # how long the profiler was attached
        self.cpu_s = 0.0            # CPU time the profiler itself used (all its processes)
        self.cpu_mark = cpu_mark()
        self.stop_ms: float | None = None  # target-side stop per snapshot (median worker)
        self.meter: Meter | None = None
        self.window: tuple[float, float, float] | None = None  # s, profiler CPU s, target CPU s


Ticks = dict[int, tuple[int, int]]


def worker_ticks(pid: int) -> tuple[int, Ticks]:
    """Now (ns) and each worker thread's (run ns, run-queue ns) from schedstat."""
    out: Ticks = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        if int(tid) == pid:
            continue  # the main thread sleeps; only the always-runnable workers count
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                run, wait, _ = f.read().split()
        except (OSError, ValueError):
            continue
        out[int(tid)] = (int(run), int(wait))
    return time.monotonic_ns(), out


def stop_per_snapshot(before: tuple[int, Ticks], after: tuple[int, Ticks],
                      snapshots: int) -> float | None:
    """Median over workers of (wall - run - run-queue) / snapshots, in ms."""
    if snapshots <= 0:
        return None
    wall = after[0] - before[0]
    per = [(wall - (a[0] - before[1][t][0]) - (a[1] - before[1][t][1])) / snapshots / 1e6
           for t, a in after[1].items() if t in before[1]]
    return statistics.median(per) if per else None


_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def _tree_cpu_s(root: int, skip: int) -> float:
    """CPU seconds of ``root`` and its descendants (without ``skip``'s subtree): each live
    process's own time plus that of the children it has reaped."""
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split() if int(c) != skip]
        except (OSError, ValueError, IndexError):
            continue
        total += sum(int(x) for x in fields[11:15]) * _TICK_S  # utime stime cutime cstime
    return total


class Meter(threading.Thread):
    """Every 100 ms: the profiler's CPU (this process and its children, the target excluded,
    the meter's own time subtracted) and the target workers' CPU (schedstat).  Unlike
    throughput, both hardly depend on what else a shared machine runs, so they give a loss
    estimate that does not either: the target loses the CPU the profiler takes from it and
    whatever the profiler costs inside it (less work per CPU-second)."""

    def __init__(self, target: int) -> None:
        super().__init__(daemon=True)
        self.target = target
        self.points: list[tuple[int, float, int]] = []
        self.halt = threading.Event()
        self.start()

    def run(self) -> None:
        while True:
            prof = _tree_cpu_s(os.getpid(), self.target)
            run = sum(r for r, _ in worker_ticks(self.target)[1].values())
            # thread_time: all this meter has used so far (counted in this process's time)
            self.points.append((time.time_ns(), prof - time.thread_time(), run))
            if self.halt.wait(0.1):
                return

    def between(self, start_ns: int, end_ns: int) -> tuple[float, float, float] | None:
        """Seconds, profiler CPU seconds and target CPU seconds over the window."""
        self.halt.set()
        self.join()
        inside = [p for p in self.points if start_ns <= p[0] <= end_ns]
        if len(inside) < 2:
            return None
        (t0, c0, r0), (t1, c1, r1) = inside[0], inside[-1]
        return (t1 - t0) / 1e9, max(c1 - c0, 0.0), (r1 - r0) / 1e9


def estimated_loss(base: Result, res: Result) -> float | None:
    """Loss on a machine the target has to itself: 1 - (1 - P/C) x (e1/e0), where P is the
    profiler's CPU per second, C the CPUs and e the work per CPU-second of the target's
    workers with (e1) and without (e0) the profiler."""
    if base.window is None or res.window is None:
        return None
    (s0, _, r0), (s1, p1, r1) = base.window, res.window
    if r0 <= 0 or r1 <= 0:
        return None
    e0, e1 = base.rate / (r0 / s0), res.rate / (r1 / s1)
    return 1 - (1 - p1 / s1 / (os.cpu_count() or 1)) * (e1 / e0)


def cpu_mark() -> float:
    """User + system CPU seconds of this process and its reaped children.  The profiler's
    own cost, unlike throughput, does not depend on what else the machine is running."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


SLACK_S = 15.0  # the target outlives the profiler; it is killed once the window is measured


def start_target(seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([str(SPIN8), "--duration", str(seconds + SLACK_S), "--report-ms",
                             "100"], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 5
    while len(thread_states(proc.pid)) < 9 and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.3)
    return proc


def finish_target(proc: subprocess.Popen[str], res: Result, start_ns: int,
                  end_ns: int) -> Result:
    """Throughput between two wall-clock instants, from spin8's 100 ms progress lines."""
    res.cpu_s = cpu_mark() - res.cpu_mark  # before the target itself is reaped
    if res.meter is not None:
        res.window = res.meter.between(start_ns, end_ns)
    proc.kill()
    out, _ = proc.communicate(timeout=60)
    rate = progress_rate(out.splitlines(), start_ns, end_ns)
    if rate is None:
        raise SystemExit("the profiled window is too short to measure throughput")
    res.rate = rate
    res.span_s = (end_ns - start_ns) / 1e9
    return res


def run_none(seconds: float, rate: float) -> Result:
    proc = start_target(seconds)
    res = Result()
    res.meter = Meter(proc.pid)
    t0 = time.time_ns()
    time.sleep(seconds)
    return finish_target(proc, res, t0, time.time_ns())


def run_pmp(backend_name: str) -> Callable[[float, float], Result]:
    def run(seconds: float, rate: float) -> Result:
        proc = start_target(seconds)
        res = Result()
        res.meter = Meter(proc.pid)
        target = open_target(proc.pid, allow_own_child=True)
        stop = threading.Event()
        with tempfile.TemporaryFile("w+") as log:
            loop = SnapshotLoop(target, make_backend(backend_name, proc.pid), log, rate,
                                10_000.0, stop)
            loop.start()
            loop.started.wait(60)  # the persistent gdb's attach is not in the window
            t0 = time.time_ns()
            ticks0 = worker_ticks(proc.pid)
            time.sleep(seconds)
            stop.set()
            loop.join(60)
            t1 = time.time_ns()
            ticks1 = worker_ticks(proc.pid)
        res.pauses = list(loop.stats.pauses_ms)
        res.snapshots = loop.stats.snapshots
        res.stop_ms = stop_per_snapshot(ticks0, ticks1, res.snapshots)
        return finish_target(proc, res, t0, t1)

    return run


def run_wallflame(**options: Any) -> Callable[[float, float], Result]:
    """``wallflame collect`` in this process (collection only: post-processing with perf
    script and the folders happens after the window and is not the target's cost)."""
    def run(seconds: float, rate: float) -> Result:
        proc = start_target(seconds)
        res = Result()
        res.meter = Meter(proc.pid)
        ticks0 = worker_ticks(proc.pid)
        with tempfile.TemporaryDirectory() as tmp:
            col = wf_collect(Path(tmp) / "run", Request(duration_s=seconds, **options),
                             pid=proc.pid)
        ticks1 = worker_ticks(proc.pid)
        pause = (col.pmp.pause if col.pmp else None) or {}
        res.snapshots = int(pause.get("snapshots", 0))
        if res.snapshots:
            res.pauses = [float(pause["median_ms"])]
            res.stop_ms = stop_per_snapshot(ticks0, ticks1, res.snapshots)
        return finish_target(proc, res, col.window.start_ns, col.window.end_ns)

    return run


def run_pt_pmp(interval: int) -> Callable[[float, float], Result]:
    def run(seconds: float, rate: float) -> Result:
        proc = start_target(seconds)
        res = Result()
        res.meter = Meter(proc.pid)
        t0 = time.time_ns()
        pt = subprocess.Popen(["pt-pmp", "--iterations", "100000", "--interval",
                               str(interval), "--pid", str(proc.pid)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
        time.sleep(seconds)
        # pt-pmp runs gdb in a loop; stop the whole group with SIGINT (never SIGTERM: it can
        # leave a target stopped), then SIGKILL.
        for sig in (signal.SIGINT, signal.SIGKILL):
            try:
                os.killpg(pt.pid, sig)
            except ProcessLookupError:
                break
            try:
                pt.wait(3)
                break
            except subprocess.TimeoutExpired:
                continue
        return finish_target(proc, res, t0, time.time_ns())

    return run


def pt_pmp_snapshot_ms(seconds: float) -> tuple[list[float], list[float]]:
    """Wall time of single pt-pmp snapshots, and the stop each caused on the target's side."""
    proc = start_target(seconds)
    out, stops = [], []
    for _ in range(3):
        ticks0 = worker_ticks(proc.pid)
        t0 = time.monotonic()
        subprocess.run(["pt-pmp", "--iterations", "1", "--pid", str(proc.pid)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        out.append((time.monotonic() - t0) * 1000)
        stop = stop_per_snapshot(ticks0, worker_ticks(proc.pid), 1)
        if stop is not None:
            stops.append(stop)
    proc.kill()
    proc.communicate()
    return out, stops


#: The configurations whose figures are the suite's headline rows (against pt-pmp's).
HEADLINE = ("wallflame collect (defaults)", "wallflame pmp libdw")


def headline(rows: list[dict[str, Any]], ref: dict[str, Any] | None) -> list[Row]:
    """Throughput loss, stop per snapshot and the profiler's CPU of the ``HEADLINE``
    configurations, each against ``pt-pmp --interval 0``'s (``ref``; None without pt-pmp)."""
    out = []
    peer = "pt-pmp --interval 0"

    def of(key: str, scale: float = 1.0) -> float | None:
        return ref[key] * scale if ref and ref.get(key) is not None else None

    for r in rows:
        if r["config"] not in HEADLINE:
            continue
        what = r["config"].removeprefix("wallflame ")
        out.append(row(f"{what}: throughput loss", 100 * r["loss"], of("loss", 100), peer,
                       unit="%", ratio=r["loss_ratio_to_pt_pmp"]))
        if r["stop_ms"] is not None:
            out.append(row(f"{what}: stop per snapshot", r["stop_ms"], of("stop_ms"), peer,
                           unit="ms", ratio=r["stop_ratio_to_pt_pmp"]))
        out.append(row(f"{what}: profiler CPU", 100 * r["profiler_cpu"],
                       of("profiler_cpu", 100), peer, unit="% of a CPU",
                       ratio=r["cpu_ratio_to_pt_pmp"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rate", type=float, default=10.0, help="snapshots per second")
    ap.add_argument("--json", default="", help="also write the headline rows here (run.py)")
    ap.add_argument("--json-all", default="",
                    help="also write every configuration's figures here")
    ap.add_argument("--only", default="", help="comma-separated parts of configuration names "
                    "to run (default: all), e.g. 'libdw,pt-pmp --interval 0'")
    args = ap.parse_args()
    build()
    default = DEFAULTS
    configs: dict[str, Callable[[float, float], Result]] = {
        "none": run_none,
        "wallflame pmp libdw": run_pmp("libdw"),
        "wallflame pmp eu-stack": run_pmp("eu-stack"),
        "wallflame pmp gdb": run_pmp("gdb"),
        "wallflame pmp gdb-batch": run_pmp("gdb-batch"),
        f"wallflame perf -F {default.freq_hz}": run_wallflame(off_cpu=OffCpu.NONE),
        "wallflame perf -F 997": run_wallflame(off_cpu=OffCpu.NONE, freq_hz=997),
        "wallflame collect (defaults)": run_wallflame(),
    }
    if shutil.which("pt-pmp"):
        configs["pt-pmp --interval 0"] = run_pt_pmp(0)
        configs["pt-pmp --interval 1"] = run_pt_pmp(1)
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        configs = {k: v for k, v in configs.items()
                   if k == "none" or any(w in k for w in wanted)}
    # Each configuration runs right after its own no-profiler run, and its loss is taken
    # against that one: on a shared machine the load drifts between minutes, not seconds.
    results: dict[str, list[Result]] = {k: [] for k in configs if k != "none"}
    losses: dict[str, list[float]] = {k: [] for k in results}
    est_losses: dict[str, list[float]] = {k: [] for k in results}
    bases: list[float] = []
    for i in range(args.runs):
        for name, fn in configs.items():
            if name == "none":
                continue
            base_res = run_none(args.seconds, args.rate)
            base_rate = base_res.rate
            res = fn(args.seconds, args.rate)
            bases.append(base_rate)
            results[name].append(res)
            losses[name].append(1 - res.rate / base_rate)
            est = estimated_loss(base_res, res)
            if est is not None:
                est_losses[name].append(est)
            print(f"run {i + 1}/{args.runs} {name}: {res.rate:,.0f} work/s "
                  f"(no profiler just before: {base_rate:,.0f})", file=sys.stderr)
    base = statistics.median(bases)
    pt_ms, pt_stops = pt_pmp_snapshot_ms(args.seconds + 10) if shutil.which("pt-pmp") \
        else ([], [])
    rows = []
    for name, rs in results.items():
        rate = statistics.median(r.rate for r in rs)
        loss = statistics.median(losses[name])
        est = statistics.median(est_losses[name]) if est_losses[name] else None
        pauses = [p for r in rs for p in r.pauses]
        snaps = statistics.median(r.snapshots / r.span_s for r in rs) if rs[0].snapshots \
            else 0
        per_s = snaps
        pause = statistics.median(pauses) if pauses else None
        stops = [r.stop_ms for r in rs if r.stop_ms is not None]
        stop = statistics.median(stops) if stops else None
        if name.startswith("pt-pmp"):
            pause = statistics.median(pt_ms) if pt_ms else None
            stop = statistics.median(pt_stops) if pt_stops else None
            per_s = 1 / (pause / 1000 + int(name[-1])) if pause else 0
        effective = max(loss, 0.0) / per_s * 1000 if per_s else None
        rows.append({"config": name, "work_per_s": round(rate), "loss": round(loss, 4),
                     "est_loss": round(est, 4) if est is not None else None,
                     "est_losses": [round(x, 4) for x in est_losses[name]],
                     "losses": [round(x, 4) for x in losses[name]],
                     "snapshots_per_s": round(per_s, 2), "pause_ms": pause,
                     "stop_ms": stop,
                     "runs": [round(r.rate) for r in rs],
                     "profiler_cpu": round(statistics.median(r.cpu_s / r.span_s for r in rs),
                                           4),
                     "effective_pause_ms": effective})
    ref = next((r for r in rows if r["config"] == "pt-pmp --interval 0"), None)
    print(f"\n{'configuration':32} {'work/s':>12} {'loss':>7} {'est.':>6} {'cpu':>6} "
          f"{'snap/s':>7} "
          f"{'pause ms':>9} {'stop ms':>8} {'eff. ms':>8} {'loss/pt':>8} {'stop/pt':>8} "
          f"{'cpu/pt':>7}")
    for r in rows:
        loss_ratio = (r["loss"] / ref["loss"]) if ref and ref["loss"] else None
        pause_ratio = (r["pause_ms"] / ref["pause_ms"]) if ref and ref["pause_ms"] and \
            r["pause_ms"] else None
        stop_ratio = (r["stop_ms"] / ref["stop_ms"]) if ref and ref["stop_ms"] and \
            r["stop_ms"] is not None else None
        cpu_ratio = (r["profiler_cpu"] / ref["profiler_cpu"]) if ref and ref["profiler_cpu"] \
            else None
        r["loss_ratio_to_pt_pmp"], r["pause_ratio_to_pt_pmp"] = loss_ratio, pause_ratio
        r["stop_ratio_to_pt_pmp"] = stop_ratio
        r["cpu_ratio_to_pt_pmp"] = cpu_ratio

        def f(v: float | None, fmt: str) -> str:
            return format(v, fmt) if v is not None else "-"

        print(f"{r['config']:32} {r['work_per_s']:>12,} {r['loss']:>+7.1%} "
              f"{f(r['est_loss'], '+6.1%')} "
              f"{r['profiler_cpu']:>6.1%} {r['snapshots_per_s']:>7.2f} "
              f"{f(r['pause_ms'], '9.2f')} {f(r['stop_ms'], '8.2f')} "
              f"{f(r['effective_pause_ms'], '8.2f')} "
              f"{f(loss_ratio, '8.3f')} {f(stop_ratio, '8.4f')} {f(cpu_ratio, '7.3f')}")
    print(f"\nmedian of {args.runs} runs of {args.seconds:g} s each; loss is against the "
          f"no-profiler run just before each (median {base:,.0f} work/s); negative loss is "
          f"noise; machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    if args.json_all:
        Path(args.json_all).write_text(json.dumps(rows, indent=1) + "\n")
    if args.json:
        write_rows(args.json, headline(rows, ref))


if __name__ == "__main__":
    main()
