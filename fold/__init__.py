"""Folders: raw collector text in, a ``Profile`` out.

One module per input format, each exposing ``NAME``, ``detect(head) -> bool`` (given the first
64 KiB of the input as text) and ``fold(path, options, profile) -> None``.  ``detect_format``
tries them in order; the order matters only for formats that share a prefix.

An input whose first lines are none of them (perf's own warnings in a ``perf script > f 2>&1``,
a file cut in the middle of a record, a stray header line) is recognised from the lines after
that leading noise, up to ``MAX_SKIPPED`` lines and never more than the lines left after them;
the folder still reads every line (and counts what it cannot use, never attaching a record's
orphan frames to the next one), and the profile says which lines detection looked past.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from types import ModuleType
from typing import Protocol

from wallflame.errors import InputError
from wallflame.fold.options import FoldOptions
from wallflame.profile import Profile

#: Lines of leading noise detection looks past.
MAX_SKIPPED = 100


class Folder(Protocol):
    NAME: str

    def detect(self, head: str) -> bool: ...

    def fold(self, path: str, options: FoldOptions, profile: Profile) -> None: ...


def _modules() -> list[ModuleType]:
    from wallflame.fold import annotated, eustack, foreign_folded, gdb, perf, ptpmp

    return [annotated, ptpmp, perf, gdb, eustack, foreign_folded]  # pmp is strict, perf is lenient


def formats() -> list[str]:
    return [m.NAME for m in _modules()]


def folder(name: str) -> ModuleType:
    from wallflame.fold import foreign_folded

    if name == foreign_folded.NAME:  # most inputs: without importing the other folders
        return foreign_folded
    for m in _modules():
        if name == m.NAME:
            return m
    raise InputError(f"unknown format {name!r}", f"use one of: {', '.join(formats())}")


def _match(head: str) -> str | None:
    """The first format in ``_modules()``'s order whose ``detect`` takes ``head``: those of
    ``heads.ORDER`` without importing their folders, then folded stacks."""
    from wallflame.fold import foreign_folded, heads

    for name, detect in heads.ORDER:
        if detect(head):
            return name
    return foreign_folded.NAME if foreign_folded.detect(head) else None


def recognise(head: str, path: str) -> tuple[str, int]:
    """The format of an input from its ``head``, and how many leading lines had to be looked
    past to recognise it (0: it starts with its data)."""
    if not head.strip():
        raise InputError(f"{path}: empty input", "give a non-empty capture")
    fmt = _match(head)
    if fmt is not None:
        return fmt, 0
    lines = head.split("\n")[:-1]  # the last line of a head may be cut
    left = sum(1 for ln in lines if ln.strip())
    offset = 0
    for skipped, line in enumerate(lines[:MAX_SKIPPED], 1):
        offset += len(line) + 1
        left -= 1 if line.strip() else 0
        if skipped == len(lines) or not lines[skipped].strip():
            continue  # the data starts on a line with text
        if left < max(2, skipped):
            break  # noise must not outweigh what is recognised
        fmt = _match(head[offset:])
        if fmt is not None:
            return fmt, skipped
    raise InputError(
        f"{path}: format not recognised from its first lines",
        f"name it: wallflame fold --format F (F: {', '.join(formats())}), whose output "
        "wallflame report reads",
    )


def detect_format(head: str, path: str) -> str:
    return recognise(head, path)[0]


def fold_file(path: str, options: FoldOptions, fmt: str | None = None) -> Profile:
    """Fold one input into a new profile, detecting its format unless ``fmt`` is given."""
    from wallflame.textio import head

    skipped = 0
    first = ""
    if fmt is None:
        if path == "-":
            raise InputError("cannot detect the format of standard input", "pass --format")
        text = head(path)
        fmt, skipped = recognise(text, path)
        first = text.split("\n", 1)[0].strip()
    profile = Profile()
    folder(fmt).fold(path, options, profile)
    if skipped:
        lines = "line 1" if skipped == 1 else f"lines 1-{skipped}"
        profile.meta.warn(f"{path}: {lines} before the {fmt} data looked past to recognise "
                          f"the format (the first: {first[:80]!r})")
    profile.meta.sources.append({"path": path, "format": fmt})
    return profile


def load_inputs(paths: Iterable[str], options: FoldOptions | None = None,
                fmt: str | None = None) -> Profile:
    """Run directories, captures and folded files, merged into one profile."""
    from wallflame.profile import merge_all

    opts = options or FoldOptions()
    profiles = []
    for path in paths:
        if os.path.isdir(path):
            from wallflame.rundir import META, is_run_dir, load_run_dir

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


__all__ = ["MAX_SKIPPED", "FoldOptions", "Folder", "detect_format", "fold_file",
           "folder", "formats", "load_inputs", "recognise"]
