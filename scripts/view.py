#!/usr/bin/env python3
"""Make build/view/wallflame/: the package as one folder, for the tools that read a package
from a single folder (mypy, and import-linter through grimp; scripts/lint-imports.sh).

    python3 scripts/view.py

The package is wallflame/ plus the stage folders that ``[tool.setuptools.package-dir]`` in
pyproject.toml maps into it; both tools turn a file's folders into its module name and neither
reads that mapping, so the view holds a link to each entry of wallflame/ and one to each mapped
folder. Each run brings the links up to date (a module added to wallflame/ gets one); a file
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
    """The view, its links brought up to date in place (a tool reading it meanwhile still finds
    every module that was there)."""
    view = VIEW / PACKAGE
    view.mkdir(parents=True, exist_ok=True)
    targets = {p.name: p for p in (ROOT / PACKAGE).iterdir() if p.name != "__pycache__"}
    targets.update(mapped())
    targets = {name: Path(os.path.relpath(t, view)) for name, t in targets.items()}
    for entry in view.iterdir():
        if entry.is_symlink() and Path(os.readlink(entry)) == targets.get(entry.name):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for name, target in sorted(targets.items()):
        if not (view / name).is_symlink():
            os.symlink(target, view / name)
    config = VIEW / "pyproject.toml"  # lint-imports run in the view reads its contracts
    if not config.is_symlink():
        os.symlink(os.path.relpath(ROOT / "pyproject.toml", VIEW), config)
    return view


if __name__ == "__main__":
    make()
