"""The run directory: what ``collect`` writes and ``report``, ``diff`` and ``check`` read.

Layout (names are the contract; see docs/design.md, "The run directory"):

    RUN/meta.json       target, commands, tool versions, window, rates, losses, pauses, warnings
    RUN/summary.json    the machine-readable result (``wallflame.report.summary``)
    RUN/oncpu.folded    annotated folded (``# wallflame-folded 1``), on-CPU stacks
    RUN/offcpu.folded   annotated folded, off-CPU stacks (wait class, lock, holder)
    RUN/memory.json     RSS and thread count over the window, glibc arena mappings
    RUN/slices.json     per-slice totals for ``check``'s noise (``wallflame.report.slices``)
    RUN/raw/            the raw captures, never deleted (perf.data chunks, snapshot log, ...)
    RUN/report.html     written by ``wallflame report`` / ``collect --report``
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable
from typing import Any

from wallflame.errors import InputError
from wallflame.fold import FoldOptions, fold_file
from wallflame.folded import meta_from_json
from wallflame.profile import Loss, Meta, Profile, merge_all

META = "meta.json"
SUMMARY = "summary.json"
ONCPU = "oncpu.folded"
OFFCPU = "offcpu.folded"
MEMORY = "memory.json"
RAW = "raw"


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    return os.path.isdir(path) and os.path.exists(os.path.join(path, META))


def read_json(path: str | os.PathLike[str]) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        raise InputError(f"{path}: missing", "is this a complete run directory?") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{path}: unreadable JSON: {e}", "re-run wallflame collect") from None


def load_run_dir(path: str | os.PathLike[str]) -> Profile:
    p = os.fspath(path)
    options = FoldOptions()
    parts = [fold_file(os.path.join(p, name), options, "wallflame")
             for name in (ONCPU, OFFCPU) if os.path.exists(os.path.join(p, name))]
    profile = merge_all(parts) if parts else Profile()
    meta = read_json(os.path.join(p, META))
    metas = [part.meta for part in parts]
    if isinstance(meta, dict) and isinstance(meta.get("profile"), dict):
        saved = meta_from_json(meta["profile"])
        profile.meta.window_ns = saved.window_ns or profile.meta.window_ns
        profile.meta.merge(saved)
        metas.append(saved)
    _count_once(profile.meta, metas)
    if os.path.exists(os.path.join(p, MEMORY)):
        profile.meta.extra["memory"] = read_json(os.path.join(p, MEMORY))
    profile.meta.extra.setdefault("run_dir", os.path.normpath(p))
    return profile


def _count_once(meta: Meta, copies: list[Meta]) -> None:
    """Both folded files and meta.json carry the run's metadata: a count seen in several
    copies is the same count (the largest copy), not their sum."""
    for attr in ("samples", "losses"):
        keys = {k for m in copies for k in getattr(m, attr)}
        merged = getattr(meta, attr)
        for k in keys:
            best = max((getattr(m, attr)[k] for m in copies if k in getattr(m, attr)),
                       key=lambda v: v.count if isinstance(v, Loss) else v)
            merged[k] = dataclasses.replace(best) if isinstance(best, Loss) else best


def load_inputs(paths: Iterable[str], options: FoldOptions | None = None,
                fmt: str | None = None) -> Profile:
    """Run directories, captures and folded files, merged into one profile."""
    opts = options or FoldOptions()
    profiles = []
    for path in paths:
        if os.path.isdir(path):
            if not is_run_dir(path):
                raise InputError(f"{path}: not a run directory (no {META})",
                                 "give a directory written by wallflame collect, or a file")
            profiles.append(load_run_dir(path))
        else:
            profiles.append(fold_file(path, opts, fmt))
    if not profiles:
        raise InputError("no input given", "name a run directory or a capture file")
    if len(profiles) == 1:
        return profiles[0]  # what merging it into an empty profile would give, without a copy
    return merge_all(profiles)
