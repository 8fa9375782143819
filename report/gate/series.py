"""One side of ``wallflame check``: a run directory, a capture, or a series of runs (a
directory whose subdirectories are run directories, e.g. repeated runs of a baseline).

Each run becomes a ``wallflame.report.gate.Run`` (with its per-slice figures and
``work.json`` when the run directory has them); the runs of a side are also merged into one
profile for the differential report, with the windows added up so that its seconds per second
are the series' average.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from wallflame.errors import InputError
from wallflame.profile import Profile, merge_all
from wallflame.report.diff.compare import _meta_digest
from wallflame.report.gate.quantities import Run, make_run, read_work_file
from wallflame.report.gate.slicefile import Compute, load_slices
from wallflame.rundir import is_run_dir, load_run_dir

#: A series larger than this is refused (a typo such as the parent of every run ever kept).
MAX_RUNS = 200


def run_paths(path: str) -> list[str]:
    """The runs a side names: itself (a run directory or a file), or the run directories
    inside it, sorted by name."""
    if not os.path.isdir(path) or is_run_dir(path):
        return [path]
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        raise InputError(f"{path}: unreadable: {e.strerror}", "check the path") from None
    runs = [os.path.join(path, n) for n in names if is_run_dir(os.path.join(path, n))]
    if not runs:
        raise InputError(f"{path}: neither a run directory nor a directory of run directories",
                         "give what wallflame collect wrote (or a folder of such runs)")
    if len(runs) > MAX_RUNS:
        raise InputError(f"{path}: {len(runs)} runs (at most {MAX_RUNS})",
                         "name a smaller series")
    return runs


def load_side(path: str, label: str, cut: re.Pattern[str] | None = None,
              load_file: Callable[[str], Profile] | None = None,
              compute_slices: Compute | None = None) -> tuple[list[Run], Profile]:
    """A side's runs and their merged profile (``cut``: see ``make_run``).  A side given as
    a capture file is folded by ``load_file``, and a run directory finished before it had
    ``slices.json`` gets its per-slice figures from ``compute_slices`` (the check command
    passes the folders' functions: the report stage does not fold)."""
    runs: list[Run] = []
    profiles: list[Profile] = []
    paths = run_paths(path)
    for p in paths:
        name = label if len(paths) == 1 else f"{label}/{os.path.basename(p)}"
        if os.path.isdir(p):
            profile = load_run_dir(p)
            slices, work = load_slices(p, compute_slices), read_work_file(p)
        elif load_file is not None:
            profile, slices, work = load_file(p), None, None
        else:
            raise InputError(f"{p}: not a run directory", "give what wallflame collect wrote")
        runs.append(make_run(name, profile, _meta_digest(profile), slices, work, cut))
        profiles.append(profile)
    if len(profiles) == 1:
        return runs, profiles[0]
    merged = merge_all(profiles)
    merged.meta.window_ns = sum(p.meta.window_ns for p in profiles)
    return runs, merged


__all__ = ["MAX_RUNS", "load_side", "run_paths"]
