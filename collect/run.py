"""One collection, start to finish: tools started, watched, stopped, the target checked.

``collect`` never parses a capture; it writes ``raw/`` and ``raw/capture.json`` (a
``wallflame.rundir.Capture``: everything ``wallflame.finish`` needs to build the run
directory, so a run can be re-finished later).
``capture.json`` is written when the run starts and replaced as it goes (four times a second,
then at the end), so a collect that was killed can still be finished: ``wallflame finish RUN``.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

from wallflame import rundir
from wallflame.collect import budget, perf, releases, stream, threads
from wallflame.collect.launch import Launched, end_child
from wallflame.collect.libdw import libdw_version
from wallflame.collect.memory import MemorySampler
from wallflame.collect.owners import OwnerSampler
from wallflame.collect.pmp import BACKENDS, SnapshotLoop, make_backend
from wallflame.collect.safety import Guard, ensure_running, spawn
from wallflame.collect.target import (
    Target,
    check_trace_access,
    open_target,
    proc_name,
    read_stat,
    tracer_of,
)
from wallflame.errors import InputError, PermissionDenied
from wallflame.rundir import (
    OFF_CPU_MODES,
    OWNERS_LOG,
    RAW,
    SNAPSHOT_LOG,
    Capture,
    CollectOptions,
    Running,
    SnapshotStats,
    Window,
)

#: Seconds between two updates of ``capture.json`` while collecting.
CHECKPOINT_S = 0.25

@dataclass
class Progress:
    elapsed_s: float = 0.0
    chunks: int = 0
    snapshots: int = 0
    pause_ms: float = 0.0
    failed: int = 0


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
        rundir.write_capture(raw, going)


def _memory_so_far(col: Capture, mem: MemorySampler) -> Capture:
    """``col`` with the memory samples taken until now (what a finish after a kill shows)."""
    start = mem.arenas_start
    col.memory = {"samples": list(mem.samples),
                  **({"arenas_start": start[0], "arenas": start[0]} if start else {})}
    return col


def _version(cmd: list[str]) -> str:
    if shutil.which(cmd[0]) is None:
        return ""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False,
                           env={**os.environ, "DEBUGINFOD_URLS": ""})
    except (OSError, subprocess.SubprocessError):
        return ""
    return (r.stdout or r.stderr).strip().splitlines()[0] if (r.stdout or r.stderr) else ""


def tool_versions() -> dict[str, str]:
    return {"perf": _version(["perf", "--version"]), "gdb": _version(["gdb", "--version"]),
            "eu-stack": _version(["eu-stack", "--version"]), "libdw": libdw_version(),
            "kernel": platform.release(),
            "python": platform.python_version()}


def prepare_dir(out: Path) -> Path:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"{out}: already exists and is not an empty directory",
                         "choose a new run directory with -o")
    raw = out / RAW
    try:
        raw.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{out}: cannot create: {e.strerror}", "check the path") from None
    return raw


class _Stop:
    """SIGINT, SIGTERM and SIGHUP end collection early; everything collected is kept.

    The handler runs in the main thread between two bytecodes, possibly while that thread
    holds ``event``'s internal lock (inside ``Event.wait`` or ``Event.set``); setting the
    event from the handler would then deadlock.  The handler only writes a byte to a pipe, and
    a watcher thread sets the event."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self, event: threading.Event) -> None:
        self.event = event
        self.signal: int = 0
        self.old: dict[int, Any] = {}
        self._r, self._w = os.pipe()
        self._watcher = threading.Thread(target=self._watch, name="wallflame-signals",
                                         daemon=True)

    def __enter__(self) -> _Stop:
        self._watcher.start()
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self.old[s] = signal.signal(s, self._handler)
        return self

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        self.signal = self.signal or signum
        os.write(self._w, b"s")

    def _watch(self) -> None:
        while os.read(self._r, 1) == b"s":
            self.event.set()

    def __exit__(self, *exc: object) -> None:
        for s, h in self.old.items():
            signal.signal(s, h)
        os.write(self._w, b"q")
        self._watcher.join(5)
        os.close(self._r)
        os.close(self._w)


