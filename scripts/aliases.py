#!/usr/bin/env python3
"""Write wallflame/aliases.txt's groups from this machine's glibc, libm and libgcc.

    python3 scripts/aliases.py [LIBRARY...]

Each line is the names of one code address (``wallflame.names.alias_groups`` of ``nm -D``);
the lines under the debug-information heading are kept as they are.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wallflame.names import alias_groups  # noqa: E402

TABLE = ROOT / "wallflame" / "aliases.txt"
LIBRARIES = ["/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libm.so.6",
             "/lib/x86_64-linux-gnu/libgcc_s.so.1"]
HEAD = """\
# The names of one code address a line; wallflame.names.canonical_name picks the one every
# collector's frame gets.  Groups that share a name are one group.
"""
DEBUG_INFO = "# Seen at one address by two collectors, from debug information:\n"
SYMBOLS = "# From the symbol tables (scripts/aliases.py):\n"


def main(libraries: list[str]) -> int:
    old = TABLE.read_text(encoding="utf-8") if TABLE.exists() else ""
    kept = DEBUG_INFO
    if DEBUG_INFO in old:
        end = old.find(SYMBOLS)
        kept = old[old.index(DEBUG_INFO):end if end >= 0 else None]
    lines: set[str] = set()
    for lib in libraries:
        out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True,
                             text=True, check=True).stdout
        lines.update(" ".join(g) for g in alias_groups(out))
    TABLE.write_text(HEAD + kept + SYMBOLS + "".join(f"{g}\n" for g in sorted(lines)),
                     encoding="utf-8")
    print(f"{TABLE.relative_to(ROOT)}: {len(lines)} groups from {len(libraries)} libraries")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or LIBRARIES))
