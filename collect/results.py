"""What a collect reports of itself: ``capture.json`` while it runs and at its end, the
collectors' statistics, and the target's state once everything stopped."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from wallflame import rundir
from wallflame.collect import perf
from wallflame.collect.locks.owners import OwnerSampler
from wallflame.collect.memory import MemorySampler
from wallflame.collect.processes import Processes
from wallflame.collect.safety import ensure_running, pause_summary
from wallflame.collect.snapshots import PmpStats, SnapshotLoop
from wallflame.collect.target import Target, proc_name, read_stat, tracer_of
from wallflame.rundir import Capture, CollectOptions, Running, SnapshotStats, Window


def write_capture(raw: Path, col: Capture, opts: CollectOptions | None = None) -> None:
    """``raw/capture.json``.  With ``opts`` it describes a run still going on: the options it
    runs with, the window up to now, who is writing it, and the warning a finish gives if this
    is the last update it gets."""
    if opts is None:
        rundir.write_capture(raw, col)
        return
    now = time.time_ns()
    w = col.window
    me = read_stat(os.getpid())
    going = replace(
        col, options=opts, ended_by="collect did not finish",
        window=replace(w, end_ns=now, window_ns=now - w.start_ns,
                       mono_end_ns=w.mono_start_ns + now - w.start_ns if w.mono_start_ns
                       else 0) if w.start_ns else Window(),
        warnings=[*col.warnings, (
            "the collection did not finish (wallflame was killed?): the window ends at the "
            "last update of raw/capture.json, and the collectors' statistics (snapshot "
            "pauses, perf's lost chunks, the arenas at the end) are missing")],
        running=Running(os.getpid(), me.start_ticks if me else 0, now))
    with contextlib.suppress(OSError):  # a spare copy: a full disk must not end the run
        rundir.write_capture(raw, going, compact=True)


def memory_so_far(col: Capture, mem: MemorySampler) -> Capture:
    """``col`` with the memory samples taken until now (what a finish after a kill shows)."""
    start = mem.arenas_start
    col.memory = {"samples": list(mem.samples),
                  **({"arenas_start": start[0], "arenas": start[0]} if start else {})}
    return col


def so_far(col: Capture, mem: MemorySampler, procs: Processes) -> Capture:
    """``col`` as a finish after a kill would need it: the memory samples and the processes
    seen until now."""
    col.processes = procs.watch.to_json()
    return memory_so_far(col, mem)


def samplers_cpu(procs: Processes, mem: MemorySampler, main_s: float) -> dict[str, float]:
    """CPU seconds of the collect's own threads that run beside the target: each snapshot
    loop and owner sampler (summed over the processes) and the memory and process watchers,
    from their start (the snapshot loops and owner samplers start before the window) to the
    window's end; and the main thread's during the window.  The folding process and the
    perfs are in ``postprocess.cost``."""
    return {"snapshots": round(sum(lp.cpu_s for lp in procs.loops), 3),
            "owners": round(sum(o.cpu_s for o in procs.owners), 3),
            "memory": round(mem.cpu_s, 3), "watch": round(procs.watch.cpu_s, 3),
            "main_in_window": round(max(main_s, 0.0), 3)}


def owner_stats(samplers: list[OwnerSampler]) -> dict[str, Any]:
    """The owner samplers' statistics, summed over the processes."""
    out = samplers[0].stats()
    if len(samplers) == 1:
        return out
    out["samples"] = sum(s.samples for s in samplers)
    out["waiters"] = sum(s.waiters for s in samplers)
    probers = [s.prober for s in samplers if s.prober is not None]
    if probers:
        counts: dict[str, int] = {}
        for p in probers:
            for k, n in p.counts.items():
                counts[k] = counts.get(k, 0) + n
        out["probes"] = dict(sorted(counts.items()))
        out["pause"] = pause_summary([ms for p in probers for ms in p.pauses_ms], "stops")
        resumed = sum(p.resumed for p in probers)
        if resumed:
            out["resumed"] = resumed
        errors = sorted({p.error for p in probers if p.error})
        if errors:
            out["probe_error"] = "; ".join(errors)
    out["processes"] = len(samplers)
    return out


def merged_stats(loops: list[SnapshotLoop]) -> PmpStats:
    """The snapshot loops' statistics as one (a multi-process target has a loop per
    process)."""
    if len(loops) == 1:
        return loops[0].stats
    out = PmpStats(rate_hz=min((lp.stats.rate_hz for lp in loops), default=0.0))
    for lp in list(loops):
        st = lp.stats
        out.snapshots += st.snapshots
        out.failed += st.failed
        out.pauses_ms += st.pauses_ms
        out.over_budget += st.over_budget
        out.resumed += st.resumed
        out.errors += [e for e in st.errors if e not in out.errors][:5 - len(out.errors)]
    return out


def record_results(col: Capture, recorders: list[perf.PerfRecorder],
                    loops: list[SnapshotLoop], mem: MemorySampler) -> None:
    col.perf = {"sched": any(r.stem == "sched" for r in recorders),
                "off_cpu_bpf_supported": perf.supports_off_cpu()}
    for r in recorders:
        lost, lines = perf.lost_from_stderr(r.stderr_text())
        col.perf[r.stem] = {"returncode": r.returncode,
                            "chunks": [p.name for p in r.chunks()],
                            "lost_chunks": lost, "lost_lines": lines[:20],
                            "kallsyms": "raw" if r.kallsyms_copy else "proc"}
    if loops:
        loop = loops[0]
        st = merged_stats(loops)
        col.pmp = SnapshotStats(
            backend=loop.backend.name, consistent=loop.backend.consistent,
            snapshots=st.snapshots, failed=st.failed, errors=st.errors,
            over_budget=st.over_budget, resumed=st.resumed, rate_hz=loop.rate_hz,
            final_rate_hz=round(st.rate_hz, 3), attach_ms=round(loop.backend.attach_ms, 3),
            pause=st.pause_summary(), pause_measure=loop.backend.pause_measure)
        if st.over_budget:
            col.warn(f"{st.over_budget} snapshots paused the target longer than "
                     f"--max-pause-ms; the snapshot rate went as low as {st.rate_hz:.2f}/s")
        if st.resumed:
            col.warn(f"threads were found stopped after {st.resumed} snapshots and were "
                     "resumed (SIGCONT)")
        if st.failed:
            col.warn(f"{st.failed} snapshots failed: {'; '.join(st.errors[:2])}")
    col.memory = mem.result()


def final_check(target: Target, col: Capture) -> None:
    """G1: after everything stopped, no thread is left stopped or traced by us."""
    left = ensure_running(target.pid, target.start_ticks, target.stopped_at_start)
    if left and not target.stopped_at_start:
        col.warn(f"{len(left)} threads of PID {target.pid} were left stopped after "
                 "collection and were resumed")
    tracer = tracer_of(target.pid)
    # A target that has just exited (launch mode: the command ended with the window) may show
    # as a zombie whose exit the snapshot thread saw while attaching: nothing left to harm.
    if tracer and target.alive():
        col.warn(f"PID {target.pid} is traced by PID {tracer} ({proc_name(tracer)}) after "
                 "collection")



__all__ = ["final_check", "memory_so_far", "merged_stats", "owner_stats", "record_results",
           "samplers_cpu", "so_far", "write_capture"]
