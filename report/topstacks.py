"""The heaviest stacks as a reader reads them, for every output: one row per thread group
(``consumer-* ×8``) and stack, idle threads left out, each stack root first with the runtime's
root frames left out and the kernel's folded into the wait.

* A row adds up the same frames, state and wait class over the threads of one name pattern
  (``wallflame.threadgroups``).
* ``stack_items``: a stack's items, root first: the user's frames (a run of one frame is one
  item, ``[postgres] ×3``), then ``[kernel N: wait]``.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from wallflame.profile import Profile, StackKey
from wallflame.report.summary import runtime_root, user_frames
from wallflame.threadgroups import group_label, name_pattern


@dataclass(frozen=True)
class TopRow:
    """One row: ``key`` (the heaviest member's stack key: frames, state, wait), the threads'
    label and count, and the weight of all members."""

    key: StackKey
    threads: str
    count: int
    weight: int


def stack_runs(frames: tuple[str, ...]) -> tuple[list[tuple[str, int]], int]:
    """The user's frames of ``frames`` root first, runtime root left out, as (frame, how many
    times in a row), and how many kernel frames follow them."""
    user = user_frames(frames)
    nk = len(frames) - len(user)
    runs: list[tuple[str, int]] = []
    for f in user[runtime_root(user):]:
        if runs and runs[-1][0] == f:
            runs[-1] = (f, runs[-1][1] + 1)
        else:
            runs.append((f, 1))
    return runs, nk


def kernel_item(nk: int, wait: str) -> list[str]:
    """The kernel's frames folded into one item with the wait (none without either)."""
    if nk:
        return [f"[kernel {nk}{': ' + wait if wait else ''}]"]
    return [f"[{wait}]"] if wait else []


def top_rows(profile: Profile, n: int, idle: set[int] | frozenset[int] = frozenset(),
             names: dict[int, str] | None = None) -> list[TopRow]:
    """The ``n`` heaviest rows of ``profile``, idle threads' stacks left out; ``names``: each
    thread's name as the tables show it (``threadgroups.display_name``).  Without two threads
    of one name pattern, the heaviest stacks themselves (no pass adding rows up)."""
    names = names or {}
    tids: dict[int, str] = {}  # each thread's name as shown
    for group in profile.grouped():
        tids.setdefault(group.tid, names.get(group.tid) or group.thread or "?")
    pattern = {tid: name_pattern(name) for tid, name in tids.items()}
    shared = len(set(pattern.values())) < len(pattern)
    if not shared:
        heaviest = heapq.nlargest(n, ((k, w) for k, w in profile.stacks.items()
                                      if k.tid not in idle), key=itemgetter(1))
        return [TopRow(k, tids.get(k.tid, "?") + (f" ({k.tid})" if k.tid else ""), 1, w)
                for k, w in heaviest]
    rows: dict[tuple[str, str, str, tuple[str, ...]], list[Any]] = {}  # [weight, tids, key]
    for k, w in profile.stacks.items():
        if k.tid in idle:
            continue
        g = (pattern.get(k.tid, "?"), k.state, k.wait, k.frames)
        row = rows.get(g)
        if row is None:
            rows[g] = [w, {k.tid}, k]
        else:
            row[0] += w
            row[1].add(k.tid)
    out = []
    for w, members, k in heapq.nlargest(n, rows.values(), key=itemgetter(0)):
        who = [tids.get(t, "?") for t in sorted(members)]
        label = group_label(who) if len(who) > 1 else who[0] + (f" ({k.tid})" if k.tid else "")
        out.append(TopRow(k, label, len(who), w))
    return out
