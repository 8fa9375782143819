#!/usr/bin/env python3
"""The libdw backend's symbol index against libdw's own lookup, on a real server's modules.

For every executable module of a process (by default a private ``mariadbd``:
``benchmarks/servers.py``), the index (``collect.libdw.SymbolIndex``) and libdw's
``dwfl_module_addrname`` are asked the name of the same addresses: each symbol's first and
last byte, the bytes either side of it and its middle, and each label's (a symbol of no size)
and the bytes beside it; every symbol of the main executable, ``--per-module`` symbols at
random of each library.  Prints per module: the symbols, the addresses, how many the index
answered itself, how many of those differ from libdw's answer (must be 0), the index's build
time and the time per address of each.

    .venv/bin/python benchmarks/lab/libdw_symbols.py [--pid PID] [--per-module 300]

Needs ``mariadb-server`` without ``--pid``, and root or the right to read the process's maps.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.servers import MariaDB, Missing, require  # noqa: E402
from tests.libdwhelp import addresses, modules  # noqa: E402
from wallflame.collect.libdw import SymbolIndex, Unwinder  # noqa: E402


def check(pid: int, per_module: int) -> int:
    """Prints the table; returns the number of answers that differ from libdw's."""
    u = Unwinder(pid)
    dw = u.lib.dw
    exe = Path(f"/proc/{pid}/exe").resolve()
    wrong_total = 0
    rng = random.Random(1)
    print("module  symbols  labels  build ms  addresses  answered  differ  index us  libdw us")
    try:
        for path, mod in modules(u, pid):
            t = time.perf_counter()
            index = SymbolIndex(dw, mod)
            build = time.perf_counter() - t
            rows = index.rows if Path(path) == exe else \
                rng.sample(index.rows, min(per_module, len(index.rows)))
            n = answered = wrong = 0
            t_index = t_libdw = 0.0
            for a in addresses(u, mod, rows, index.labels):
                t = time.perf_counter()
                known, name = index.lookup(a)
                t_index += time.perf_counter() - t
                t = time.perf_counter()
                ref = dw.dwfl_module_addrname(mod, a)
                t_libdw += time.perf_counter() - t
                n += 1
                if known:
                    answered += 1
                    wrong += name != ref
            wrong_total += wrong
            print(f"{Path(path).name}  {len(index.rows)}  {len(index.labels)}  "
                  f"{build * 1e3:.0f}  {n}  {answered}  {wrong}  "
                  f"{t_index / max(n, 1) * 1e6:.1f}  {t_libdw / max(n, 1) * 1e6:.1f}", flush=True)
    finally:
        u.close()
    return wrong_total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--pid", type=int, help="this process (default: start MariaDB)")
    ap.add_argument("--per-module", type=int, default=300)
    a = ap.parse_args()
    if a.pid:
        return 1 if check(a.pid, a.per_module) else 0
    try:
        require("mariadb")
    except Missing as e:
        print(f"libdw_symbols.py: {e}", file=sys.stderr)
        return 6
    with MariaDB() as db:
        return 1 if check(db.pid, a.per_module) else 0


if __name__ == "__main__":
    sys.exit(main())
