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
from typing import IO, Any

from wallflame import rundir
from wallflame.collect import budget, perf, releases, stream, threads
from wallflame.collect import machine as machine_load
from wallflame.collect.elfinfo import has_debug_info
from wallflame.collect.launch import Launched, end_child, runnable
from wallflame.collect.libdw import libdw_version
from wallflame.collect.memory import MemorySampler
from wallflame.collect.owners import OwnerSampler
from wallflame.collect.plan import (
    BudgetSource,
    CollectPlan,
    Machine,
    Request,
    Targets,
    needs_debug_info,
    needs_switch_rates,
    plan,
)
from wallflame.collect.pmp import PmpStats, SnapshotLoop, make_backend
from wallflame.collect.procs import Seen, Selection, Watch
from wallflame.collect.safety import Guard, ensure_running, pause_summary, spawn
from wallflame.collect.target import (
    Target,
    check_trace_access,
    open_target,
    own_tree,
    proc_name,
    read_stat,
    tracer_of,
)
from wallflame.errors import InputError, PermissionDenied, TargetError, WallflameError
from wallflame.rundir import (
    OWNERS_LOG,
    PERF_DATA,
    RAW,
    SCHED_DATA,
    SNAPSHOT_LOG,
    Capture,
    CollectOptions,
    Running,
    SnapshotStats,
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


def _memory_so_far(col: Capture, mem: MemorySampler) -> Capture:
    """``col`` with the memory samples taken until now (what a finish after a kill shows)."""
    start = mem.arenas_start
    col.memory = {"samples": list(mem.samples),
                  **({"arenas_start": start[0], "arenas": start[0]} if start else {})}
    return col


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


def open_targets(select: Selection, exclude: set[int]) -> tuple[list[Target], list[str]]:
    """Every member of ``select`` that can be profiled, and a note for each that cannot.  A
    PID named with ``--pid`` must be profilable (its error ends the collect); a member of a
    tree or cgroup that is not (a zombie, wallflame itself) is left out with a note."""
    targets: list[Target] = []
    notes: list[str] = []
    for pid in select.members():
        if pid in exclude:
            continue
        try:
            t = open_target(pid)
            check_trace_access(pid)
        except (TargetError, PermissionDenied) as e:
            if pid in select.pids or pid in select.trees:
                raise
            notes.append(f"PID {pid} left out: {e.message}")
            continue
        targets.append(t)
    if not targets:
        raise TargetError("no process to profile in what was named",
                          "check the PIDs (ps -e) or the cgroup's cgroup.procs")
    return targets, notes


def _not_ours(launched: int | None) -> Callable[[int], bool]:
    """A filter of members: never wallflame, its parents or the tools it starts (wallflame
    may run inside the cgroup it profiles), but a launched command and its children."""
    me = os.getpid()
    own = own_tree()

    def keep(pid: int) -> bool:
        if pid in own:
            return False
        p, hops = pid, 0
        while p > 1 and hops < 64:
            if p == launched:
                return True
            st = read_stat(p)
            if st is None:
                return True
            if st.ppid == me:
                return False
            p, hops = st.ppid, hops + 1
        return True

    return keep


def observe(request: Request, targets: Sequence[Target]) -> tuple[Targets, Machine]:
    """What ``plan`` needs of the targets and the machine, read from ``/proc`` (and perf's
    permissions); the switch rates only when the plan needs them (``needs_switch_rates``)."""
    machine = Machine(cpus=os.cpu_count() or 1, sched_allowed=perf.sched_allowed(),
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
    command line (``wallflame.streaming``), which folds perf's chunks while they are
    recorded; the capture's ``streaming`` (``collect.stream.StreamProcess``) then has it write
    the run directory.  Without it every chunk is folded by ``wallflame.finish``."""
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
    procs = _Processes(targets, select, the_plan, raw, col, stop, guard,
                       _not_ours(child.pid if child is not None else None))
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
            _final_check(t, col)
        guard.close()
        if child is not None:
            returncode, note = end_child(child)
            col.launched["returncode"] = returncode
            if note:
                col.warn(note)
    col.processes = procs.watch.to_json()
    write_capture(raw, col)
    return col


def _recorders(procs: _Processes, the_plan: CollectPlan, raw: Path) -> list[perf.PerfRecorder]:
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
            perf.chunk_seconds(opts.duration_s)), raw, perf.WAKE))
    sched = replace(perf.sched_options(opts.freq_hz, opts.sched_call_graph, opts.sched_stack_hz),
                    chunk_s=perf.chunk_seconds(opts.duration_s))
    if the_plan.sched_every_cpu:
        sched = replace(sched, system_wide=True, stack_period=opts.sched_stack_period or 1,
                        switch_filter=threads.wake_filter(tids, new, "prev_pid"))
    out.append(perf.PerfRecorder(perf.record_command(
        pids, raw / SCHED_DATA, sched, opts.duration_s), raw, "sched"))
    return out


def _log_name(base: str, target: Target, primary: bool) -> str:
    """``snapshots.log`` for the first process, ``snapshots.PID.log`` for each other one."""
    if primary:
        return base
    stem, _, ext = base.rpartition(".")
    return f"{stem}.{target.pid}.{ext}"


class _Processes:
    """The processes of a collect and their per-process collectors (snapshot loop, owner
    sampler), started for every process present when the window opens and for each one the
    watch finds during it."""

    def __init__(self, targets: list[Target], select: Selection, the_plan: CollectPlan,
                 raw: Path, col: Capture, stop: threading.Event, guard: Guard,
                 keep: Callable[[int], bool]) -> None:
        self.targets = targets
        self.opts = the_plan.settings
        self.raw, self.col, self.stop, self.guard = raw, col, stop, guard
        self.loops: list[SnapshotLoop] = []
        self.owners: list[OwnerSampler] = []
        self.logs: list[IO[str]] = []
        self.lock = threading.Lock()
        self.window_open = False
        # without a scheduler capture, each thread's last kernel counters: a thread that ends
        # within the window has its figures from them (``wallflame.window.kernel_runqueue``)
        self.counters = threads.LastCounters() if the_plan.kernel_counters else None
        self.watch = Watch(lambda: [p for p in select.members() if keep(p)], stop,
                           self._joined, named=(*select.pids, *select.trees),
                           each_round=self._each_round)
        self.watch.poll()
        self.joined: list[Target] = []

    def _each_round(self, pids: list[int]) -> None:
        if self.counters is not None and self.window_open:
            for pid in pids:
                self.counters.poll(pid)

    @property
    def primary(self) -> Target:
        return self.targets[0]

    def all_targets(self) -> list[Target]:
        with self.lock:
            return [*self.targets, *self.joined]

    def alive(self) -> bool:
        return any(t.alive() for t in self.all_targets())

    def released(self, child: Launched) -> Target:
        """The launched command's process once it runs the command (``Launched.release``):
        the same process as the held one (same PID and start time), with the command's own
        name and executable (or, if it has already ended, the command it was given)."""
        held = self.targets[0]
        try:
            target = open_target(child.pid, allow_own_child=True)
        except WallflameError:  # ended at once
            target = replace(held, comm=Path(child.command[0]).name[:15],
                             exe=shutil.which(child.command[0]) or child.command[0],
                             cmdline=list(child.command))
        with self.lock:
            self.targets[0] = target
        self.col.target = target.identity()
        return target

    def start(self, target: Target, primary: bool, warm: bool = False) -> None:
        """The snapshot loop and the owner sampler of one process; ``warm``: before the window
        opens, so the libdw backend's start-up is done first (``LibdwBackend.warm``)."""
        opts, raw, col = self.opts, self.raw, self.col
        if not opts.snapshots:
            return
        backend = make_backend(opts.pmp_backend, target.pid)
        if primary:
            col.commands["pmp"] = backend.commands
        log = open(raw / _log_name(SNAPSHOT_LOG, target, primary), "w",  # noqa: SIM115
                   encoding="utf-8")
        assert opts.pmp_rate_hz is not None  # planned with the snapshots
        # without the scheduler, the snapshots' records split the blocked time: read alone
        loop = SnapshotLoop(target, backend, log, opts.pmp_rate_hz, opts.max_pause_ms,
                            self.stop, self.guard.watch, warm=warm, read_alone=not opts.sched)
        with self.lock:
            self.logs.append(log)
            self.loops.append(loop)
        loop.start()
        loop.started.wait(120)
        if loop.start_error is not None:
            if primary:
                raise loop.start_error
            col.warn(f"PID {target.pid}: snapshots could not start: {loop.start_error}")
            return
        if opts.owner_rate_hz <= 0:
            return
        olog = open(raw / _log_name(OWNERS_LOG, target, primary), "w",  # noqa: SIM115
                    encoding="utf-8")
        owners = OwnerSampler(target.pid, olog, opts.owner_rate_hz, self.stop,
                              alive=target.alive, start_ticks=target.start_ticks,
                              stopped_before=target.stopped_at_start, probe=opts.holder_stacks)
        with self.lock:
            self.logs.append(olog)
            self.owners.append(owners)
        owners.start()
        if primary:
            col.commands["owners"] = [
                f"read /proc/PID/task/*/syscall of each process at {opts.owner_rate_hz:g}/s; "
                "for a futex waiter, the lock (40-56 bytes) and 1 KiB of its stack from "
                "/proc/PID/mem"
                + ("; the lock's owner thread stopped, the lock read again and the owner "
                   "unwound (libdw dwfl_getthread_frames)" if opts.holder_stacks else
                   " (no owner stopped: --no-holder-stacks)"),
                "nm --defined-only -S -C [-D] <each mapped ELF>"]

    def _joined(self, seen: Seen) -> None:
        """A process the watch found after the first round (forked, or moved into the
        cgroup): its collectors start now."""
        if not self.window_open or self.stop.is_set():
            return
        try:
            target = open_target(seen.pid, allow_own_child=True)
        except WallflameError as e:
            self.col.warn(f"PID {seen.pid} ({seen.name}) appeared during the window but "
                          f"could not be profiled: {e.message}")
            return
        if target.start_ticks != seen.start_ticks:
            return  # gone, and its PID already reused
        with self.lock:
            self.joined.append(target)
        if seen.joined == "moved":
            self.col.warn(f"PID {seen.pid} ({seen.name}) moved into the cgroup during the "
                          "window: it has snapshots but no perf events (perf follows the "
                          "processes named at the start and what they fork)")
        self.guard.add_target(target.pid, target.start_ticks, target.stopped_at_start)
        try:
            self.start(target, primary=False)
        except WallflameError as e:
            self.col.warn(f"PID {seen.pid}: snapshots could not start: {e.message}")

    def join(self) -> None:
        for loop in list(self.loops):
            loop.join(30)

    def join_owners(self) -> None:
        for o in list(self.owners):
            o.join(5)

    def close_logs(self) -> None:
        for f in self.logs:
            f.close()


def _run(procs: _Processes, the_plan: CollectPlan, raw: Path, col: Capture,
         stop: threading.Event, guard: Guard, child: Launched | None,
         progress: Callable[[Progress], None] | None,
         stream_command: Sequence[str] | None) -> None:
    target = procs.primary
    opts = the_plan.settings
    mem = MemorySampler(target.pid, stop, alive=target.alive)
    for t in procs.targets[1:]:
        guard.add_target(t.pid, t.start_ticks, t.stopped_at_start)
    attached = child is None
    recorders = _recorders(procs, the_plan, raw)
    # Attached on every CPU, the target's samples are picked out by PID: every process the
    # watch has seen by the time a chunk is read.  A launched command's perf only records
    # its own processes (with those it starts): no PID to pick out.
    # A window that is one chunk of every recorder has no chunk to fold before it closes:
    # the collect folds them itself after it (``perf.one_chunk``).
    streamer = None if stream_command is None or not the_plan.streamed \
        else stream.StreamProcess(
        list(stream_command), raw.parent, raw, [r.stem for r in recorders],
        procs.watch.pids() if attached else None, opts.inlined,
        any(r.stem == perf.WAKE for r in recorders))
    if streamer is not None:
        col.streaming = streamer  # type: ignore[attr-defined]

    def checkpoint() -> None:
        write_capture(raw, _so_far(col, mem, procs), opts)
        if streamer is not None and attached:
            streamer.update_pids(procs.watch.pids())
    ksyms = bool(recorders) and perf.save_kallsyms(raw)
    for r in recorders:
        col.commands[f"{r.stem}_record"] = r.command
        col.commands[f"{r.stem}_script"] = perf.script_command(
            Path(f"raw/{r.stem}.data.<chunk>"), r.stem == "sched", kallsyms=ksyms,
            inline=opts.inlined)
    rel: releases.ReleaseRecorder | None = None
    load = machine_load.LoadMeter(procs.watch.pids)
    t_start = time.time_ns()
    mono_start = time.monotonic_ns()
    m_start = time.monotonic()
    main_cpu = time.thread_time()
    try:
        mem.start()
        # Snapshots first: a persistent gdb's attach (symbol loading) is not in the window.  A
        # launched command is held until the recorders are ready: its snapshots start once it
        # runs the command's own program (below).
        if child is None:
            for i, t in enumerate(procs.targets):
                procs.start(t, primary=i == 0, warm=True)
        for r in recorders:
            r.start(target.pid)
            if r.proc is not None:
                guard.watch(r.proc.pid)
        if opts.release_sites:  # where locks are released: its own perf (collect.releases)
            rel = releases.start(perf.perf_path(), target.pid, raw, col.commands, guard.watch)
            if len(procs.targets) > 1:
                col.warn(f"--release-sites records only the first process (PID {target.pid})")
        for r in recorders:
            if not r.wait_ready():
                if target.alive():
                    r.early_failure()
                col.warn(f"{r.stem} record did not report being ready; the window may "
                         "include time before it recorded")
        load.start()
        if child is not None:  # the window opens as the command is let run
            child.release()
            target = procs.released(child)
            mono_start = child.released_ns if child.traced else time.monotonic_ns()
            t_start = time.time_ns() - (time.monotonic_ns() - mono_start)
            # The threads at the window's start, before the snapshots start (a thread the
            # command starts meanwhile was not there when the window opened)
            col.threads["start"] = _listing(procs.all_targets())
            if not child.traced:
                col.warn("ptrace is not permitted here, so the command could not be held "
                         "until the recorders were ready: it ran "
                         f"{(mono_start - child.released_ns) / 1e9:.1f} s before the window "
                         "opened, and that time is not in the profile")
            procs.start(target, primary=True)
        else:
            t_start = time.time_ns()
            mono_start = time.monotonic_ns()
            col.threads["start"] = _listing(procs.all_targets())
        m_start = mono_start / 1e9
        main_cpu = time.thread_time()
        if streamer is not None:
            streamer.set_window(mono_start, None,
                                [r["tid"] for r in col.threads["start"]["threads"]])
        procs.window_open = True
        procs.watch.start()
        col.window = Window(start_ns=t_start, mono_start_ns=mono_start, perf_clock="mono")
        write_capture(raw, col, opts)
        time.sleep(0.1)
        for r in recorders:
            if target.alive():  # perf fails with ESRCH when the target is already gone
                r.early_failure()
        _wait(procs, opts, col, stop, child, recorders[0], m_start, progress, checkpoint)
    finally:
        t_end = time.time_ns()
        mono_end = time.monotonic_ns()
        main_cpu = time.thread_time() - main_cpu
        stop.set()
        col.machine = load.stop() or {}
        stolen = machine_load.steal_note(col.machine)
        if stolen:
            col.warn(stolen)
        if col.window.mono_start_ns:  # nothing after the window's end is counted
            if streamer is not None:
                streamer.set_window(col.window.mono_start_ns, mono_end)
            col.threads["end"] = _listing(procs.all_targets())
            if procs.counters is not None:
                col.threads["last"] = procs.counters.to_json()
        for r in recorders:  # all asked at once, before the samplers are waited for
            r.interrupt()
        procs.join()
        for r in recorders:
            r.stop()
        if procs.watch.is_alive():
            procs.watch.join(5)
        procs.watch.poll()  # the names at the end, and who exited
        if procs.counters is not None:  # read into the closing listing above
            procs.counters.close()
            procs.counters = None
        if streamer is not None:  # the chunks left, at the normal priority
            if attached:
                streamer.update_pids(procs.watch.pids())
            streamer.close_window()
            if streamer.error:
                col.warn(f"{streamer.error}: every chunk is folded after the window")
        mem.join(5)
        procs.join_owners()
        if procs.owners:
            col.owners = _owner_stats(procs.owners)
        if rel is not None:
            col.owners["releases"] = releases.finish(rel, col.warn)
        procs.close_logs()
        col.postprocess["samplers_cpu_s"] = _samplers_cpu(procs, mem, main_cpu)
        col.window = Window(t_start, t_end, t_end - t_start, mono_start, mono_end, "mono")
        _record_results(col, recorders, procs.loops, mem)
    first = procs.loops[0] if procs.loops else None
    if first is not None and first.start_error is not None:
        raise first.start_error


def _listing(targets: list[Target]) -> dict[str, Any]:
    """``threads.listing`` of every process of the target, as one listing."""
    parts = [threads.listing(t.pid) for t in targets]
    return {"mono_ns": parts[0]["mono_ns"] if parts else time.monotonic_ns(),
            "clock": parts[0]["clock"] if parts else threads.clock(),
            "threads": [r for p in parts for r in p["threads"]]}


def _so_far(col: Capture, mem: MemorySampler, procs: _Processes) -> Capture:
    """``col`` as a finish after a kill would need it: the memory samples and the processes
    seen until now."""
    col.processes = procs.watch.to_json()
    return _memory_so_far(col, mem)


def _samplers_cpu(procs: _Processes, mem: MemorySampler, main_s: float) -> dict[str, float]:
    """CPU seconds of the collect's own threads that run beside the target: each snapshot
    loop and owner sampler (summed over the processes) and the memory and process watchers,
    from their start (the snapshot loops and owner samplers start before the window) to the
    window's end; and the main thread's during the window.  The folding process and the
    perfs are in ``postprocess.cost``."""
    return {"snapshots": round(sum(lp.cpu_s for lp in procs.loops), 3),
            "owners": round(sum(o.cpu_s for o in procs.owners), 3),
            "memory": round(mem.cpu_s, 3), "watch": round(procs.watch.cpu_s, 3),
            "main_in_window": round(max(main_s, 0.0), 3)}


def _owner_stats(samplers: list[OwnerSampler]) -> dict[str, Any]:
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


def _wait(procs: _Processes, opts: CollectOptions, col: Capture, stop: threading.Event,
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
            st = _merged_stats(procs.loops)
            progress(Progress(now - m_start, len(recorder.chunks()), st.snapshots,
                              sum(st.pauses_ms), st.failed))
        # A launched command's end is looked for every 20 ms: the window ends with it.
        tick = 0.25 if child is None else 0.02
        stop.wait(tick if deadline is None else min(tick, max(deadline - now, 0.0)))
    col.ended_by = col.ended_by or "signal"


def _merged_stats(loops: list[SnapshotLoop]) -> PmpStats:
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


def _record_results(col: Capture, recorders: list[perf.PerfRecorder],
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
        st = _merged_stats(loops)
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
        col.warn(f"{len(left)} threads of PID {target.pid} were left stopped after "
                 "collection and were resumed")
    tracer = tracer_of(target.pid)
    # A target that has just exited (launch mode: the command ended with the window) may show
    # as a zombie whose exit the snapshot thread saw while attaching: nothing left to harm.
    if tracer and target.alive():
        col.warn(f"PID {target.pid} is traced by PID {tracer} ({proc_name(tracer)}) after "
                 "collection")


__all__ = ["Progress", "collect", "observe", "open_targets", "spawn"]
