"""What the libdw symbol checks ask about a live process
(``tests/live/test_libdw_symbols_live.py``, ``benchmarks/lab/libdw_symbols.py``): its executable
modules, and the addresses in one where the symbol index's rules could go wrong."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from wallflame.collect.libdw import Unwinder
from wallflame.collect.locks.targetmemory import parse_maps


def modules(u: Unwinder, pid: int) -> Iterator[tuple[str, int]]:
    """Each executable file mapping's module of ``pid``, once: its path and the module
    (``Dwfl_Module *``)."""
    dw = u.lib.dw
    seen: set[int] = set()
    with open(f"/proc/{pid}/maps") as f:
        maps = parse_maps(f.read())
    for m in maps:
        if "x" not in m.perms or not m.path.startswith("/"):
            continue
        mod = dw.dwfl_addrmodule(u.dwfl, m.start)
        if not mod or mod in seen:
            continue
        seen.add(mod)
        yield m.path, mod


def addresses(u: Unwinder, mod: int, rows: Sequence[tuple[int, int, Any, Any, Any, Any]],
              labels: Sequence[int]) -> list[int]:
    """The addresses where the index's rules could go wrong, in ``mod``: each symbol's
    (``rows``) first and last byte, the bytes either side of it and its middle, and each
    label's and the bytes beside it."""
    found = {a for r in rows for a in (r[0] - 1, r[0], (r[0] + r[1]) // 2, r[1] - 1, r[1])}
    found |= {a for x in labels for a in (x - 1, x, x + 1)}
    return [a for a in sorted(found) if a > 0 and u.lib.dw.dwfl_addrmodule(u.dwfl, a) == mod]
