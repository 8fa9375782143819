#!/usr/bin/env python3
"""Make build/view/wallflame/: the package as one folder, for the tools that read a package
from a single folder (mypy, and import-linter through grimp; scripts/lint-imports.sh).

    python3 scripts/view.py

The package is wallflame/ plus the stage folders that ``[tool.setuptools.package-dir]`` in
pyproject.toml maps into it; both tools turn a file's folders into its module name and neither
reads that mapping, so the view holds a link to each entry of wallflame/ and one to each mapped
folder. The links are made again on every run (a module added to wallflame/ gets one); a file
added inside a linked folder needs no new run.
"""

from __future__ import annotations

import os
import shutil
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VIEW = ROOT / "build" / "view"
PACKAGE = "wallflame"


def mapped() -> dict[str, Path]:
    """The subpackages mapped to folders of their own: name within the package -> folder."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        dirs = tomllib.load(f)["tool"]["setuptools"].get("package-dir", {})
    return {name.removeprefix(PACKAGE + "."): ROOT / folder for name, folder in dirs.items()
            if name.startswith(PACKAGE + ".") and "." not in name.removeprefix(PACKAGE + ".")}


def make() -> Path:
    made = VIEW / (PACKAGE + ".new")
    shutil.rmtree(made, ignore_errors=True)
    made.mkdir(parents=True)
    entries = {p.name: p for p in (ROOT / PACKAGE).iterdir() if p.name != "__pycache__"}
    entries.update(mapped())
    for name, target in sorted(entries.items()):
        os.symlink(os.path.relpath(target, made), made / name)
    final = VIEW / PACKAGE
    shutil.rmtree(final, ignore_errors=True)
    made.rename(final)
    config = VIEW / "pyproject.toml"  # lint-imports run in the view reads its contracts
    if not config.is_symlink():
        os.symlink(os.path.relpath(ROOT / "pyproject.toml", VIEW), config)
    return final


if __name__ == "__main__":
    make()
