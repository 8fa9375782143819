"""A finished raw capture -> the run directory's folded files, meta.json and summary.json.

Reads only ``RUN/raw/`` (with ``raw/capture.json``, a ``wallflame.rundir.Capture`` written
by ``collect``), so a run can be finished again later (``finish(run_dir)``) with newer
folders.

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

import json
import sys
import time
from pathlib import Path
from typing import Any

from wallflame import procnames, rundir, stops, window
from wallflame.errors import ToolError, WallflameError
from wallflame.fold import FoldOptions, fold_file, locks, snapshots, target_output
from wallflame.fold.perf import chunks
from wallflame.folded import write_folded
from wallflame.locks import lockshare, releasesites
from wallflame.output import open_output
from wallflame.profile import Meta, Profile
from wallflame.rundir import (
    OWNERS_LOG,
    RELEASES_DATA,
    SNAPSHOT_LOG,
    Capture,
    RunMeta,
    read_capture,
)


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


def _evidence(raw: Path, meta: Meta) -> locks.LockEvidence:
    """The lock evidence of the run: the owner logs and the snapshot logs' records naming a
    lock (their bad lines counted in ``meta``), one of each per process."""
    snaps = [r for log in logs(raw, SNAPSHOT_LOG)
             for r in snapshots.lock_records(str(log), meta)]
    return locks.read_evidence(logs(raw, OWNERS_LOG), snaps)


def _count_once(meta: Meta, read: Meta) -> None:
    """Losses met again while reading the evidence: the snapshot folder counted the same
    lines when its profile is part of the run, so a kind already counted is not added."""
    for kind, loss in read.losses.items():
        meta.losses.setdefault(kind, loss)


def _attach_releases(profile: Profile, raw: Path, warnings: list[str]) -> None:
    """From a run's ``raw/releases.data`` (``collect.futexwakes`` records it and runs its
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
                  folded: Any = None) -> Profile:
    """``folded``: the chunks folded while recording (``wallflame.collect.stream.Folded``);
    without it every chunk is folded now.  ``evidence``: which locks were observed
    (``_evidence``)."""
    warnings: list[str] = []
    if folded is None:
        folded = _fold_chunks(raw, cap)
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
    perf_profile, sched_profile = folded.folder.profiles(raw, cap, folded.done, marks)
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
    _annotate_meta(profile, cap, warnings, bad_chunks)
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


def _stack_copy_bytes(command: object) -> int:
    """The user stack perf copied per DWARF stack, from its recorded command
    (``--call-graph dwarf,SIZE``; 8 KiB, perf's own default, when it does not say)."""
    if isinstance(command, list):
        for arg in command:
            kind, _, size = str(arg).partition(",")
            if kind == "dwarf" and size.isdigit():
                return int(size)
    return 8192


def _annotate_meta(profile: Profile, cap: Capture, warnings: list[str],
                   bad_chunks: int) -> None:
    meta = profile.meta
    if cap.window.window_ns:
        meta.window_ns = cap.window.window_ns
    opts = cap.options
    meta.rates["perf_hz"] = 0.0 if cap.reconstructed else float(opts.freq_hz)
    pmp = cap.pmp
    if pmp:
        meta.rates["pmp_hz"] = float(pmp.final_rate_hz or pmp.rate_hz)
        pause = pmp.pause
        if isinstance(pause, dict):  # which backend, and what its pause figure measures
            pause = {**pause, "backend": pmp.backend,
                     **({"measure": pmp.pause_measure} if pmp.pause_measure else {})}
        meta.extra["pause"] = pause
        meta.extra["pmp_consistent"] = pmp.consistent
        meta.extra["attach_ms"] = pmp.attach_ms
        if pmp.failed:
            meta.lose("failed snapshots", 0, pmp.failed, "; ".join(pmp.errors[:2]))
    perf_info = cap.perf
    for stem in ("perf", "sched", "wake"):
        rec = cap.perf_recording(stem)
        if rec.get("lost_chunks"):
            meta.lose(f"{stem} record lost chunks", 0, int(rec["lost_chunks"]),
                      "; ".join(rec.get("lost_lines", [])[:2]))
    if bad_chunks:
        meta.lose("unreadable perf chunks", 0, bad_chunks)
    missing: dict[str, str] = {}
    known = not cap.reconstructed  # a made-up description knows no unwinding
    if known and opts.call_graph == "fp":
        missing["oncpu"] = ("frame-pointer unwinding: a sample inside code built without "
                            "frame pointers (glibc, most distribution libraries) loses its "
                            "caller; --call-graph dwarf keeps it")
    if known and perf_info.get("sched") and opts.sched_call_graph == "fp":
        missing["offcpu"] = ("scheduler stacks unwound with frame pointers lose the caller of "
                             "a blocking glibc function (glibc has no frame pointers); "
                             "--sched-call-graph dwarf keeps it")
    if known and perf_info.get("sched") and opts.sched_call_graph == "dwarf":
        kib = _stack_copy_bytes(cap.commands.get("sched_record")) // 1024
        missing.setdefault("offcpu", f"DWARF unwinding copies {kib} KiB of stack per "
                           "scheduler stack: deeper stacks are cut at that depth")
    meta.extra["missing_frames"] = missing
    ended = cap.ended_by
    if ended == "target exited":
        meta.lose("target exited during collection", 0)
    for w in [*cap.warnings, *cap.problems, *warnings]:
        meta.warn(w)
    meta.extra["collect"] = {"target": cap.target, "ended_by": ended,
                             "off_cpu": opts.off_cpu}


