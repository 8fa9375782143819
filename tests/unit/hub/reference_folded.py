"""The references the native reading of folded stacks (``_speedups.Interner``) is held to, for
the tests only: ``str.split`` for its ``split``, and every line of a plain folded file through
``foreign_folded.fold``'s own line reader for its ``fold_plain``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wallflame.profile import StackKey
from wallflame.textio import iter_lines


def split(s: str) -> tuple[str, ...]:
    """``Interner.split``."""
    return tuple(s.split(";"))


def frame_splitter(interner: Any = None) -> Callable[[str], tuple[str, ...]]:
    """``speedups.frame_splitter``: ``split``."""
    return split


def fold_plain(path: str, interner: Any, scale: int, stacks: dict[StackKey, int],
               take: Callable[[int, str], None]) -> None:
    """``foreign_folded._fold_plain`` (``Interner.fold_plain``): each line through ``take``."""
    for no, line in iter_lines(path):
        take(no, line)
