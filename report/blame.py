"""The critical path of the waits as a report tells it: for each waiting group and wait, how
much of it has a known waker and which code ran for it (``RUN/blame.folded``, written by
``wallflame.critpath``).

* A blame stack reads: waiting group; its wait; per hop ``woken by GROUP`` and that thread's
  state (``[on-CPU]`` then its stack, ``[waiting for a CPU]``, ``[blocked: WAIT]``); or a
  terminal waker (``woken by a timer``, ``waker unknown``).
* A cause is what the last hop was doing: the user frames nearest the leaf of an on-CPU stack
  (``worker → MutexQueue::pop → QueueStats::record → fnv1a``, at most ``CAUSE_FRAMES``),
  waiting for a CPU (in the code it was preempted in), blocked (in its code, and what ended
  it: ``sleep, woken by a timer``), or the terminal waker; ``who`` is the group that ran it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wallflame.critpath import (
    ON_CPU,
    STILL_WAITING,
    STOPPED_FRAME,
    UNKNOWN_WAKER,
    WAITING_FOR_CPU,
)
from wallflame.locks.lockshare import lock_name
from wallflame.profile import OFF, UNIT_NS, WAIT_CLASSES, Meta, Profile, StackKey
from wallflame.report.summary import runtime_root, user_frames
from wallflame.runfiles import BLAME
from wallflame.threadgroups import name_pattern
from wallflame.waitclasses import FALLBACK

#: A cause names at most this many frames, nearest the leaf.
CAUSE_FRAMES = 4
#: At most this many causes per wait.
MAX_CAUSES = 5
#: At most this many waits are listed.
MAX_WAITS = 5
_WOKEN = "woken by "


@dataclass
class Wait:
    """One waiting group's wait: its total, the part with no known waker, its causes."""

    waiters: str
    wait: str
    ns: int = 0
    unknown: int = 0
    causes: dict[tuple[str, str, str], int] = field(default_factory=lambda: defaultdict(int))

    def as_dict(self) -> dict[str, Any]:
        top = sorted(self.causes.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_CAUSES]
        return {"waiters": self.waiters, "wait": self.wait, "waited_s": self.ns / 1e9,
                "explained": 1 - self.unknown / self.ns if self.ns else 0.0,
                "causes": [{"what": what, "who": who, "state": state, "s": ns / 1e9,
                            "share": ns / self.ns} for (what, who, state), ns in top]}


def read(path: str | Path) -> list[tuple[tuple[str, ...], int]] | None:
    """A blame file's stacks; None when there is none (the wake-ups were not recorded)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    out = []
    for line in text.splitlines():
        stack, _, ns = line.rpartition(" ")
        if stack and ns.isdigit():
            out.append((tuple(stack.split(";")), int(ns)))
    return out


def of_run(run_dir: str | Path) -> list[tuple[tuple[str, ...], int]] | None:
    return read(Path(run_dir) / BLAME)


def profile_of(stacks: list[tuple[tuple[str, ...], int]]) -> Profile:
    """The blame stacks as a profile for the page's flame graph: the waiting group as the
    thread, coloured by its wait's class (``FALLBACK`` for a wait of no class)."""
    p = Profile(meta=Meta(unit=UNIT_NS))
    for stack, ns in stacks:
        if len(stack) < 2:
            continue
        cls = stack[1].split(" ", 1)[0]
        p.add(StackKey(stack[1:], 0, stack[0], 0, OFF,
                       cls if cls in WAIT_CLASSES else FALLBACK), ns)
    return p


