"""Threads named as a reader counts them: ``consumer-* ×8`` for eight threads whose names
differ only in a trailing number.

* The rule: a name ending in digits (after a non-digit) stands for the pattern with ``*`` in
  place of the digits; threads with the same pattern are one group.  Other names are groups of
  their own (``producer``; ``mariadbd ×50`` when fifty threads carry one name).
* A server that names none of its threads has them named by role (``mariadbd:
  handle_one_connection``: ``display_name``), and grouped so.
* A label lists the groups largest first, at most ``MAX_GROUPS`` of them, then ``and N more``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

#: A name ending in a number: the part before it and the number.
_NUMBERED = re.compile(r"^(.*\D)(\d+)$")
#: At most this many groups are named in one label.
MAX_GROUPS = 3


def name_pattern(name: str) -> str:
    """``consumer-3`` -> ``consumer-*``; a name without a trailing number is its own pattern."""
    m = _NUMBERED.match(name)
    return m.group(1) + "*" if m else name


def groups(names: Iterable[str]) -> list[tuple[str, int]]:
    """Each group's name and its count, largest first (then by name); a pattern that only one
    thread matches keeps that thread's own name."""
    names = list(names)
    counts = Counter(name_pattern(n) for n in names)
    single = {name_pattern(n): n for n in names}
    out = [(p if n > 1 else single[p], n) for p, n in counts.items()]
    return sorted(out, key=lambda g: (-g[1], g[0]))


def group_label(names: Iterable[str]) -> str:
    """``consumer-* ×8 and producer``: the groups of ``names``, largest first."""
    gs = groups(names)
    parts = [f"{p} ×{n}" if n > 1 else p for p, n in gs[:MAX_GROUPS]]
    if len(gs) > MAX_GROUPS:
        parts.append(f"{len(gs) - MAX_GROUPS} more")
    if not parts:
        return "no thread"
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def display_name(row: dict[str, Any]) -> str:
    """A summary row's thread as the tables name it: ``mariadbd: handle_one_connection`` for a
    thread named by its role (``report.summary.thread_roles``), else its own name."""
    name = str(row.get("name") or "?")
    return f"{name}: {row['role']}" if row.get("role") else name


def display_names(rows: Iterable[dict[str, Any]]) -> dict[int, str]:
    """Each thread's ``display_name`` by tid."""
    return {int(r["tid"]): display_name(r) for r in rows if r.get("tid")}


def merge_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Summary rows (``summary.json``'s ``threads``) one per group, in the order of each
    group's first thread: a group of several has the name ``consumer-* ×8``, no tid, the sums
    of its members' seconds and the lowest of their coverages."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(name_pattern(display_name(r)), []).append(r)
    out = []
    for pattern, members in by.items():
        if len(members) == 1:
            out.append({**members[0], "name": display_name(members[0])})
            continue
        merged: dict[str, Any] = {"name": f"{pattern} ×{len(members)}", "tid": 0,
                                  "threads": len(members)}
        for key in ("on_cpu_s", "off_cpu_s", "runnable_s", "stopped_s"):
            merged[key] = round(sum(float(m.get(key, 0.0)) for m in members), 6)
        merged["wait"] = {c: round(sum(float(m["wait"].get(c, 0.0)) for m in members), 6)
                          for c in members[0]["wait"]}
        covs = [m["coverage"] for m in members if m.get("coverage") is not None]
        merged["coverage"] = min(covs) if covs else None
        out.append(merged)
    return out
