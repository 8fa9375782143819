"""Folders: raw collector text in, a ``Profile`` out.

One module per input format, each exposing ``NAME``, ``detect(head) -> bool`` (given the first
64 KiB of the input as text) and ``fold(path, options, profile) -> None``.  ``detect_format``
tries them in order; the order matters only for formats that share a prefix.
"""

from __future__ import annotations

from types import ModuleType
from typing import Protocol

from wallflame.errors import InputError
from wallflame.fold.options import FoldOptions
from wallflame.profile import Profile

#: The first line of a stack snapshot log (``collect`` writes it; the gdb and eu-stack folders
#: read it).  Here so that recognising a log does not import the log's reader.
LOG_MAGIC = "# wallflame-snapshots 1"


class Folder(Protocol):
    NAME: str

    def detect(self, head: str) -> bool: ...

    def fold(self, path: str, options: FoldOptions, profile: Profile) -> None: ...


def _modules() -> list[ModuleType]:
    from wallflame.fold import annotated, eustack, folded, gdb, perf, pmp

    return [annotated, pmp, perf, gdb, eustack, folded]  # pmp is strict, perf is lenient


def formats() -> list[str]:
    return [m.NAME for m in _modules()]


def folder(name: str) -> ModuleType:
    for m in _modules():
        if name == m.NAME:
            return m
    raise InputError(f"unknown format {name!r}", f"use one of: {', '.join(formats())}")


def detect_format(head: str, path: str) -> str:
    if not head.strip():
        raise InputError(f"{path}: empty input", "give a non-empty capture")
    for m in _modules():
        if m.detect(head):
            return str(m.NAME)
    raise InputError(
        f"{path}: format not recognised from its first lines",
        f"name it with --format ({', '.join(formats())})",
    )


def fold_file(path: str, options: FoldOptions, fmt: str | None = None) -> Profile:
    """Fold one input into a new profile, detecting its format unless ``fmt`` is given."""
    from wallflame.textio import head

    if fmt is None:
        if path == "-":
            raise InputError("cannot detect the format of standard input", "pass --format")
        fmt = detect_format(head(path), path)
    profile = Profile()
    folder(fmt).fold(path, options, profile)
    profile.meta.sources.append({"path": path, "format": fmt})
    return profile


__all__ = ["LOG_MAGIC", "FoldOptions", "Folder", "detect_format", "fold_file", "folder", "formats"]
