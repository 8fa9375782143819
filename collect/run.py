"""One collection, start to finish: the plan executed, tools watched and stopped.

``collect`` never parses a capture; it writes ``raw/`` and ``raw/capture.json`` (a
``wallflame.rundir.Capture``: everything ``wallflame.assemble`` needs to build the run
directory, so a run can be re-finished later).
``capture.json`` is written when the run starts and replaced as it goes (four times a second,
then at the end), so a collect that was killed can still be finished: ``wallflame finish RUN``.
"""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

from wallflame.collect import budget, perf, stream, threads
from wallflame.collect import machine as machine_load
from wallflame.collect.elfinfo import has_debug_info
from wallflame.collect.launch import Launched, end_child, runnable
from wallflame.collect.libdw import libdw_version
from wallflame.collect.locks import futexwakes
from wallflame.collect.memory import MemorySampler
from wallflame.collect.plan import (
    BudgetSource,
    CollectPlan,
    Machine,
    Request,
    Targets,
    needs_debug_info,
    needs_switch_rates,
    plan,
    wants_scheduler,
)
from wallflame.collect.processes import Processes, listing, not_ours, open_targets
from wallflame.collect.procs import Selection
from wallflame.collect.results import (
    final_check,
    merged_stats,
    owner_stats,
    record_results,
    samplers_cpu,
    so_far,
    write_capture,
)
from wallflame.collect.safety import Guard, spawn
from wallflame.collect.snapshots import make_backend
from wallflame.collect.target import (
    Target,
    open_target,
    own_tree,
)
from wallflame.errors import InputError
from wallflame.rundir import (
    PERF_DATA,
    RAW,
    SCHED_DATA,
    Capture,
    CollectOptions,
    Window,
)
from wallflame.systools import find_program

#: Seconds between two updates of ``capture.json`` while collecting.
CHECKPOINT_S = 0.25

@dataclass
class Progress:
    elapsed_s: float = 0.0
    chunks: int = 0
    snapshots: int = 0
    pause_ms: float = 0.0
    failed: int = 0


def _version(cmd: list[str]) -> str:
    if find_program(cmd[0]) is None:
        return ""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False,
                           env={**os.environ, "DEBUGINFOD_URLS": ""})
    except (OSError, subprocess.SubprocessError):
        return ""
    return (r.stdout or r.stderr).strip().splitlines()[0] if (r.stdout or r.stderr) else ""


