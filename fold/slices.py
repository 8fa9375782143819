"""Per-slice figures of a run, computed from its ``raw/`` captures: the within-run noise
``wallflame check`` needs.

A run's window is cut into ``K`` consecutive slices of equal length (by the timestamps of the
perf samples in ``raw/perf.script``).  For each slice this module keeps the on-CPU total and
sample count, the inclusive on-CPU weight of every function above a small share of the run,
the off-CPU weight per wait class (when the scheduler was recorded: ``raw/sched.script``, or
the blocked time per class in bins that ``wallflame collect`` keeps, ``raw/sched.bins.json``)
and the work done (from progress lines in ``raw/target.stdout``, ``wallflame.progress``).  The
spread of a quantity over the slices measures how much it moves within the run (scheduling,
load, phases of the program), which sampling error alone does not (the method of batch means).

``finish`` writes them to ``RUN/slices.json`` (``write_slices``); ``report.gate.slicefile``
reads that file (and, through the check command, has them computed here for a run finished
before the file existed).  Each slice's text is folded by the same folder as the whole run, so names
agree with ``oncpu.folded``.  Scheduler intervals that cross a slice boundary are closed at the
slice's last record (text) or split at the bins' edges (bins): per-slice off-CPU figures are
used only for their relative spread.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from bisect import bisect_right
from pathlib import Path
from typing import Any

from wallflame.errors import WallflameError
from wallflame.fold import FoldOptions, fold_file
from wallflame.profile import OFF, ON, WAIT_CLASSES, Profile
from wallflame.progress import work_in_slices, work_progress
from wallflame.rundir import (
    PERF_SCRIPT,
    RAW,
    SCHED_BINS,
    SCHED_SCRIPT,
    SLICES,
    SLICES_VERSION,
    TARGET_STDOUT,
)
from wallflame.waitclasses import FALLBACK

#: Slices per run: enough degrees of freedom for a spread, slices long enough (about 0.5 s
#: of a 5 s run) that a function's weight in one slice is not mostly sampling noise.
DEFAULT_K = 10
#: Functions kept per slice: those with at least this share of the run's on-CPU weight ...
MIN_SHARE = 0.002
#: ... and at most this many of them (the heaviest).
MAX_FUNCTIONS = 400

_TIME = re.compile(rb"\s(\d+\.\d+):")


def _record_time(rec: bytes) -> int | None:
    head = rec.split(b"\n", 1)[0]
    cut = head.find(b": ")
    found = _TIME.findall(head[:cut + 1] if cut >= 0 else head)
    if not found:
        return None
    sec, _, frac = found[-1].partition(b".")
    return int(sec) * 1_000_000_000 + int((frac + b"000000000")[:9])


def _records(path: Path) -> list[tuple[int | None, bytes]]:
    data = path.read_bytes().replace(b"\r\n", b"\n")
    return [(_record_time(r), r) for r in data.split(b"\n\n") if r.strip()]


def _fold_slices(recs: list[tuple[int | None, bytes]], edges: list[int]) -> list[Profile]:
    """Fold the records falling in each slice (a record without a time stays with the
    previous one) with the ``perf`` folder."""
    k = len(edges) - 1
    parts: list[list[bytes]] = [[] for _ in range(k)]
    i = 0
    for t, rec in recs:
        if t is not None:
            i = min(k - 1, max(0, bisect_right(edges, t) - 1))
        parts[i].append(rec)
    out = []
    with tempfile.TemporaryDirectory(prefix="wallflame-slices-") as tmp:
        for j, part in enumerate(parts):
            path = os.path.join(tmp, f"{j}.script")
            with open(path, "wb") as f:
                f.write(b"\n\n".join(part) + b"\n\n" if part else b"")
            if not part:
                out.append(Profile())
                continue
            try:
                out.append(fold_file(path, FoldOptions(), "perf"))
            except WallflameError:
                out.append(Profile())
    return out


def compute_slices(run_dir: str | os.PathLike[str], k: int = DEFAULT_K) -> dict[str, Any] | None:
    """The per-slice figures of a run directory, from its ``raw/``; ``None`` without perf
    samples with timestamps."""
    raw = Path(run_dir) / RAW
    perf_script = raw / PERF_SCRIPT
    if not perf_script.exists():
        return None
    recs = _records(perf_script)
    times = [t for t, _ in recs if t is not None]
    if len(times) < 2 * k or max(times) <= min(times):
        return None
    t0, t1 = min(times), max(times) + 1
    edges = [t0 + (t1 - t0) * j // k for j in range(k + 1)]
    on_parts = _fold_slices(recs, edges)
    totals = [_on_totals(p) for p in on_parts]
    run_fn: dict[str, int] = {}
    for _, fn, _ in totals:
        for name, w in fn.items():
            run_fn[name] = run_fn.get(name, 0) + w
    run_on = sum(t for t, _, _ in totals) or 1
    keep = sorted((n for n, w in run_fn.items() if w >= MIN_SHARE * run_on),
                  key=lambda n: (-run_fn[n], n))[:MAX_FUNCTIONS]
    out: dict[str, Any] = {
        "version": SLICES_VERSION, "k": k, "t0_ns": t0, "t1_ns": t1,
        "on": [t for t, _, _ in totals], "samples": [n for _, _, n in totals],
        "functions": {n: [fn.get(n, 0) for _, fn, _ in totals] for n in sorted(keep)},
    }
    sched = raw / SCHED_SCRIPT
    sched_lost = 0
    if sched.exists():
        off_parts = _fold_slices(_records(sched), edges)
        out["wait"] = {c: [_off_class(p, c) for p in off_parts] for c in WAIT_CLASSES}
        sched_lost = _lost(_records(sched))
    else:
        binned = _read_bins(raw / SCHED_BINS)
        if binned is not None:
            width, classes, sched_lost = binned
            out["wait"] = {c: _rebin(classes.get(c, []), width, edges) for c in WAIT_CLASSES}
    out["lost"] = {"perf": _lost(recs), "sched": sched_lost}
    work = work_in_slices(work_progress(raw / TARGET_STDOUT), t0, t1, k)
    if work is not None:
        out["work"] = work
    return out


_LOST = re.compile(rb"PERF_RECORD_LOST.*?lost (\d+)")


def _read_bins(path: Path) -> tuple[int, dict[str, list[tuple[int, int]]], int] | None:
    """``raw/sched.bins.json`` (``wallflame.fold.perf.chunks.write_sched_bins``): the bin
    width, ``class -> [(bin index, ns)]`` and the scheduler's lost records; ``None`` when
    missing or not in that form."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(d, dict) or d.get("version") != 1:
        return None
    width, lost, classes = d.get("bin_ns"), d.get("lost", 0), d.get("classes")
    if not (isinstance(width, int) and width > 0 and isinstance(lost, int)
            and isinstance(classes, dict)):
        return None
    out: dict[str, list[tuple[int, int]]] = {}
    for cls, pairs in classes.items():
        if not isinstance(pairs, list) or not all(
                isinstance(p, list) and len(p) == 2 and all(type(x) is int for x in p)
                and p[1] >= 0 for p in pairs):
            return None
        out[str(cls)] = [(int(b), int(ns)) for b, ns in pairs]
    return width, out, max(0, lost)


