"""The native module ``wallflame._speedups`` (C in ``wallflame/_speedups_src/``, a file per
concern) and the switch to it (``native``).

* Holds: the folding of folded lines (``Interner``) and of perf script records
  (``PerfFolder``); the scheduler capture's switch records, wake-ups and ``finish``'s passes;
  the report's passes over a profile's stacks (the flame tree, groups, frame names); the
  timeline's spans and JSON lists of ints; libdw's frame callback, which must not take the
  interpreter's lock while a thread is stopped.
* The rule: one implementation per hot path.  A path is native only where
  ``benchmarks/native_pure.py`` shows it pays on an input like a user's (its pure-Python twin
  adds at least 5% to the command's CPU time); the others are Python alone.  A report of
  500,000 stacks takes 4.3 s of CPU natively and 13.6 s in Python.
* While the build is optional (``setup.py``: the module is skipped without a C compiler), the
  Python twins stay and the tests hold the two to the same results; ``WALLFLAME_PURE=1``
  forces the twins."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from wallflame import _speedups as native


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


__all__ = ["frame_splitter", "native"]
