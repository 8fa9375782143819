"""Time a thread spent stopped by a tracer (``ptrace_stop`` in its kernel stack, task state
``t``): not a wait of the target's own.

In a run directory whose collect stopped the target itself (stack snapshots, lock-owner
probes), those stops are wallflame's: ``separate`` takes their stacks out of the profile, so no
wait class and no flame graph counts them, and keeps each thread's stopped time in
``meta.extra["tracer_stops"]``, which the summary shows beside the pauses the snapshot loop
measured.  Elsewhere (another tracer's stops in a capture) the stacks stay, classified ``other``
by the rules (``other: tracer stop``).
"""

from __future__ import annotations

from typing import Any

from wallflame.profile import OFF, Profile

#: The kernel function a ptrace-stopped thread sleeps in.
TRACER_STOP = ("ptrace_stop", "ptrace_stop_[k]")
#: How far from the leaf the stop is looked for (it is always among the last kernel frames).
DEPTH = 12


def is_tracer_stop(frames: tuple[str, ...]) -> bool:
    return any(f in TRACER_STOP for f in frames[-DEPTH:])


def separate(profile: Profile, cause: str) -> int:
    """Move the off-CPU stacks stopped in ``ptrace_stop`` out of ``profile`` into
    ``meta.extra["tracer_stops"]`` (per thread, ns; ``cause`` says whose stops they were) and
    return their total."""
    per_tid: dict[int, int] = {}
    for key in [k for k in profile.stacks if k.state == OFF and is_tracer_stop(k.frames)]:
        w = profile.stacks.pop(key)
        per_tid[key.tid] = per_tid.get(key.tid, 0) + w
    total = sum(per_tid.values())
    if total:
        profile.meta.extra["tracer_stops"] = {
            "cause": cause, "total_ns": total,
            "ns": {str(t): ns for t, ns in sorted(per_tid.items())}}
    return total


def stopped_ns(profile: Profile) -> dict[int, int]:
    """Each thread's time stopped by the collect's own tracer (ns)."""
    return tid_ns((profile.meta.extra.get("tracer_stops") or {}).get("ns"))


def tid_ns(raw: Any) -> dict[int, int]:
    """A ``{"tid": ns}`` mapping from a profile's metadata, entries that are not numbers
    left out."""
    out: dict[int, int] = {}
    if isinstance(raw, dict):
        for tid, ns in raw.items():
            try:
                out[int(tid)] = int(ns)
            except (TypeError, ValueError):
                continue
    return out
