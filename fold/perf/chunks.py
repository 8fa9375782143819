"""The folders that perf's chunks are fed to, and what a run's evidence is made of from them.

A collect records in chunks (``perf record --switch-output``) and ``wallflame.collect.stream``
runs ``perf script`` on each as soon as it is complete; the text goes to one ``ChunkFolder``
per run, stem by stem: the on-CPU samples into a profile, the scheduler's switches and
wake-ups into one ``SampledSched`` that carries open intervals from chunk to chunk.  The
collect is handed the folder by its caller (the collect stage never imports this one), and
``wallflame.assemble`` takes the run's profiles from it (``profiles``) or, for a run that was
not streamed, feeds it every chunk in ``raw/`` first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

from wallflame.fold.options import FoldOptions
from wallflame.fold.perf.reader import fold_stream
from wallflame.fold.perf.sampled_switches import SampledSched
from wallflame.fold.perf.sched_reader import read_switches
from wallflame.fold.perf.sched_split import BIN_NS
from wallflame.names import UNSAMPLED
from wallflame.profile import OFF, Profile, StackKey
from wallflame.rundir import PERF_SCRIPT, SCHED_BINS, WAKE_STEM, Capture
from wallflame.strata import shares


class ChunkFolder:
    """Every chunk's text folded so far: ``oncpu`` (the on-CPU samples) and ``sched`` (the
    scheduler's intervals, the wake-ups among them)."""

    def __init__(self, options: FoldOptions | None = None) -> None:
        self.options = options or FoldOptions()
        self.oncpu = Profile()
        self.sched = SampledSched(self.options.get_rules(), self.options.kernel)

    def feed(self, stem: str, stream: IO[bytes], switches: Any = None) -> None:
        """The ``perf script`` text of one chunk of the recording ``stem`` (``switches``: the
        scheduler's switch records read from the chunk itself, ``read_switches``; its text
        then holds the rest)."""
        if stem == "sched":
            self.sched.feed(stream, switches=switches)  # type: ignore[arg-type]
        elif stem == WAKE_STEM:
            self.sched.feed_wakes(stream)  # type: ignore[arg-type]
        else:
            part = Profile()
            fold_stream(stream, self.options, part, PERF_SCRIPT)  # type: ignore[arg-type]
            self.oncpu.merge(part)

    def read_switches(self, chunk: Path) -> Any:
        """The switch records of a scheduler chunk, read from the file for ``feed``
        (``None``: they are to be read from its text)."""
        return read_switches(chunk)

    def expect_wakes(self) -> None:
        """A wake-up capture is (or will be) fed: no warning that it is missing."""
        self.sched.expect_wakes()

    def set_window(self, start: int, end: int | None = None,
                   at_start: Iterable[int] | None = None) -> None:
        """The window on perf's clock (``end`` once it has closed) and the threads that
        existed when it opened (``SampledSched.set_window``)."""
        self.sched.set_window(start, end, at_start)

    def window_from(self, cap: Capture) -> None:
        """The window and the threads at its start, as the capture describes them (a run
        folded again after its collect)."""
        window = cap.window.on_perf_clock()
        if window is None:
            return
        listing = cap.threads.get("start")
        rows = listing.get("threads") if isinstance(listing, dict) else None
        tids = [int(r["tid"]) for r in rows or [] if isinstance(r, dict) and "tid" in r]
        self.set_window(*window, tids if rows is not None else None)

    def profiles(self, raw: Path, cap: Capture, done: dict[str, list[str]],
                 marks: list[Any] | None = None) -> tuple[Profile | None, Profile | None]:
        """The on-CPU profile and the scheduler's off-CPU profile (``None`` when nothing of
        that recording was fed: ``done`` lists the chunks that were, by stem); writes
        ``raw/sched.bins.json``.  ``marks``: the snapshots' blocked threads at their stops
        (``wallflame.stops.STOP_MARKS``), for the split of sampled stacks."""
        opts = cap.options
        on = self.oncpu if done.get("perf") else None
        off = None
        if opts.sched and done.get("sched"):
            off = Profile()
            # The stops' instants are CLOCK_MONOTONIC: perf's clock only when it recorded with it
            self.sched.set_marks(marks or [] if cap.window.perf_clock == "mono" else [])
            self.sched.finish(off, {"stack_hz": opts.sched_stack_hz or 0.0,
                                    "stack_period": opts.sched_stack_period,
                                    "call_graph": opts.sched_call_graph},
                              cap.window.on_perf_clock(),
                              cap.threads if cap.window.perf_clock == "mono" else None)
            write_sched_bins(raw, self.sched)
        return on, off


