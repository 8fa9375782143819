"""What a launched target printed (``raw/target.stdout``): the work it reports doing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wallflame.rundir import TARGET_STDOUT
from wallflame.textio import iter_lines


def work_done(raw: Path) -> dict[str, Any] | None:
    """The launched command's work counter: the last JSON line of ``raw/target.stdout`` with
    a numeric ``work`` (the samples print ``{"work": N, "unit": "messages", ...}``), as
    ``{"count", "unit", ...}`` for ``wallflame check``'s CPU-per-work rule."""
    path = raw / TARGET_STDOUT
    if not path.exists():
        return None
    found = None
    for _, line in iter_lines(str(path)):
        line = line.strip()
        if not (line.startswith("{") and '"work"' in line):
            continue
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict) and isinstance(d.get("work"), int | float) \
                and not isinstance(d.get("work"), bool):
            found = d
    if found is None:
        return None
    out = {k: v for k, v in found.items() if isinstance(v, str | int | float)}
    out["count"] = float(found["work"])
    out["unit"] = str(found.get("unit") or "units")
    return out


__all__ = ["work_done"]