def _rebin(bins: list[tuple[int, int]], width: int, edges: list[int]) -> list[int]:
    """Time in bins of ``width`` ns (bin ``b`` covers ``[b width, (b + 1) width)``) summed
    into the slices between ``edges``, each bin split in proportion to its overlap.  What
    lies outside the slices (the scheduler's recorder starts before the first on-CPU sample
    and stops after the last) is in no slice: piled onto the first or the last, it would
    make them look busier than the rest.  The run's totals keep it."""
    k = len(edges) - 1
    out = [0.0] * k
    for b, ns in bins:
        lo, hi = b * width, (b + 1) * width
        j = max(0, bisect_right(edges, lo) - 1)
        while j < k and edges[j] < hi:
            part = min(hi, edges[j + 1]) - max(lo, edges[j])
            if part > 0:
                out[j] += ns * part / width
            j += 1
    return [round(x) for x in out]


def _lost(recs: list[tuple[int | None, bytes]]) -> int:
    return sum(int(m) for _, r in recs if b"PERF_RECORD_LOST" in r
               for m in _LOST.findall(r))


def _on_totals(p: Profile) -> tuple[int, dict[str, int], int]:
    total = 0
    fn: dict[str, int] = {}
    for key, w in p.stacks.items():
        if key.state != ON:
            continue
        total += w
        for name in set(key.frames):
            fn[name] = fn.get(name, 0) + w
    n = p.meta.samples.get("perf") or sum(v for kk, v in p.meta.samples.items()
                                          if kk.startswith("perf"))
    return total, fn, int(n)


def _off_class(p: Profile, cls: str) -> int:
    return sum(w for key, w in p.stacks.items()
               if key.state == OFF and (key.wait or FALLBACK) == cls)


def write_slices(run_dir: str | os.PathLike[str]) -> None:
    """Write ``RUN/slices.json`` (nothing when the run has no timed perf samples)."""
    data = compute_slices(run_dir)
    path = Path(run_dir) / SLICES
    if data is None:
        path.unlink(missing_ok=True)
        return
    from wallflame.output import open_output

    with open_output(str(path)) as f:
        f.write(json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n")


__all__ = ["DEFAULT_K", "compute_slices", "write_slices"]
