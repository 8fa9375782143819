"""The processes of a collect: which are profiled, and each one's snapshot loop and owner
sampler, started for every process present when the window opens and for each one found
during it."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from wallflame.collect import threads
from wallflame.collect.launch import Launched
from wallflame.collect.locks.owners import OwnerSampler
from wallflame.collect.plan import CollectPlan
from wallflame.collect.procs import Seen, Selection, Watch
from wallflame.collect.safety import Guard
from wallflame.collect.snapshots import SnapshotLoop, make_backend
from wallflame.collect.target import (
    Target,
    check_trace_access,
    open_target,
    own_tree,
    read_stat,
)
from wallflame.errors import PermissionDenied, TargetError, WallflameError
from wallflame.rundir import OWNERS_LOG, SNAPSHOT_LOG, Capture


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


def not_ours(launched: int | None) -> Callable[[int], bool]:
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


def log_name(base: str, target: Target, primary: bool) -> str:
    """``snapshots.log`` for the first process, ``snapshots.PID.log`` for each other one."""
    if primary:
        return base
    stem, _, ext = base.rpartition(".")
    return f"{stem}.{target.pid}.{ext}"


class Processes:
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
        log = open(raw / log_name(SNAPSHOT_LOG, target, primary), "w",  # noqa: SIM115
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
        olog = open(raw / log_name(OWNERS_LOG, target, primary), "w",  # noqa: SIM115
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


def listing(targets: list[Target]) -> dict[str, Any]:
    """``threads.listing`` of every process of the target, as one listing."""
    parts = [threads.listing(t.pid) for t in targets]
    return {"mono_ns": parts[0]["mono_ns"] if parts else time.monotonic_ns(),
            "clock": parts[0]["clock"] if parts else threads.clock(),
            "threads": [r for p in parts for r in p["threads"]]}



__all__ = ["Processes", "listing", "log_name", "not_ours", "open_targets"]