def finish(run_dir: str | Path, folded: Any = None, after_collect: bool = False) -> Profile:
    """Build (or rebuild) the run directory's derived files from ``raw/`` (``folded``: what
    ``collect`` already folded while recording).  ``after_collect``: this is the collect's
    own folding, just after its window, with no folding process (``collect.perf.one_chunk``,
    or that process failed): what the folding cost goes into ``postprocess`` as the folding
    process puts it (``cost``, ``packed``), unless the capture has it already."""
    from wallflame.report.summary import build_summary

    out = Path(run_dir)
    raw = out / rundir.RAW
    cap = read_capture(raw)
    from wallflame.collect import stream

    t_finish = stream.Clock()
    streamed = folded
    if folded is None:
        folded = _fold_chunks(raw, cap)
        if after_collect and "cost" not in cap.postprocess:
            _collect_cost(raw, cap, folded)
    read = Meta()
    evidence = _evidence(raw, read)
    profile = build_profile(raw, cap, evidence, folded)
    _count_once(profile.meta, read)
    tl = _timeline(out, cap, profile, folded, evidence)
    source = profile.meta.extra.get("oncpu_source")
    exact = profile.meta.extra.get("sched_threads" if source == "switches" else
                                   "schedstat_threads")
    if source in ("switches", "schedstat") and isinstance(exact, dict):
        # the samples left in the window: the same totals
        window.exact_oncpu(profile, exact, str(source))
        bounds = cap.window.on_perf_clock()
        if tl is not None and bounds is not None:
            from wallflame import timebuild

            timebuild.scale_samples(profile, tl, *bounds)
    with open_output(str(out / rundir.ONCPU)) as f:
        write_folded(profile.on_cpu(), f, annotate=True)
    with open_output(str(out / rundir.OFFCPU)) as f:
        write_folded(profile.off_cpu(), f, annotate=True)
    with open_output(str(out / rundir.MEMORY)) as f:
        f.write(json.dumps(cap.memory, indent=1, sort_keys=True) + "\n")
    meta = RunMeta.of(cap, profile.meta, stream.postprocess_meta(cap, t_finish, streamed))
    with open_output(str(out / rundir.META)) as f:
        f.write(rundir.meta_json(meta))
    with open_output(str(out / rundir.SUMMARY)) as f:
        f.write(json.dumps(build_summary(profile), indent=1, sort_keys=True) + "\n")
    _write_slices(out)
    if tl is not None:
        _write_timeline(out, tl)
    return profile


def _write_slices(out: Path) -> None:
    """``RUN/slices.json``: per-slice figures for ``wallflame check``'s noise estimates
    (``wallflame.fold.slices``).  A run without them is still a complete run."""
    from wallflame.fold.slices import write_slices

    try:
        write_slices(out)
    except (OSError, WallflameError) as e:
        print(f"wallflame: warning: {out / 'slices.json'} not written: {e}", file=sys.stderr)


def _collect_cost(raw: Path, cap: Capture, folded: Any) -> None:
    """The folding's cost, done by the collect after its window, in the capture (``finish``'s
    ``after_collect``)."""
    cost = folded.cost
    cost.priority = ["after the window: normal"]
    end = cap.window.mono_end_ns
    if end and cap.window.perf_clock == "mono":  # perf's clock is CLOCK_MONOTONIC
        cost.after_window_s = max(0, time.monotonic_ns() - end) / 1e9
    cap.postprocess.update(folded.costs())
    rundir.write_capture(raw, cap)


def _fold_chunks(raw: Path, cap: Capture) -> Any:
    """Every chunk in ``raw/`` folded now (a run that was not streamed, or finished again),
    with the window and the threads at its start the capture describes."""
    from wallflame.collect import stream

    folder = chunks.ChunkFolder()
    folder.window_from(cap)
    return stream.process_capture(raw, cap, folder)


def _timeline(out: Path, cap: Capture, profile: Profile, folded: Any,
              evidence: locks.LockEvidence) -> Any:
    """The run's evidence in time order (``wallflame.timeline``); the on-CPU samples perf
    took outside the window are taken out of ``profile`` (the scheduler's intervals were
    clipped by its folder).  ``None`` when it cannot be built: the run is still complete,
    its reports have no time axis."""
    from wallflame import timebuild

    raw = out / rundir.RAW
    try:
        sched = getattr(getattr(folded, "folder", None), "sched", None)
        tl = timebuild.build(raw, cap, profile, getattr(sched, "log", None),
                             sched.rules if sched is not None else FoldOptions().get_rules(),
                             evidence, cap.stopped_the_target())
    except (OSError, WallflameError) as e:
        print(f"wallflame: warning: {out / 'timeline.json.gz'} not built: {e}",
              file=sys.stderr)
        return None
    window = cap.window.on_perf_clock()
    if window is not None:
        timebuild.drop_outside(profile, tl, *window)
    return tl


def _write_timeline(out: Path, tl: Any) -> None:
    from wallflame import timeline

    try:
        timeline.write(out, tl)
    except (OSError, WallflameError) as e:
        print(f"wallflame: warning: {out / timeline.TIMELINE} not written: {e}",
              file=sys.stderr)


__all__ = ["build_profile", "finish"]
