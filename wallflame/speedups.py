"""The native module ``wallflame._speedups`` (C in ``wallflame/_speedups_src/``, a file per
concern), built with the package (``setup.py``), and ``native``: the module itself.

* Holds: the folding of folded lines (``Interner``) and of perf script records
  (``PerfFolder``); the scheduler capture's switch records, wake-ups and ``finish``'s passes;
  the report's passes over a profile's stacks (the flame tree, groups, frame names); the
  timeline's spans and integer columns; libdw's frame callback, which must not take the
  interpreter's lock while a thread is stopped.
* The rule: one implementation per hot path.  A path is native only where
  ``benchmarks/native_pure.py`` shows it pays on an input like a user's (in Python it would
  add at least 5% to the command's CPU time); the others are Python alone.  The tests hold
  each native path to a Python reference kept under ``tests/``."""

from __future__ import annotations

from collections.abc import Callable

from wallflame import _speedups as native


def _split(s: str) -> tuple[str, ...]:
    return tuple(s.split(";"))


def frame_splitter(interner: native.Interner | None = None) -> Callable[[str], tuple[str, ...]]:
    """A function giving ``tuple(s.split(";"))``, with each distinct frame name one shared
    string for the splitter's lifetime (or ``interner``'s), so there are fewer objects and
    each name's hash is computed once."""
    split = (interner or native.Interner()).split

    def shared(s: str) -> tuple[str, ...]:
        try:
            return split(s)
        except UnicodeEncodeError:  # a lone surrogate (from a backslash escape): no UTF-8
            return _split(s)

    return shared


__all__ = ["frame_splitter", "native"]
