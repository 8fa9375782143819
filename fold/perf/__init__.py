"""The ``perf script`` folder: on-CPU samples, scheduler records and losses, in one package.

``reader``: the text read in batches, the fast path for records in the common shape, parallel
folding of large files; ``state``: the line-by-line path and the tables both paths count into;
``lines``: parsing one line (headers, frames, event names); ``meta``: what a capture says about
itself (counts, unit, stack quality); ``switches``: ``sched_switch`` records to exact off-CPU
time; ``sampled_switches``: a scheduler capture whose call chains are a sample of the switches
(what ``collect`` records), to exact blocked and run-queue time, with ``sched_reader``,
``sched_thread``, ``sched_passes``, ``sched_clip``, ``sched_stops`` and ``sched_split``.

This module is the folder interface (``NAME``, ``detect``, ``fold``) ``wallflame.fold`` expects.
"""

from __future__ import annotations

from wallflame.fold.perf.reader import (
    NAME,
    detect,
    fold,
    fold_parallel,
    fold_stream,
)

__all__ = ["NAME", "detect", "fold", "fold_parallel", "fold_stream"]