def cause(stack: tuple[str, ...]) -> tuple[str, str, str]:
    """``(what, who, state)`` of one blame stack (below the waiters and the wait)."""
    who, blocked, where = "", "", 0
    for i, f in enumerate(stack):
        if f.startswith(_WOKEN) and i + 1 < len(stack) and stack[i + 1].startswith("["):
            who = f[len(_WOKEN):]
        elif f.startswith("[blocked: "):
            blocked, where = f[len("[blocked: "):-1], i + 1
        elif f == ON_CPU:
            return _code(stack[i + 1:]) or "[kernel]", who, "on-CPU"
        elif f == WAITING_FOR_CPU:
            code = _code(stack[i + 1:])
            return (f"waiting for a CPU in {code}" if code else "waiting for a CPU"), who, \
                "runnable"
        elif f == STOPPED_FRAME:
            return "stopped by the collect", who, "stopped"
    last = stack[-1] if stack else UNKNOWN_WAKER
    if not blocked:
        return last, who, "waker"
    code = _code(stack[where:-1])
    return (f"{code} ({blocked}, {last})" if code else f"{blocked}, {last}"), who, "blocked"


def _code(frames: tuple[str, ...]) -> str:
    """The user frames nearest the leaf, runtime root left out."""
    user = user_frames(frames)
    return " → ".join(user[runtime_root(user):][-CAUSE_FRAMES:])


def waits(stacks: list[tuple[tuple[str, ...], int]]) -> list[Wait]:
    """Each (waiting group, wait), heaviest first."""
    by: dict[tuple[str, str], Wait] = {}
    for stack, ns in stacks:
        if len(stack) < 3 or not stack[0]:
            continue
        key = (stack[0], stack[1])
        w = by.get(key) or by.setdefault(key, Wait(*key))
        w.ns += ns
        if stack[-1] in (UNKNOWN_WAKER, STILL_WAITING):
            w.unknown += ns
        w.causes[cause(stack[2:])] += ns
    return sorted(by.values(), key=lambda w: -w.ns)


def summary(stacks: list[tuple[tuple[str, ...], int]] | None,
            idle: frozenset[str] = frozenset()) -> list[dict[str, Any]] | None:
    """``summary.json``'s ``critical_path``: the heaviest waits with their causes, those of
    idle thread groups (``idle``: their name patterns) left out."""
    if stacks is None:
        return None
    return [w.as_dict() for w in waits(stacks) if w.waiters not in idle][:MAX_WAITS]


#: What a report of a run without the critical path says, and what to run to get it.
NOT_RECORDED = ("not recorded in this run: its collect did not record the wake-ups' wakers "
                "(without --wakers, a light collect, or not root)")
HOW_TO_RECORD = "collect again as root with --wakers"


def for_lock(summary: dict[str, Any], lock: dict[str, Any]) -> dict[str, Any] | None:
    """The critical path row of the waits on ``lock`` (a ``summary.json`` lock) by its
    heaviest waiting group; None when there is none."""
    name = lock_name(str(lock.get("lock", "")))
    groups = {name_pattern(str(w.get("name", ""))) for w in lock.get("waiters") or []}
    rows = [r for r in summary.get("critical_path") or []
            if r["wait"].endswith(" " + name) and (not groups or r["waiters"] in groups)]
    return rows[0] if rows else None


def causes_text(row: dict[str, Any], causes: int = 2) -> str:
    """``fnv1a in consumer-* 41%, waiting for a CPU in consumer-* 9%``."""
    return ", ".join(c["what"] + (f" in {c['who']}" if c["who"] else "") +
                     f" {100 * c['share']:.0f}%" for c in row["causes"][:causes])


def sentence(row: dict[str, Any], causes: int = 2) -> str:
    """``while they waited: fnv1a in consumer-* 41%, waiting for a CPU 9% (critical path, 97%
    of the wait with a known waker)``."""
    return (f"what ran while they waited: {causes_text(row, causes)} (critical path: "
            f"{100 * row['explained']:.0f}% of the wait has a known waker)")


__all__ = ["CAUSE_FRAMES", "HOW_TO_RECORD", "MAX_CAUSES", "MAX_WAITS", "NOT_RECORDED", "Wait",
           "cause", "causes_text", "for_lock", "of_run", "profile_of", "read", "sentence",
           "summary", "waits"]