def write_sched_bins(raw: Path, sched: SampledSched) -> None:
    """``raw/sched.bins.json``: blocked time per wait class in bins of the perf clock, and
    the scheduler's lost records.  The scheduler's text is not kept, so this is what the
    per-slice wait figures of ``wallflame check`` are cut from (``wallflame.fold.slices``)."""
    data = {"version": 1, "bin_ns": BIN_NS, "lost": sched.lost,
            "classes": {c: sorted(b.items()) for c, b in sorted(sched.class_bins.items())}}
    path = raw / SCHED_BINS
    try:
        path.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
    except OSError:
        path.unlink(missing_ok=True)  # the check then takes sampling error for the waits


def budget_warnings(cap: Capture) -> list[str]:
    """What a run over its data-rate budget says (planned over it, or wrote more)."""
    pp = cap.postprocess
    plan, cost = pp.get("budget") or {}, pp.get("cost") or {}
    out = []
    limit = float(plan.get("budget_mb_per_s") or 0)
    if plan.get("over_budget"):
        out.append(f"the target switched context {plan.get('switches_per_s', 0):,} times a "
                   f"second before the window: recording every switch alone needs about "
                   f"{plan.get('expected_mb_per_s', 0):.1f} MB/s, over --max-data-mb-per-s "
                   f"{limit:g}; stacks were taken at the lowest rate (1 per second per thread)")
    window_s = cap.window.window_ns / 1e9
    wrote = float(cost.get("perf_data_mb") or 0)
    if limit and window_s > 0 and wrote / window_s > 1.1 * limit:
        out.append(f"perf wrote {wrote / window_s:.1f} MB/s, over --max-data-mb-per-s "
                   f"{limit:g}")
    return out


def from_snapshots(profile: Profile, pmp: Profile, sched: Profile | None) -> None:
    """Give ``profile`` the snapshots' off-CPU stacks where the scheduler capture has none:
    threads it never saw switch (blocked for the whole window: no switch, no interval), and
    the blocked time of threads none of whose switches carried a stack (``[unsampled]``),
    which is split over that thread's snapshot stacks in their proportions (DWARF stacks,
    callers of glibc kept).  Unsampled time of a thread no snapshot caught blocked stays as
    it is."""
    if sched is None:
        return
    seen = set(sched.meta.threads)
    by_tid: dict[int, list[tuple[StackKey, int]]] = {}
    for k, w in pmp.stacks.items():
        if k.state == OFF and k.tid:
            by_tid.setdefault(k.tid, []).append((k, w))
    whole = sorted(t for t in by_tid if t not in seen)
    for tid in whole:
        for k, w in by_tid[tid]:
            profile.add(k, w)
    filled = 0
    for key in [k for k in profile.stacks if k.frames == (UNSAMPLED,) and k.state == OFF]:
        parts = sorted(by_tid.get(key.tid, []))
        if not sum(w for _, w in parts):
            continue
        for k, part in shares(parts, profile.stacks.pop(key)):
            profile.add(k, part)
        filled += 1
    if whole:
        profile.meta.warn(f"{len(whole)} threads did not switch during the window: their "
                          "off-CPU time comes from the snapshots")
    if filled:
        profile.meta.warn(f"{filled} threads had blocked time but no switch sampled with a "
                          "stack: it is split over their snapshot stacks")


__all__ = ["ChunkFolder", "budget_warnings", "from_snapshots", "write_sched_bins"]
