"""What a launched target printed (``raw/target.stdout``): the work it reports doing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wallflame.rundir import TARGET_STDOUT, is_number, target_json


def work_done(raw: Path) -> dict[str, Any] | None:
    """The launched command's work counter: the last JSON line of ``raw/target.stdout`` with
    a numeric ``work`` (the samples print ``{"work": N, "unit": "messages", ...}``), as
    ``{"count", "unit", ...}`` for ``wallflame check``'s CPU-per-work rule."""
    found = None
    for d in target_json(raw / TARGET_STDOUT, "work"):
        if is_number(d.get("work")):
            found = d
    if found is None:
        return None
    out = {k: v for k, v in found.items() if isinstance(v, str | int | float)}
    out["count"] = float(found["work"])
    out["unit"] = str(found.get("unit") or "units")
    return out


__all__ = ["work_done"]
