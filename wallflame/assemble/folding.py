"""Perf's chunks folded into the run's evidence: the one path every chunk takes.

A ``Folding`` feeds the chunks in ``raw/`` one at a time, each stem's in their order, through
``collect.stream.Folded.process`` (``perf script`` piped into one
``wallflame.fold.perf.chunks.ChunkFolder``).  The collect's folding process
(``wallflame.assemble.streaming``) makes one from its specification and folds each chunk once
perf has closed it (``step``); a run folded after its collect (the collect's own folding, or
``wallflame finish``) makes one from its capture (``of_capture``), with the window, the
processes and the recordings the capture describes.  Either way ``fold_rest`` folds every
chunk not yet folded once the recorders have stopped, and ``wallflame.assemble.assembly``
builds the run directory from the same folder.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wallflame.collect import perf, stream
from wallflame.fold.perf.chunks import ChunkFolder
from wallflame.rundir import Capture

#: The recordings a collect makes (``collect.perf``).
STEMS = ("perf", perf.WAKE, "sched")


class Folding:
    """The chunks of the recordings ``stems`` folded so far (``folded``) into ``folder``."""

    def __init__(self, raw: Path, folder: ChunkFolder, stems: list[str],
                 pids: str | Callable[[], list[int]] | None, inline: bool,
                 wakes: bool) -> None:
        """``stems``: the recordings, in the order their chunks are read (others are left
        out).  ``pids``: the processes whose on-CPU samples are kept (``Folded``).
        ``inline``: perf resolves inlined frames.  ``wakes``: a wake-up recording is folded."""
        self.raw = raw
        self.folder = folder
        self.stems = [s for s in stems if s in STEMS]
        if wakes:
            folder.expect_wakes()
        self.folded = stream.Folded(raw, folder, pids, inline=inline)
        #: The recorders have stopped: the chunks perf was still writing are complete too.
        self.final = False
        self.started: list[int] = []  # when each chunk's folding started, CLOCK_MONOTONIC ns

    @classmethod
    def of_capture(cls, raw: Path, cap: Capture) -> Folding:
        """Every chunk the collect described by ``cap`` recorded, to be folded now, with the
        window and the threads at its start the capture describes."""
        folder = ChunkFolder()
        folder.window_from(cap)
        stems = ["perf", "sched"] if cap.options.sched else ["perf"]
        wakes = cap.options.sched and bool(perf.data_chunks(raw, perf.WAKE))
        if wakes:  # the wake-ups first: each interval is resolved at once
            stems = [perf.WAKE, *stems]
        return cls(raw, folder, stems, _pids(cap), cap.options.inlined, wakes)

    def step(self) -> bool:
        """Fold the chunks ready now (every one left once ``final``); returns whether there
        were any."""
        did = False
        for stem in self.stems:
            for c in stream.ready_chunks(self.raw, stem, self.final, self.folded.done[stem]):
                self.started.append(time.monotonic_ns())
                self.folded.process(stem, c)
                did = True
        return did

    def fold_rest(self, closed_ns: int | None) -> None:
        """The recorders have stopped: every chunk left is folded, at the normal priority.
        ``closed_ns``: when the window closed (CLOCK_MONOTONIC, perf's ``mono`` clock;
        ``None``: not known), for the cost: the chunks whose folding started before it, and
        the time from it to the last chunk folded."""
        if self.final:
            return
        self.final = True
        cost = self.folded.cost
        cost.priority.append("after the window: normal")
        self.step()
        if closed_ns is not None:
            cost.during_window = sum(1 for t in self.started if t < closed_ns)
            cost.after_window_s = max(0, time.monotonic_ns() - closed_ns) / 1e9

    def costs(self) -> dict[str, Any]:
        """What folding the chunks cost, as ``meta.json`` ``postprocess`` holds it."""
        return self.folded.costs()

    def close(self) -> None:
        self.folded.close()


def _pids(cap: Capture) -> str | None:
    """The processes whose on-CPU samples a capture keeps: none to pick out for a launched
    command (its perf recorded only its processes), else every process of the target."""
    if cap.launched:
        return None
    pids = [p.get("pid") for p in cap.processes if isinstance(p, dict)]
    if not pids:
        pids = [cap.target.get("pid")]
    ok = [str(p) for p in pids if isinstance(p, int) and not isinstance(p, bool)]
    return ",".join(ok) or None


__all__ = ["STEMS", "Folding"]
