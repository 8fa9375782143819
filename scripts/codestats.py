#!/usr/bin/env python3
"""The size of the product code: lines (Python, templates, C), the largest modules and
functions, and how many lines branch on the native module.

    python3 scripts/codestats.py [CHECKOUT]
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

STAGES = ("collect", "fold", "report", "wallflame", "templates")
SUFFIXES = (".py", ".html", ".js", ".css", ".c", ".h")
#: A line that branches on the native module or on one of its objects.
NATIVE = re.compile(r"\b(native|PASSES|TRACKER|SWITCH_LINES|SPAN_ROWS|fast|_tracker) "
                    r"is (not )?None")


def main(root: Path) -> None:
    files = [p for top in STAGES for p in sorted((root / top).rglob("*"))
             if p.suffix in SUFFIXES and p.is_file() and not p.is_symlink()]
    lines = {p: len(p.read_text(encoding="utf-8", errors="replace").splitlines()) for p in files}
    py = {p: n for p, n in lines.items() if p.suffix == ".py"}
    functions = []
    for p in py:
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                end = node.end_lineno or node.lineno
                functions.append((end - node.lineno + 1, f"{p.relative_to(root)} {node.name}"))
    functions.sort(reverse=True)
    native = sum(1 for p in py for line in p.read_text(encoding="utf-8").splitlines()
                 if NATIVE.search(line))
    print(f"lines: {sum(lines.values()):,} ({sum(py.values()):,} Python)")
    for n, name in sorted(((n, str(p.relative_to(root))) for p, n in py.items()), reverse=True)[:3]:
        print(f"module {n:5} {name}")
    for n, name in functions[:3]:
        print(f"function {n:3} {name}")
    print(f"modules over 600 lines: {sum(1 for n in py.values() if n > 600)}; functions over 60: "
          f"{sum(1 for n, _ in functions if n > 60)}; lines branching on native: {native}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent))
