"""A run's per-slice figures (``RUN/slices.json``, computed by ``wallflame.fold.slices``), as
``wallflame check`` reads them: the within-run noise of every judged quantity."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wallflame.errors import WallflameError
from wallflame.rundir import SLICES, SLICES_VERSION

#: Computes a run directory's figures from its ``raw/`` (``fold.slices.compute_slices``,
#: passed by the check command: the report stage does not fold).
Compute = Callable[[str], "dict[str, Any] | None"]


def load_slices(run_dir: str | os.PathLike[str], compute: Compute | None = None
                ) -> dict[str, Any] | None:
    """``RUN/slices.json``, or the figures ``compute`` makes from ``raw/``; ``None`` when
    neither exists or the file is not in the expected form (the check then falls back to
    sampling error alone, and says so)."""
    path = Path(run_dir) / SLICES
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return None
        return data if _valid(data) else None
    if compute is None:
        return None
    try:
        return compute(str(run_dir))
    except (OSError, WallflameError):
        return None


def _ints(x: Any, k: int) -> bool:
    return isinstance(x, list) and len(x) == k and all(
        isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in x)


def _valid(d: Any) -> bool:
    if not (isinstance(d, dict) and d.get("version") == SLICES_VERSION):
        return False
    k = d.get("k")
    if not (isinstance(k, int) and 2 <= k <= 1000 and _ints(d.get("on"), k)
            and _ints(d.get("samples"), k) and isinstance(d.get("functions"), dict)):
        return False
    if not isinstance(d.get("wait", {}), dict) or not isinstance(d.get("lost", {}), dict):
        return False
    tables = [*d["functions"].values(), *(d.get("wait") or {}).values()]
    return all(_ints(v, k) for v in tables) and ("work" not in d or _ints(d["work"], k))


__all__ = ["SLICES", "Compute", "load_slices"]