def collect(out: Path, opts: CollectOptions, pid: int | None = None,
            command: Sequence[str] | None = None,
            progress: Callable[[Progress], None] | None = None) -> Capture:
    # Tools run with the raw folder as their working directory: every path must be absolute.
    out = out.absolute()
    if opts.off_cpu not in OFF_CPU_MODES:
        raise InputError(f"unknown --off-cpu {opts.off_cpu!r}", "use pmp, sched, both or none")
    if opts.pmp_backend not in BACKENDS:
        raise InputError(f"unknown --pmp-backend {opts.pmp_backend!r}",
                         f"use one of {', '.join(BACKENDS)}")
    if pid is not None:
        target = open_target(pid)  # before anything is written or started
        check_trace_access(pid)
    perf.perf_path()
    if opts.off_cpu in ("pmp", "both"):
        make_backend(opts.pmp_backend, 0)  # the tool is installed (nothing is started)
    notes: list[str] = []
    if opts.off_cpu in ("sched", "both") and not perf.sched_allowed():
        fix = ("run as root, or sysctl -w kernel.perf_event_paranoid=-1 and make "
               "/sys/kernel/tracing readable, or grant CAP_PERFMON")
        if opts.off_cpu == "sched":
            raise PermissionDenied("perf may not record sched:sched_switch here", fix)
        notes.append(f"scheduler events are not permitted ({fix}); off-CPU time comes from "
                     "snapshots only")
        opts = replace(opts, off_cpu="pmp")
    raw = prepare_dir(out)
    col = Capture(options=replace(opts), tools=tool_versions())
    for n in notes:
        col.warn(n)
    child: Launched | None = None
    if command:
        child = Launched(command, raw)
        col.launched = {"command": list(command), "pid": child.pid}
        target = open_target(child.pid, allow_own_child=True)
    col.target = target.identity()
    write_capture(raw, col, opts)
    if target.stopped_at_start:
        col.warn(f"PID {target.pid} was stopped (state T) when collection began; it stays "
                 "stopped")
        if opts.pmp_backend not in ("libdw", "eu-stack") and opts.off_cpu in ("pmp", "both"):
            # gdb would resume a job-control-stopped process with its continue; libdw (and
            # eu-stack) leave each thread as they found it.
            col.warn(f"--pmp-backend {opts.pmp_backend} would resume the stopped target; "
                     "used libdw instead")
            opts = replace(opts, pmp_backend="libdw")
    stop = threading.Event()
    guard = Guard(target.pid, target.start_ticks, target.stopped_at_start)
    try:
        with _Stop(stop) as stopper:
            _run(target, opts, raw, col, stop, guard, child, progress)
            if stopper.signal:
                col.ended_by = signal.Signals(stopper.signal).name
    finally:
        _final_check(target, col)
        guard.close()
        if child is not None:
            returncode, note = end_child(child)
            col.launched["returncode"] = returncode
            if note:
                col.warn(note)
    write_capture(raw, col)
    return col


def _recorders(target: Target, opts: CollectOptions, raw: Path,
               attached: bool = False) -> list[perf.PerfRecorder]:
    """On-CPU perf, plus a scheduler perf for ``sched``/``both`` (perf --off-cpu, BPF, would
    duplicate the sched_switch intervals; only its support is recorded).  Attached to a running
    process, on-CPU samples are taken system-wide when allowed (``PerfOptions.system_wide``);
    a launched command keeps per-thread sampling, which also follows the processes it starts."""
    wide = attached and perf.system_wide_allowed()
    out = [perf.PerfRecorder(perf.record_command(
        target.pid, raw / "perf.data", perf.PerfOptions(opts.freq_hz, opts.call_graph,
                                                        system_wide=wide),
        opts.duration_s), raw, "perf")]
    if opts.off_cpu in ("sched", "both") and perf.system_wide_allowed():
        out.append(perf.PerfRecorder(perf.wake_command(
            raw / f"{perf.WAKE}.data", threads.wake_filter(target.threads()), opts.duration_s),
            raw, perf.WAKE))
    if opts.off_cpu in ("sched", "both"):
        out.append(perf.PerfRecorder(perf.record_command(
            target.pid, raw / "sched.data", perf.PerfOptions(opts.freq_hz,
                                                             opts.sched_call_graph, True,
                                                             opts.sched_stack_hz or 0.0),
            opts.duration_s), raw, "sched"))
    return out


