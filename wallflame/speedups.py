"""Optional native versions of report generation's hot loops (``_speedups.c``).

The pure-Python code they mirror is always present and gives the same results (the tests
compare the two); ``WALLFLAME_PURE=1`` in the environment forces it.  The native module is
built at install time when a C compiler is available (``setup.py``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

native: ModuleType | None = None
if not os.environ.get("WALLFLAME_PURE"):
    try:
        from wallflame import _speedups as native
    except ImportError:
        native = None


def _split(s: str) -> tuple[str, ...]:
    return tuple(s.split(";"))


def frame_splitter(interner: Any = None) -> Callable[[str], tuple[str, ...]]:
    """A function giving ``tuple(s.split(";"))``; natively, with each distinct frame name one
    shared string for the splitter's lifetime (or ``interner``'s: a ``native.Interner``),
    so there are fewer objects and each name's hash is computed once."""
    if native is None:
        return _split
    split: Callable[[str], tuple[str, ...]] = (interner or native.Interner()).split

    def shared(s: str) -> tuple[str, ...]:
        try:
            return split(s)
        except UnicodeEncodeError:  # a lone surrogate (from a backslash escape): no UTF-8
            return _split(s)

    return shared