def tool_versions(pmp_backend: str | None = None) -> dict[str, str]:
    """The versions of the tools, for ``meta.json``; with ``pmp_backend``, only of the
    snapshot tool that backend runs (``gdb --version`` alone takes 0.05 s of CPU, a
    percent of what a 10 s collect of a busy target costs it)."""
    out = {"perf": _version(["perf", "--version"])}
    if pmp_backend is None or pmp_backend.startswith("gdb"):
        out["gdb"] = _version(["gdb", "--version"])
    if pmp_backend is None or pmp_backend == "eu-stack":
        out["eu-stack"] = _version(["eu-stack", "--version"])
    return {**out, "libdw": libdw_version(), "kernel": platform.release(),
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


def observe(request: Request, targets: Sequence[Target]) -> tuple[Targets, Machine]:
    """What ``plan`` needs of the targets and the machine, read from ``/proc`` (and perf's
    permissions); the switch rates only when the plan needs them (``needs_switch_rates``)."""
    machine = Machine(cpus=os.cpu_count() or 1,
                      sched_allowed=wants_scheduler(request) and perf.sched_allowed(),
                      system_wide_allowed=perf.system_wide_allowed())
    rates: dict[int, float] = {}
    measured = needs_switch_rates(request, machine) and bool(targets)
    if measured:
        load: dict[str, float] = {}
        rates = budget.switch_rates([t.pid for t in targets], machine=load)
        machine = replace(machine, switches_per_s=load.get("switches_per_s"),
                          idle=load.get("idle"))
    debug = not needs_debug_info(request) or any(has_debug_info(f"/proc/{t.pid}/exe")
                                                 for t in targets)
    return Targets(switch_rates=rates, measured=measured, debug_info=debug,
                   stopped=any(t.stopped_at_start for t in targets)), machine


def collect(out: Path, request: Request, pid: int | None = None,
            command: Sequence[str] | None = None,
            progress: Callable[[Progress], None] | None = None,
            select: Selection | None = None,
            stream_command: Sequence[str] | None = None,
            announce: Callable[[CollectPlan], None] | None = None) -> Capture:
    """Profile the processes ``select`` names (or ``pid``), or launch ``command`` and profile
    it and every process it starts, as ``request`` asks (``collect.plan``; ``announce`` is
    given the plan before anything is written).  ``stream_command``: the folding process's
    command line (``wallflame.assemble.streaming``), which folds perf's chunks while they are
    recorded; the capture's ``streaming`` (``collect.stream.StreamProcess``) then has it write
    the run directory.  Without it every chunk is folded by ``wallflame.assemble``."""
    # Tools run with the raw folder as their working directory: every path must be absolute.
    out = out.absolute()
    if select is None and pid is not None:
        select = Selection(pids=(pid,))
    notes: list[str] = []
    targets: list[Target] = []
    if select is not None:  # before anything is written or started
        targets, notes = open_targets(select, own_tree())
    if command:
        runnable(command)
    perf.perf_path()
    the_plan = plan(request, *observe(request, targets))
    opts = the_plan.settings
    if opts.snapshots:
        make_backend(opts.pmp_backend, 0)  # the tool is installed (nothing is started)
    if announce is not None:
        announce(the_plan)
    raw = prepare_dir(out)
    col = Capture(options=replace(opts), plan=the_plan.to_json(),
                  tools=tool_versions(opts.pmp_backend if opts.snapshots else ""))
    for n in (*notes, *the_plan.warnings):
        col.warn(n)
    if the_plan.light_measure is not None:
        col.postprocess["light"] = the_plan.light_measure
    if the_plan.budget_plan is not None:
        col.postprocess["budget"] = {**the_plan.budget_plan.to_json(),
                                     "automatic": the_plan.budget_source is BudgetSource.AUTOMATIC}
    child: Launched | None = None
    if command:
        child = Launched(command, raw)
        col.launched = {"command": list(command), "pid": child.pid}
        targets = [open_target(child.pid, allow_own_child=True)]
        select = Selection(trees=(child.pid,))  # the processes it starts are followed
    assert select is not None
    target = targets[0]
    col.target = target.identity()
    col.selection = select.to_json()
    write_capture(raw, col, opts)
    for t in targets:
        if t.stopped_at_start:
            col.warn(f"PID {t.pid} was stopped (state T) when collection began; it stays "
                     "stopped")
    stop = threading.Event()
    guard = Guard(target.pid, target.start_ticks, target.stopped_at_start)
    procs = Processes(targets, select, the_plan, raw, col, stop, guard,
                       not_ours(child.pid if child is not None else None))
    try:
        with _Stop(stop) as stopper:
            _run(procs, the_plan, raw, col, stop, guard, child, progress, stream_command)
            if stopper.signal:
                col.ended_by = signal.Signals(stopper.signal).name
    except BaseException:
        streamer = getattr(col, "streaming", None)
        if streamer is not None:  # no finish: the chunks stay in raw/
            streamer.abort()
        raise
    finally:
        for t in procs.all_targets():
            final_check(t, col)
        guard.close()
        if child is not None:
            returncode, note = end_child(child)
            col.launched["returncode"] = returncode
            if note:
                col.warn(note)
    col.processes = procs.watch.to_json()
    write_capture(raw, col)
    return col


def _recorders(procs: Processes, the_plan: CollectPlan, raw: Path) -> list[perf.PerfRecorder]:
    """On-CPU perf, plus a scheduler perf when the plan records the scheduler (perf
    --off-cpu, BPF, would duplicate the sched_switch intervals; only its support is
    recorded), and the wake-up recorder when it records on every CPU.  On-CPU samples are
    taken on every CPU when the plan says (``oncpu_every_cpu``); otherwise, and for a
    scheduler recorded per thread, perf follows the processes named (``-p``, with the
    processes they fork during the window: perf's events are inherited)."""
    opts = the_plan.settings
    pids = ",".join(str(t.pid) for t in procs.targets)
    out = [perf.PerfRecorder(perf.record_command(
        pids, raw / PERF_DATA, perf.PerfOptions(
            opts.freq_hz, opts.call_graph, system_wide=the_plan.oncpu_every_cpu,
            chunk_s=perf.oncpu_chunk_s(opts.freq_hz, opts.call_graph, opts.duration_s)),
        opts.duration_s), raw, "perf")]
    if not opts.sched:
        return out
    # the target's threads and the pids still free, listed once for both kernel filters
    tids = sorted(tid for t in procs.targets for tid in t.threads())
    new = threads.new_pid_ranges()
    if the_plan.wakeups:
        out.append(perf.PerfRecorder(perf.wake_command(
            raw / f"{perf.WAKE}.data", threads.wake_filter(tids, new), opts.duration_s,
            perf.chunk_seconds(opts.duration_s),
            the_plan.wakers), raw, perf.WAKE))
    sched = replace(perf.sched_options(opts.freq_hz, opts.sched_call_graph, opts.sched_stack_hz),
                    chunk_s=perf.chunk_seconds(opts.duration_s))
    if the_plan.sched_every_cpu:
        sched = replace(sched, system_wide=True, stack_period=opts.sched_stack_period or 1,
                        switch_filter=threads.wake_filter(tids, new, "prev_pid"))
    out.append(perf.PerfRecorder(perf.record_command(
        pids, raw / SCHED_DATA, sched, opts.duration_s), raw, "sched"))
    return out


def _run(procs: Processes, the_plan: CollectPlan, raw: Path, col: Capture,
         stop: threading.Event, guard: Guard, child: Launched | None,
         progress: Callable[[Progress], None] | None,
         stream_command: Sequence[str] | None) -> None:
    """The collectors started, the window opened, waited for and closed."""
    w = _Window(procs, the_plan, raw, col, stop, guard, child, stream_command)
    try:
        w.start_collectors()
        w.open()
        _wait(procs, the_plan.settings, col, stop, child, w.recorders[0], w.mono_start / 1e9,
              progress, w.checkpoint)
    finally:
        w.close()
    first = procs.loops[0] if procs.loops else None
    if first is not None and first.start_error is not None:
        raise first.start_error


class _Window:
    """The collectors of one collect, in the order they start and stop: the snapshot loops
    before the recorders (a persistent gdb's attach is not in the window), the window opened
    once every recorder is ready (a launched command let run then), and at its end every
    recorder asked to stop at once, before the samplers are waited for."""

    def __init__(self, procs: Processes, the_plan: CollectPlan, raw: Path, col: Capture,
                 stop: threading.Event, guard: Guard, child: Launched | None,
                 stream_command: Sequence[str] | None) -> None:
        self.procs, self.plan, self.raw, self.col = procs, the_plan, raw, col
        self.stop, self.guard, self.child = stop, guard, child
        self.opts = opts = the_plan.settings
        self.target = target = procs.primary
        self.attached = child is None
        self.mem = MemorySampler(target.pid, stop, alive=target.alive)
        for t in procs.targets[1:]:
            guard.add_target(t.pid, t.start_ticks, t.stopped_at_start)
        self.recorders = _recorders(procs, the_plan, raw)
        # Attached on every CPU, the target's samples are picked out by PID: every process the
        # watch has seen by the time a chunk is read.  A launched command's perf only records
        # its own processes (with those it starts): no PID to pick out.  A window that is one
        # chunk of every recorder has no chunk to fold before it closes: the collect folds
        # them itself after it (``CollectPlan.streamed``).
        self.streamer = None if stream_command is None or not the_plan.streamed \
            else stream.StreamProcess(
                list(stream_command), raw.parent, raw, [r.stem for r in self.recorders],
                procs.watch.pids() if self.attached else None, opts.inlined,
                any(r.stem == perf.WAKE for r in self.recorders))
        if self.streamer is not None:
            col.streaming = self.streamer  # type: ignore[attr-defined]
        ksyms = bool(self.recorders) and perf.save_kallsyms(raw)
        for r in self.recorders:
            col.commands[f"{r.stem}_record"] = r.command
            col.commands[f"{r.stem}_script"] = perf.script_command(
                Path(f"raw/{r.stem}.data.<chunk>"), r.stem == "sched", kallsyms=ksyms,
                inline=opts.inlined)
        self.rel: futexwakes.ReleaseRecorder | None = None
        self.load = machine_load.LoadMeter(procs.watch.pids)
        self.t_start = time.time_ns()
        self.mono_start = time.monotonic_ns()
        self.main_cpu = time.thread_time()

    def checkpoint(self) -> None:
        write_capture(self.raw, so_far(self.col, self.mem, self.procs), self.opts)
        if self.streamer is not None and self.attached:
            self.streamer.update_pids(self.procs.watch.pids())

    def start_collectors(self) -> None:
        procs, col, target = self.procs, self.col, self.target
        self.mem.start()
        # A launched command is held until the recorders are ready: its snapshots start once
        # it runs the command's own program (``open``).
        if self.attached:
            for i, t in enumerate(procs.targets):
                procs.start(t, primary=i == 0, warm=True)
        for r in self.recorders:
            r.start(target.pid)
            if r.proc is not None:
                self.guard.watch(r.proc.pid)
        if self.opts.release_sites:  # where locks are released: its own perf
            self.rel = futexwakes.start(perf.perf_path(), target.pid, self.raw, col.commands,
                                      self.guard.watch)
            if len(procs.targets) > 1:
                col.warn(f"--release-sites records only the first process (PID {target.pid})")
        for r in self.recorders:
            if not r.wait_ready():
                if target.alive():
                    r.early_failure()
                col.warn(f"{r.stem} record did not report being ready; the window may "
                         "include time before it recorded")
        self.load.start()

    def open(self) -> None:
        procs, col, child = self.procs, self.col, self.child
        if child is not None:  # the window opens as the command is let run
            child.release()
            self.target = procs.released(child)
            self.mono_start = child.released_ns if child.traced else time.monotonic_ns()
            self.t_start = time.time_ns() - (time.monotonic_ns() - self.mono_start)
            # The threads at the window's start, before the snapshots start (a thread the
            # command starts meanwhile was not there when the window opened)
            col.threads["start"] = listing(procs.all_targets())
            if not child.traced:
                col.warn("ptrace is not permitted here, so the command could not be held "
                         "until the recorders were ready: it ran "
                         f"{(self.mono_start - child.released_ns) / 1e9:.1f} s before the "
                         "window opened, and that time is not in the profile")
            procs.start(self.target, primary=True)
        else:
            self.t_start = time.time_ns()
            self.mono_start = time.monotonic_ns()
            col.threads["start"] = listing(procs.all_targets())
        self.main_cpu = time.thread_time()
        if self.streamer is not None:
            self.streamer.set_window(self.mono_start, None,
                                     [r["tid"] for r in col.threads["start"]["threads"]])
        procs.window_open = True
        procs.watch.start()
        col.window = Window(start_ns=self.t_start, mono_start_ns=self.mono_start,
                            perf_clock="mono")
        write_capture(self.raw, col, self.opts)
        time.sleep(0.1)
        for r in self.recorders:
            if self.target.alive():  # perf fails with ESRCH when the target is already gone
                r.early_failure()

    def close(self) -> None:
        procs, col, streamer = self.procs, self.col, self.streamer
        t_end = time.time_ns()
        mono_end = time.monotonic_ns()
        main_cpu = time.thread_time() - self.main_cpu
        self.stop.set()
        col.machine = self.load.stop() or {}
        stolen = machine_load.steal_note(col.machine)
        if stolen:
            col.warn(stolen)
        if col.window.mono_start_ns:  # nothing after the window's end is counted
            if streamer is not None:
                streamer.set_window(col.window.mono_start_ns, mono_end)
            col.threads["end"] = listing(procs.all_targets())
            if procs.counters is not None:
                col.threads["last"] = procs.counters.to_json()
        for r in self.recorders:  # all asked at once, before the samplers are waited for
            r.interrupt()
        procs.join()
        for r in self.recorders:
            r.stop()
        if procs.watch.is_alive():
            procs.watch.join(5)
        procs.watch.poll()  # the names at the end, and who exited
        if procs.counters is not None:  # read into the closing listing above
            procs.counters.close()
            procs.counters = None
        if streamer is not None:  # the chunks left, at the normal priority
            if self.attached:
                streamer.update_pids(procs.watch.pids())
            streamer.close_window()
            if streamer.error:
                col.warn(f"{streamer.error}: every chunk is folded after the window")
        self.mem.join(5)
        procs.join_owners()
        if procs.owners:
            col.owners = owner_stats(procs.owners)
        if self.rel is not None:
            col.owners["releases"] = futexwakes.finish(self.rel, col.warn)
        procs.close_logs()
        col.postprocess["samplers_cpu_s"] = samplers_cpu(procs, self.mem, main_cpu)
        col.window = Window(self.t_start, t_end, t_end - self.t_start, self.mono_start,
                            mono_end, "mono")
        record_results(col, self.recorders, procs.loops, self.mem)


def _wait(procs: Processes, opts: CollectOptions, col: Capture, stop: threading.Event,
          child: Launched | None, recorder: perf.PerfRecorder, m_start: float,
          progress: Callable[[Progress], None] | None,
          checkpoint: Callable[[], None] | None = None) -> None:
    deadline = None if opts.duration_s is None else m_start + opts.duration_s
    saved = m_start
    shown = 0.0
    target = procs.primary
    while not stop.is_set():
        now = time.monotonic()
        if checkpoint is not None and now - saved >= CHECKPOINT_S:
            checkpoint()
            saved = now
        if deadline is not None and now >= deadline:
            col.ended_by = col.ended_by or "duration"
            return
        if child is not None and child.ended():
            col.ended_by = "command exited"
            return
        if not procs.alive():
            if child is not None and child.ended():  # it exited since the check
                col.ended_by = "command exited"
                return
            col.ended_by = "target exited"
            if child is None:
                col.warn(f"PID {target.pid} exited during collection; kept what was "
                         "collected until then" if len(procs.targets) == 1 else
                         "every process exited during collection; kept what was collected "
                         "until then")
            if target.reused():
                col.warn(f"PID {target.pid} now belongs to another process (PID reuse, "
                         "detected by its start time); it was not touched")
            return
        first = procs.loops[0] if procs.loops else None
        if first is not None and not first.is_alive() and first.start_error is not None:
            return
        if progress is not None and now - shown >= 0.25:
            shown = now
            st = merged_stats(procs.loops)
            progress(Progress(now - m_start, len(recorder.chunks()), st.snapshots,
                              sum(st.pauses_ms), st.failed))
        # A launched command's end is looked for every 20 ms: the window ends with it.
        tick = 0.25 if child is None else 0.02
        stop.wait(tick if deadline is None else min(tick, max(deadline - now, 0.0)))
    col.ended_by = col.ended_by or "signal"


__all__ = ["Progress", "collect", "observe", "open_targets", "spawn"]