def _run(target: Target, opts: CollectOptions, raw: Path, col: Capture,
         stop: threading.Event, guard: Guard, child: Launched | None,
         progress: Callable[[Progress], None] | None) -> None:
    mem = MemorySampler(target.pid, stop, alive=target.alive)
    if opts.off_cpu in ("sched", "both") and opts.sched_stack_hz is None \
            and opts.max_data_mb_per_s is None:
        opts = replace(opts, sched_stack_hz=0.0)  # no budget: a stack at every switch
        col.options.sched_stack_hz = 0.0
    if opts.off_cpu in ("sched", "both") and opts.sched_stack_hz is None \
            and opts.max_data_mb_per_s is not None:
        p = budget.plan(budget.switch_rates(target.pid), opts.max_data_mb_per_s, opts.freq_hz,
                        perf.PerfOptions().stack_bytes)
        opts = replace(opts, sched_stack_hz=p.stack_hz)
        col.options.sched_stack_hz = p.stack_hz
        col.postprocess["budget"] = p.to_json()
    recorders = _recorders(target, opts, raw, attached=child is None)
    # A launched command's perf records only its own processes (with those it starts): no
    # PID to pick out, or its children's samples would be dropped.
    streamer = stream.Streamer(stream.Folded(raw, target.pid if child is None else None),
                               recorders, stop)
    if any(r.stem == perf.WAKE for r in recorders):
        streamer.folded.sched.expect_wakes()
    for r in recorders:
        col.commands[f"{r.stem}_record"] = r.command
        col.commands[f"{r.stem}_script"] = perf.script_command(
            Path(f"raw/{r.stem}.data.<chunk>"), r.stem == "sched")
    loop: SnapshotLoop | None = None
    log = None
    owners: OwnerSampler | None = None
    owners_log = None
    rel: releases.ReleaseRecorder | None = None
    t_start = time.time_ns()
    mono_start = time.monotonic_ns()
    m_start = time.monotonic()
    try:
        mem.start()
        if opts.off_cpu in ("pmp", "both"):
            # Snapshots first: a persistent gdb's attach (symbol loading) is not in the window.
            backend = make_backend(opts.pmp_backend, target.pid)
            col.commands["pmp"] = backend.commands
            log = open(raw / SNAPSHOT_LOG, "w", encoding="utf-8")  # noqa: SIM115
            rate = opts.pmp_rate_hz or (10.0 if opts.off_cpu == "pmp" else 2.0)
            loop = SnapshotLoop(target, backend, log, rate, opts.max_pause_ms, stop,
                                guard.watch)
            loop.start()
            loop.started.wait(120)
            if loop.start_error is not None:
                raise loop.start_error
        if opts.off_cpu in ("pmp", "both") and opts.owner_rate_hz > 0:
            owners_log = open(raw / OWNERS_LOG, "w", encoding="utf-8")  # noqa: SIM115
            owners = OwnerSampler(target.pid, owners_log, opts.owner_rate_hz, stop,
                                  alive=target.alive, start_ticks=target.start_ticks,
                                  stopped_before=target.stopped_at_start)
            owners.start()
            col.commands["owners"] = [
                f"read /proc/{target.pid}/task/*/syscall at {opts.owner_rate_hz:g}/s; for a "
                "futex waiter, the lock (40-56 bytes) and 1 KiB of its stack from "
                f"/proc/{target.pid}/mem; the lock's owner thread stopped, the lock read again "
                "and the owner unwound (libdw dwfl_getthread_frames)",
                "nm --defined-only -S -C [-D] <each mapped ELF>"]
        for r in recorders:
            r.start(target.pid)
            if r.proc is not None:
                guard.watch(r.proc.pid)
        if opts.release_sites:  # where locks are released: its own perf (collect.releases)
            rel = releases.start(perf.perf_path(), target.pid, raw, col.commands, guard.watch)
        for r in recorders:
            if not r.wait_ready():
                if target.alive():
                    r.early_failure()
                col.warn(f"{r.stem} record did not report being ready; the window may "
                         "include time before it recorded")
        col.threads["start"] = threads.listing(target.pid)
        t_start = time.time_ns()
        mono_start = time.monotonic_ns()
        m_start = time.monotonic()
        streamer.folded.sched.set_window(
            mono_start, None, [r["tid"] for r in col.threads["start"]["threads"]])
        streamer.start()
        col.window = Window(start_ns=t_start, mono_start_ns=mono_start, perf_clock="mono")
        write_capture(raw, col, opts)
        time.sleep(0.1)
        for r in recorders:
            if target.alive():  # perf fails with ESRCH when the target is already gone
                r.early_failure()
        _wait(target, opts, col, stop, child, recorders[0], loop, m_start, progress,
              lambda: write_capture(raw, _memory_so_far(col, mem), opts))
    finally:
        t_end = time.time_ns()
        mono_end = time.monotonic_ns()
        stop.set()
        if col.window.mono_start_ns:  # nothing after the window's end is counted
            streamer.folded.sched.window = (col.window.mono_start_ns, mono_end)
            col.threads["end"] = threads.listing(target.pid)
        if loop is not None:
            loop.join(30)
        for r in recorders:
            r.stop()
        if streamer.is_alive():  # what is left of the chunks, then the cost
            streamer.drain()
            col.folded = streamer.folded  # type: ignore[attr-defined]
            col.postprocess["cost"] = streamer.folded.cost.to_json()
        mem.join(5)
        if owners is not None:
            owners.join(5)
            col.owners = owners.stats()
        if rel is not None:
            col.owners["releases"] = releases.finish(rel, col.warn)
        for f in (log, owners_log):
            if f is not None:
                f.close()
        col.window = Window(t_start, t_end, t_end - t_start, mono_start, mono_end, "mono")
        _record_results(col, recorders, loop, mem)
    if loop is not None and loop.start_error is not None:
        raise loop.start_error


