"""The suite's headline rows: what each benchmark's ``--json FILE`` writes and ``run.py`` reads.

A row sets one figure of wallflame's against the same figure of a peer tool measured in the
same run: ``{"name", "wallflame", "peer", "peer_tool", "ratio", "unit", "better"}``.  ``ratio``
is wallflame's figure over the peer's (for figures taken in pairs of runs, the median of the
run-by-run ratios), so with ``better`` "lower" a ratio under 1 is wallflame ahead.  A figure
with no peer (the gate's error rates, a server's loss) has ``peer``, ``peer_tool`` and
``ratio`` null.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Row = dict[str, Any]


def row(name: str, wallflame: float | None, peer: float | None = None,
        peer_tool: str | None = None, unit: str = "s", better: str = "lower",
        ratio: float | None = None) -> Row:
    """One headline row; ``ratio`` defaults to ``wallflame / peer`` when both are known."""
    if better not in ("lower", "higher"):
        raise ValueError(f"better must be 'lower' or 'higher', not {better!r}")
    if ratio is None and wallflame is not None and peer:
        ratio = wallflame / peer
    return {"name": name, "wallflame": wallflame, "peer": peer, "peer_tool": peer_tool,
            "ratio": ratio, "unit": unit, "better": better}


def write_rows(path: str | Path, rows: list[Row]) -> None:
    """The rows as a JSON list (``--json FILE``)."""
    Path(path).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
