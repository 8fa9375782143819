"""docs/layout.md lists every module of the package under its folder, so that the page a new
contributor reads first cannot fall behind the code."""

from __future__ import annotations

import re

from conftest import ROOT

FOLDERS = ("wallflame", "wallflame/assemble", "wallflame/commands", "wallflame/locks", "collect",
           "collect/locks", "fold",
           "fold/perf", "report", "report/diff")


def _listed() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    folder = ""
    for line in (ROOT / "docs" / "layout.md").read_text(encoding="utf-8").splitlines():
        head = re.match(r"### `([^`]+)/`", line)
        if head:
            folder = head.group(1)
            out[folder] = set()
        row = re.match(r"\| `([^`]+\.py)` \| (.+) \|$", line)
        if row and folder:
            assert row.group(2).strip(), line  # each module says what it holds
            out[folder].add(row.group(1))
    return out


def test_every_module_is_on_the_layout_page() -> None:
    listed = _listed()
    for folder in FOLDERS:
        here = ROOT / folder
        modules = {p.name for p in here.glob("*.py") if not p.is_symlink()}
        modules.discard("__init__.py")
        missing = modules - listed.get(folder, set())
        gone = listed.get(folder, set()) - modules - {"__init__.py"}
        assert not missing, f"docs/layout.md lacks {folder}/: {sorted(missing)}"
        assert not gone, f"docs/layout.md lists modules {folder}/ no longer has: {sorted(gone)}"
