"""Work a program reports over time: its progress lines, and the work done in each slice of a
window (``wallflame check`` judges CPU per unit of work with it; ``fold.slices`` keeps it per
slice of a run).

A program reports work with JSON objects on stdout, one a line: a numeric ``t_ns``
(CLOCK_MONOTONIC nanoseconds, the clock of perf's timestamps) and a cumulative numeric
``work`` (docs/check.md).
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from pathlib import Path

from wallflame.rundir import is_number, target_json


def work_progress(stdout: Path) -> list[tuple[int, float]]:
    """``(t_ns, work so far)`` from the progress lines a program prints on stdout: JSON
    objects with a numeric ``t_ns`` (CLOCK_MONOTONIC nanoseconds, the clock of perf's
    timestamps) and a cumulative numeric ``work``."""
    out: list[tuple[int, float]] = []
    for d in target_json(stdout, "t_ns"):
        t, w = d.get("t_ns"), d.get("work")
        if isinstance(t, int) and not isinstance(t, bool) and is_number(w):
            out.append((t, float(w)))
    out.sort()
    return out



#: How many of the first (last) two progress points' intervals the work may be extrapolated
#: before (after) them: a launched program's window opens when it starts, and its first
#: progress line comes one period later plus its start-up (250 ms + a few on the samples), so
#: one interval alone would leave such a run without per-slice work.
EXTRAPOLATE_INTERVALS = 2


def _work_at(progress: list[tuple[int, float]], t: int) -> float | None:
    """Work done by time ``t``, linearly interpolated; extrapolated from the first (last) two
    progress points up to ``EXTRAPOLATE_INTERVALS`` of their intervals before (after) them.
    ``None`` further out."""
    if not progress:
        return None
    if t < progress[0][0] or t > progress[-1][0]:
        if len(progress) < 2:
            return None
        (ta, wa), (tb, wb) = progress[:2] if t < progress[0][0] else progress[-2:]
        edge = ta if t < progress[0][0] else tb
        if tb <= ta or abs(t - edge) > EXTRAPOLATE_INTERVALS * (tb - ta):
            return None
        return max(0.0, wa + (wb - wa) * (t - ta) / (tb - ta))
    i = bisect_right([p[0] for p in progress], t)
    if i >= len(progress):
        return progress[-1][1]
    (t0, w0), (t1, w1) = progress[i - 1], progress[i]
    return w0 + (w1 - w0) * (t - t0) / (t1 - t0) if t1 > t0 else w1



def work_in_slices(progress: list[tuple[int, float]], t0: int, t1: int, k: int
                   ) -> list[float] | None:
    """Work done in each of ``k`` equal slices of ``[t0, t1)``, interpolated between
    progress points; ``None`` unless the points span the whole window."""
    marks = [_work_at(progress, t0 + (t1 - t0) * j // k) for j in range(k + 1)]
    done = [m for m in marks if m is not None]
    if len(done) != len(marks):
        return None
    return [max(0.0, b - a) for a, b in itertools.pairwise(done)]


__all__ = ["work_in_slices", "work_progress"]
