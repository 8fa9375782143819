#!/usr/bin/env python3
"""Runnable time of a thread that switches very often (redis-server's main thread under
redis-benchmark): wallflame's figure against two others over the same window.

* **the tracepoints**: a second perf on every CPU records ``sched:sched_switch`` (either way)
  and ``sched:sched_wakeup`` for that thread, filtered in the kernel.  Runnable is, per
  switch-in, the time from the wake-up (or from a switch-out in state R, a preemption) to the
  ``sched_switch`` tracepoint that switches it in: the scheduler's own instant.
* **the kernel's schedstat** run-queue delay (``/proc/PID/task/TID/schedstat``, read by the
  collect when its window opens and closes).  The kernel measures it with the run queue's
  clock, whose update is skipped on the ``schedule()`` that follows a wake-up which preempts
  the running task (``rq_clock_skip_update``; read from the kernel's source, the likely reason
  it comes out 6-7 points under the tracepoints), so a wake-up's latency is partly missed.

It also prints how far each runnable span's end lies after the tracepoint's instant (before it:
negative; the nearest switch-in within 100 µs), summed over the window.  The span ends at
perf's ``PERF_RECORD_SWITCH`` switch-in record (written after the context switch and after perf
has scheduled the thread's own events in), moved earlier by the run's measured lag
(``SampledSched._switch_in_lag``).

    .venv/bin/python benchmarks/lab/runnable_truth.py [RUNS] [-- COLLECT OPTIONS]

Needs ``redis-server redis-tools`` and root.  Holds ``/tmp/wallflame-measure.lock``.
"""

from __future__ import annotations

import bisect
import fcntl
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.servers import Redis  # noqa: E402
from wallflame.timeline import RUNNABLE, load  # noqa: E402

WALLFLAME = [sys.executable, "-m", "wallflame"]
LOCK = "/tmp/wallflame-measure.lock"
SECONDS = 5
_TRACE = re.compile(r"\s*(\d+)\.(\d+):\s+(sched:\S+):\s+(.*)")
_SWITCH = re.compile(r"prev_pid=(\d+) .*prev_state=(\S+) ==> .*next_pid=(\d+)")


def _events(data: Path) -> list[tuple[int, str, str]]:
    txt = subprocess.run(["perf", "script", "-i", str(data), "--ns", "-F", "time,event,trace"],
                         capture_output=True, text=True, check=True).stdout
    out = []
    for line in txt.splitlines():
        m = _TRACE.match(line)
        if m:
            out.append((int(m.group(1)) * 1_000_000_000 + int(m.group(2)), m.group(3),
                        m.group(4)))
    return sorted(out)


def _tracepoints(events: list[tuple[int, str, str]], tid: int, lo: int,
                 hi: int) -> tuple[int, list[int]]:
    """(runnable ns inside [lo, hi) by the tracepoints, every switch-in instant)."""
    total = 0
    ins: list[int] = []
    out_t: int | None = None
    preempted = False
    woken: int | None = None
    for t, name, rest in events:
        if name == "sched:sched_wakeup":
            if out_t is not None:
                woken = t
            continue
        m = _SWITCH.search(rest)
        if m is None:
            continue
        if int(m.group(1)) == tid:
            out_t, preempted, woken = t, m.group(2).startswith("R"), None
        if int(m.group(3)) == tid:
            ins.append(t)
            start = out_t if preempted else woken
            if out_t is not None and start is not None:
                total += max(0, min(t, hi) - max(start, lo))
            out_t = None
    return total, ins


def measure(collect_args: list[str]) -> dict[str, float]:
    with Redis() as r:
        tid = r.pid
        load_p = r.benchmark_start(clients=50, requests=100_000, seconds=SECONDS + 40)
        tmp = Path(tempfile.mkdtemp(prefix="wf-runnable-"))
        try:
            time.sleep(1.0)
            tp = subprocess.Popen(
                ["perf", "record", "-a", "-k", "mono",
                 "-e", "sched:sched_switch", "--filter", f"prev_pid=={tid}||next_pid=={tid}",
                 "-e", "sched:sched_wakeup", "--filter", f"pid=={tid}",
                 "-o", str(tmp / "tp.data")], stderr=subprocess.DEVNULL)
            time.sleep(0.5)
            res = subprocess.run([*WALLFLAME, "collect", "--pid", str(tid), "--duration",
                                  str(SECONDS), "-o", str(tmp / "run"), *collect_args],
                                 capture_output=True, text=True, cwd=str(ROOT), check=False)
            tp.send_signal(2)
            tp.wait()
        finally:
            load_p.stop()
            load_p.proc.wait(30)
        if res.returncode != 0:
            raise RuntimeError(res.stderr[-2000:])
    run = tmp / "run"
    w = json.loads((run / "meta.json").read_text())["window"]
    lo, hi = w["mono_start_ns"], w["mono_end_ns"]
    span = hi - lo
    truth, ins = _tracepoints(_events(tmp / "tp.data"), tid, lo, hi)
    th = load(run).threads[tid]
    ours = lag = 0
    for s, d, k in zip(th.p_start, th.p_dur, th.p_kind, strict=True):
        if k != RUNNABLE:
            continue
        ours += max(0, min(s + d, hi) - max(s, lo))
        j = bisect.bisect_left(ins, s + d)
        near = min((s + d - t for t in ins[max(0, j - 1):j + 1]), key=abs, default=None)
        if near is not None and abs(near) < 100_000:
            lag += near
    cap = json.loads((run / "raw" / "capture.json").read_text())
    ends = [(next(x["schedstat"] for x in cap["threads"][k]["threads"] if x["tid"] == tid),
             cap["threads"][k]["mono_ns"]) for k in ("start", "end")]
    (a, ma), (b, mb) = ends
    row = next(t for t in json.loads((run / "summary.json").read_text())["threads"]
               if t["tid"] == tid)
    return {"wallflame": 100 * ours / span, "tracepoints": 100 * truth / span,
            "kernel": 100 * (b[1] - a[1]) / (mb - ma), "record_lag": 100 * lag / span,
            "switch_ins_per_s": len([t for t in ins if lo <= t < hi]) / (span / 1e9),
            "on_wallflame": 100 * row["on_cpu_s"] * 1e9 / span,
            "on_kernel": 100 * (b[0] - a[0]) / (mb - ma)}


def main() -> None:
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    runs = int(args[0]) if args and args[0] != "--" else 3
    print("runnable, % of the window: wallflame / tracepoints / kernel schedstat | switch-in "
          "record lag summed (points) | switch-ins a second | on-CPU wallflame / kernel")
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for _ in range(runs):
            m = measure(extra)
            print(f"{m['wallflame']:6.2f} / {m['tracepoints']:6.2f} / {m['kernel']:6.2f} | "
                  f"{m['record_lag']:5.2f} | {m['switch_ins_per_s']:8,.0f} | "
                  f"{m['on_wallflame']:6.2f} / {m['on_kernel']:6.2f}", flush=True)


if __name__ == "__main__":
    main()
