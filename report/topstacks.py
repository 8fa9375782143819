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

from wallflame.profile import Profile, StackKey
from wallflame.report.summary import user_frames
from wallflame.threadgroups import group_label, name_pattern

#: The frames every thread starts in (the C library's and the thread library's), left out at
#: a stack's root: what the thread itself runs comes after them.
RUNTIME_ROOT = frozenset({"_start", "__libc_start_main", "__libc_start_call_main",
                          "__libc_start_main_impl", "clone", "clone3", "start_thread",
                          "__clone", "__clone3", "thread_start"})


@dataclass(frozen=True)
class TopRow:
    """One row: ``key`` (the heaviest member's stack key: frames, state, wait), the threads'
    label and count, and the weight of all members."""

    key: StackKey
    threads: str
    count: int
    weight: int


def runtime_root(user: tuple[str, ...]) -> int:
    """How many frames at the root of ``user`` are the runtime's: those of ``RUNTIME_ROOT``,
    and a shared library without a symbol among them (``[libstdc++.so.6]``: its thread
    trampoline); never all of them."""
    i = 0
    while i < len(user) - 1 and (user[i] in RUNTIME_ROOT or
                                 (i and user[i].startswith("[lib") and ".so" in user[i])):
        i += 1
    return i


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


def top_rows(profile: Profile, n: int, idle: set[int] | frozenset[int] = frozenset()
             ) -> list[TopRow]:
    """The ``n`` heaviest rows of ``profile``, idle threads' stacks left out."""
    weights: dict[tuple[str, str, str, tuple[str, ...]], int] = {}
    members: dict[tuple[str, str, str, tuple[str, ...]], dict[int, str]] = {}
    keys: dict[tuple[str, str, str, tuple[str, ...]], StackKey] = {}
    for k, w in profile.stacks.items():
        if k.tid in idle:
            continue
        g = (name_pattern(k.thread or "?"), k.state, k.wait, k.frames)
        weights[g] = weights.get(g, 0) + w
        members.setdefault(g, {})[k.tid] = k.thread or "?"
        keys.setdefault(g, k)
    out = []
    for g, w in heapq.nlargest(n, weights.items(), key=lambda kv: kv[1]):
        names, k = list(members[g].values()), keys[g]
        label = group_label(names) if len(names) > 1 else \
            names[0] + (f" ({k.tid})" if k.tid else "")
        out.append(TopRow(k, label, len(names), w))
    return out
