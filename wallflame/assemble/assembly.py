"""Raw captures -> the run directory: its folded files, meta.json, summary.json, slices.json and
timeline, built by ``assemble`` alone.

Reads only ``RUN/raw/`` (with ``raw/capture.json``, a ``wallflame.rundir.Capture`` written
by ``collect``), so a run can be assembled again later with newer folders.  Every run takes
the same route: its chunks are folded by a ``wallflame.assemble.folding.Folding`` (the
collect's folding process hands over the one it folded the chunks with while they were
recorded; otherwise one is made from the capture), every chunk not yet folded is folded by it
then, and the run's profile is built from it (``wallflame.assemble.profile``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from wallflame import rundir, window
from wallflame.assemble.folding import Folding
from wallflame.assemble.meta import Clock, postprocess_meta
from wallflame.assemble.profile import build_profile, count_once, lock_evidence
from wallflame.errors import WallflameError
from wallflame.fold import locks
from wallflame.folded import write_folded
from wallflame.output import open_output
from wallflame.profile import Meta, Profile
from wallflame.rundir import Capture, RunMeta, read_capture, write_capture
from wallflame.timeline import Timeline


def assemble(run_dir: str | Path, folding: Folding | None = None,
             after_collect: bool = False) -> Profile:
    """Build (or rebuild) the run directory's derived files from ``raw/``.

    ``folding``: the chunks the collect's folding process folded while they were recorded
    (what that cost is added to ``raw/capture.json``'s ``postprocess``); without it every
    chunk is folded now.  ``after_collect``: this is the collect's own folding, just after its
    window (``collect.perf.one_chunk``, or its folding process failed): what the folding cost
    goes into ``postprocess`` as the folding process puts it, unless the capture has it
    already."""
    out = Path(run_dir)
    raw = out / rundir.RAW
    clock = Clock()
    cap = read_capture(raw)
    streamed = folding is not None
    if folding is None:
        folding = Folding.of_capture(raw, cap)
    win = cap.window  # perf's clock is CLOCK_MONOTONIC with ``mono``
    folding.fold_rest(win.mono_end_ns if win.mono_end_ns and win.perf_clock == "mono"
                      else None)
    folding.close()
    if streamed or (after_collect and "cost" not in cap.postprocess):
        cap.postprocess.update(folding.costs())
        write_capture(raw, cap)
    read = Meta()
    evidence = lock_evidence(raw, read)
    profile = build_profile(raw, cap, evidence, folding)
    count_once(profile.meta, read)
    tl = _timeline(out, cap, profile, folding, evidence)
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
    if tl is not None:
        _write_blame(out, tl)
    _write(out, cap, profile, clock, streamed)
    if tl is not None:
        _write_timeline(out, tl)
    return profile


def _write_blame(out: Path, tl: Timeline) -> None:
    """``RUN/blame.folded``: the critical path of every wait (``wallflame.critpath``), when
    the wake-ups were recorded; an older one is removed when they were not."""
    from wallflame import critpath

    path = out / rundir.BLAME
    found = critpath.blame(tl)
    try:
        if found is None:
            path.unlink(missing_ok=True)
        else:
            critpath.write(path, found)
    except OSError as e:
        print(f"wallflame: warning: {path} not written: {e}", file=sys.stderr)


def _write(out: Path, cap: Capture, profile: Profile, clock: Clock, streamed: bool) -> None:
    """The folded files, memory.json, meta.json (with what assembling the run cost since
    ``clock`` started), summary.json and slices.json."""
    from wallflame.report.findings import summarize

    with open_output(str(out / rundir.ONCPU)) as f:
        write_folded(profile.on_cpu(), f, annotate=True)
    with open_output(str(out / rundir.OFFCPU)) as f:
        write_folded(profile.off_cpu(), f, annotate=True)
    with open_output(str(out / rundir.MEMORY)) as f:
        f.write(json.dumps(cap.memory, indent=1, sort_keys=True) + "\n")
    meta = RunMeta.of(cap, profile.meta, postprocess_meta(cap, clock, streamed))
    with open_output(str(out / rundir.META)) as f:
        f.write(rundir.meta_json(meta))
    if cap.machine:  # the machine's load over the window, as reading the run gives it
        profile.meta.extra.setdefault("machine", cap.machine)
    # memory.json as reading the run gives it (meta.json holds no copy of it)
    profile.meta.extra.setdefault("memory", cap.memory)
    with open_output(str(out / rundir.SUMMARY)) as f:
        f.write(json.dumps(summarize(profile, run_dir=str(out)), indent=1, sort_keys=True)
                + "\n")
    _write_slices(out)


def _write_slices(out: Path) -> None:
    """``RUN/slices.json``: per-slice figures for ``wallflame check``'s noise estimates
    (``wallflame.fold.slices``).  A run without them is still a complete run."""
    from wallflame.fold.slices import write_slices

    try:
        write_slices(out)
    except (OSError, WallflameError) as e:
        print(f"wallflame: warning: {out / 'slices.json'} not written: {e}", file=sys.stderr)


def _timeline(out: Path, cap: Capture, profile: Profile, folding: Folding,
              evidence: locks.LockEvidence) -> Timeline | None:
    """The run's evidence in time order (``wallflame.timeline``); the on-CPU samples perf
    took outside the window are taken out of ``profile`` (the scheduler's intervals were
    clipped by its folder).  ``None`` when it cannot be built: the run is still complete,
    its reports have no time axis."""
    from wallflame import timebuild

    raw = out / rundir.RAW
    try:
        sched = folding.folder.sched
        tl = timebuild.build(raw, cap, profile, sched.log, sched.rules, evidence,
                             cap.stopped_the_target(), sched.wakers)
    except (OSError, WallflameError) as e:
        print(f"wallflame: warning: {out / 'timeline.json.gz'} not built: {e}",
              file=sys.stderr)
        return None
    bounds = cap.window.on_perf_clock()
    if bounds is not None:
        timebuild.drop_outside(profile, tl, *bounds)
    return tl


def _write_timeline(out: Path, tl: Timeline) -> None:
    from wallflame import timeline

    try:
        timeline.write(out, tl)
    except (OSError, WallflameError) as e:
        print(f"wallflame: warning: {out / timeline.TIMELINE} not written: {e}",
              file=sys.stderr)


__all__ = ["assemble"]