def _wait(target: Target, opts: CollectOptions, col: Capture, stop: threading.Event,
          child: Launched | None, recorder: perf.PerfRecorder,
          loop: SnapshotLoop | None, m_start: float,
          progress: Callable[[Progress], None] | None,
          checkpoint: Callable[[], None] | None = None) -> None:
    deadline = None if opts.duration_s is None else m_start + opts.duration_s
    saved = m_start
    while not stop.is_set():
        now = time.monotonic()
        if checkpoint is not None and now - saved >= CHECKPOINT_S:
            checkpoint()
            saved = now
        if deadline is not None and now >= deadline:
            col.ended_by = col.ended_by or "duration"
            return
        if child is not None and child.poll() is not None:
            col.ended_by = "command exited"
            return
        if not target.alive():
            col.ended_by = "target exited"
            if child is None:
                col.warn(f"PID {target.pid} exited during collection; kept what was "
                         "collected until then")
            if target.reused():
                col.warn(f"PID {target.pid} now belongs to another process (PID reuse, "
                         "detected by its start time); it was not touched")
            return
        if loop is not None and not loop.is_alive() and loop.start_error is not None:
            return
        if progress is not None:
            st = loop.stats if loop is not None else None
            progress(Progress(now - m_start, len(recorder.chunks()),
                              st.snapshots if st else 0,
                              sum(st.pauses_ms) if st else 0.0, st.failed if st else 0))
        stop.wait(0.25 if deadline is None else min(0.25, max(deadline - now, 0.0)))
    col.ended_by = col.ended_by or "signal"


def _record_results(col: Capture, recorders: list[perf.PerfRecorder],
                    loop: SnapshotLoop | None, mem: MemorySampler) -> None:
    col.perf = {"sched": any(r.stem == "sched" for r in recorders),
                "off_cpu_bpf_supported": perf.supports_off_cpu()}
    for r in recorders:
        lost, lines = perf.lost_from_stderr(r.stderr_text())
        col.perf[r.stem] = {"returncode": r.returncode,
                            "chunks": [p.name for p in r.chunks()],
                            "lost_chunks": lost, "lost_lines": lines[:20]}
    if loop is not None:
        st = loop.stats
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


def _final_check(target: Target, col: Capture) -> None:
    """G1: after everything stopped, no thread is left stopped or traced by us."""
    left = ensure_running(target.pid, target.start_ticks, target.stopped_at_start)
    if left and not target.stopped_at_start:
        col.warn(f"{len(left)} threads were left stopped after collection and were resumed")
    tracer = tracer_of(target.pid)
    # A target that has just exited (launch mode: the command ended with the window) may show
    # as a zombie whose exit the snapshot thread saw while attaching: nothing left to harm.
    if tracer and target.alive():
        col.warn(f"PID {target.pid} is traced by PID {tracer} ({proc_name(tracer)}) after "
                 "collection")


__all__ = ["OFF_CPU_MODES", "CollectOptions", "Progress", "collect", "spawn"]
