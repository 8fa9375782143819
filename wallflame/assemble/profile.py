"""The run's evidence merged into one profile: the chunks' on-CPU samples and scheduler
intervals (``wallflame.assemble.folding``), the snapshot logs, the owner logs and the release
sites, with the corrections the capture calls for.

Which evidence gives off-CPU time:

* ``pmp``: the snapshots (statistical: each blocked thread's snapshot weighs the time since its
  previous one), with lock identity.
* ``sched`` and ``both``: the scheduler's switch-out/switch-in intervals (exact).  With
  ``both`` the owner sampler's records (and the snapshots' /proc records) name the locks: a
  wait goes to a lock only when that thread was observed on it at that call site
  (``wallflame.fold.locks``).  The merged view never counts a blocked interval twice.

In both cases lock holders are only the stacks the owner sampler confirmed (the owner stopped
while it still held the lock), with the counts behind them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wallflame import procnames, stops, window
from wallflame.assemble.folding import Folding
from wallflame.assemble.meta import annotate
from wallflame.errors import ToolError, WallflameError
from wallflame.fold import FoldOptions, fold_file, locks, snapshots, target_output
from wallflame.fold.perf import chunks
from wallflame.locks import lockshare, releasesites
from wallflame.profile import Meta, Profile
from wallflame.rundir import OWNERS_LOG, RELEASES_DATA, SNAPSHOT_LOG, Capture


def _fold(path: Path, fmt: str, profile_meta_warn: list[str],
          options: FoldOptions | None = None) -> Profile | None:
    try:
        return fold_file(str(path), options or FoldOptions(), fmt)
    except WallflameError as e:
        profile_meta_warn.append(f"{path.name}: could not be folded: {e.format_message()}")
        return None


def logs(raw: Path, name: str) -> list[Path]:
    """``raw/NAME`` and, for a target of several processes, each other process's
    ``raw/STEM.PID.EXT`` (``collect.run``), in PID order after the first."""
    stem, _, ext = name.rpartition(".")
    more = [p for p in raw.glob(f"{stem}.*.{ext}") if p.name[len(stem) + 1:-len(ext) - 1]
            .isdigit()]
    first = [raw / name] if (raw / name).exists() else []
    return first + sorted(more, key=lambda p: int(p.name[len(stem) + 1:-len(ext) - 1]))


def lock_evidence(raw: Path, meta: Meta) -> locks.LockEvidence:
    """The lock evidence of the run: the owner logs and the snapshot logs' records naming a
    lock (their bad lines counted in ``meta``), one of each per process."""
    snaps = [r for log in logs(raw, SNAPSHOT_LOG)
             for r in snapshots.lock_records(str(log), meta)]
    return locks.read_evidence(logs(raw, OWNERS_LOG), snaps)


def count_once(meta: Meta, read: Meta) -> None:
    """Losses met again while reading the evidence: the snapshot folder counted the same
    lines when its profile is part of the run, so a kind already counted is not added."""
    for kind, loss in read.losses.items():
        meta.losses.setdefault(kind, loss)


def _attach_releases(profile: Profile, raw: Path, warnings: list[str]) -> None:
    """From a run's ``raw/releases.data`` (``collect.locks.futexwakes`` records it and runs its
    ``perf script``), when it has one."""
    from wallflame.collect import perf
    from wallflame.collect.locks import futexwakes as recorded

    if not (raw / RELEASES_DATA).exists():
        return
    try:
        script = recorded.write_script(perf.perf_path(), raw)
    except ToolError as e:
        warnings.append(f"release sites not read: {e}")
        return
    if script is None:
        warnings.append("release sites not read: perf script failed on raw/releases.data")
        return
    releasesites.attach(profile, script)


def _snapshot_format(backend: str) -> str:
    return "eu-stack" if backend in ("eu-stack", "libdw") else "gdb"  # libdw: eu-stack's text


def build_profile(raw: Path, cap: Capture, evidence: locks.LockEvidence,
                  folding: Folding) -> Profile:
    """``folding``: every chunk, folded (``Folding.fold_rest``).  ``evidence``: which locks
    were observed (``lock_evidence``)."""
    warnings: list[str] = []
    folded = folding.folded
    for name, code in folded.bad:
        warnings.append(f"perf script could not read {name} (exit {code})")
    warnings.extend(chunks.budget_warnings(cap))
    bad_chunks = len(folded.bad)
    pmp_profile = None
    backend = cap.pmp.backend if cap.pmp else cap.options.pmp_backend
    measured: list[Any] = [stops.stops_json(evidence.stops)]  # the tracer's own stop timings
    marks: list[Any] = []  # where the snapshots found threads blocked, for the scheduler's split
    for log in logs(raw, SNAPSHOT_LOG):  # one per process
        one = _fold(log, _snapshot_format(backend), warnings, FoldOptions(
            stops_window_ns=(cap.window.start_ns, cap.window.end_ns)
            if cap.window.end_ns > cap.window.start_ns else None, stop_marks=True))
        if one is not None:
            measured.append(one.meta.extra.pop(stops.MEASURED_STOPS, None))
            marks.extend(one.meta.extra.pop(stops.STOP_MARKS, None) or [])
            pmp_profile = one if pmp_profile is None else pmp_profile.merge(one)
    perf_profile, sched_profile = folding.folder.profiles(raw, cap, folded.done, marks)
    profile = Profile()
    if perf_profile is not None:
        profile.merge(perf_profile.on_cpu())
    if sched_profile is not None:
        off = locks.attribute(sched_profile.off_cpu(), evidence)
        profile.merge(off)
        profile.meta.extra["offcpu_source"] = "sched"
    if pmp_profile is not None:
        if sched_profile is None:  # snapshots alone, or no scheduler chunk was read
            profile.merge(pmp_profile.off_cpu())
            profile.meta.extra["offcpu_source"] = "pmp"
            locks.holders(profile, evidence, lockshare.wait_by_lock(profile))
        else:
            # Keep the snapshot evidence's metadata (pause, running time, counts).
            profile.meta.merge(pmp_profile.meta)
            # Threads that never switched, or whose switches had no stack: the snapshots.
            chunks.from_snapshots(profile, pmp_profile, sched_profile)
    _whole_window(profile, cap, sched_profile, pmp_profile)
    _attach_releases(profile, raw, warnings)  # where the observed locks were released
    annotate(profile, cap, warnings, bad_chunks)
    if cap.stopped_the_target():  # its ptrace stops are wallflame's, not the target's waits
        stops.separate(profile, "wallflame")
        stops.record_measured(profile, stops.merge_measured(measured), "wallflame")
        if cap.options.sampled_stacks:
            stops.bound_by_measured(profile)
    procnames.apply(profile, cap)  # several processes: threads named after them
    work = target_output.work_done(raw)
    if work is not None:
        profile.meta.extra["work"] = work
    return profile


def _whole_window(profile: Profile, cap: Capture, sched: Profile | None,
                  pmp: Profile | None) -> None:
    """On-CPU totals from the switches where the scheduler was recorded, and the whole window
    for threads that never switched (``wallflame.window``)."""
    if sched is None:
        window.kernel_runqueue(profile, cap.threads, cap.window.on_perf_clock(),
                               snapshots=pmp is not None)
        return
    exact = sched.meta.extra.get("sched_threads")
    if isinstance(exact, dict):
        window.exact_oncpu(profile, exact)
    bounds = cap.window.on_perf_clock()
    if bounds is not None:
        seen = set(sched.meta.threads) | {k.tid for k in profile.stacks if k.state == "on"}
        window.whole_window(profile, cap.threads, seen, pmp, bounds[1] - bounds[0])



__all__ = ["build_profile", "count_once", "lock_evidence", "logs"]
