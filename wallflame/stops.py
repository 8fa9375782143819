"""Time a thread spent stopped by a tracer (``ptrace_stop`` in its kernel stack, task state
``t``): not a wait of the target's own.

In a run directory whose collect stopped the target itself (stack snapshots, lock-owner
probes), those stops are wallflame's: ``separate`` takes their stacks out of the profile, so no
wait class and no flame graph counts them, and keeps each thread's stopped time in
``meta.extra["tracer_stops"]``, which the summary shows beside the pauses the snapshot loop
measured.  Elsewhere (another tracer's stops in a capture) the stacks stay, classified ``other``
by the rules (``other: tracer stop``).

The tracer also times every stop it makes, per thread (the snapshot log's and the owner log's
``stops``): from the first of its frames read to the last, while it certainly stood stopped
(a lower bound), and from the attach request to the release, which also holds the wait for the
stop to take effect (an upper bound).  ``measured`` keeps their per-thread sums beside the
stopped time the scheduler saw, so the two can be checked against each other.
"""

from __future__ import annotations

import math
from typing import Any, Final

from wallflame.profile import OFF, RUNNABLE, Profile

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
    after: dict[int, int] = {}  # of which woken from the stop, waiting for a CPU
    for key in [k for k in profile.stacks if k.state == OFF and is_tracer_stop(k.frames)]:
        w = profile.stacks.pop(key)
        per_tid[key.tid] = per_tid.get(key.tid, 0) + w
        if key.wait == RUNNABLE:
            after[key.tid] = after.get(key.tid, 0) + w
    total = sum(per_tid.values())
    if total:
        profile.meta.extra["tracer_stops"] = {
            "cause": cause, "total_ns": total,
            "ns": {str(t): ns for t, ns in sorted(per_tid.items())},
            "runnable_ns": {str(t): ns for t, ns in sorted(after.items())}}
    return total


#: ``meta.extra`` key of a fold: each thread's stops as the tracer timed them (``add_stops``).
MEASURED_STOPS: Final = "measured_stops"
#: ``meta.extra`` key (popped by ``wallflame.assemble`` before anything is written) of the
#: snapshots' blocked threads at the instant each was stopped: ``[[tid, mono_ns, frames
#: (root first), kernel state], ...]``, which the scheduler's split gives the interval the stop
#: ended and the one it restarted (``SampledSched.marks``).
STOP_MARKS: Final = "stop_marks"


def add_stops(acc: dict[int, list[float]], raw: Any) -> None:
    """Add one record's per-thread stops to ``acc`` (tid -> [lower ms, upper ms, stops]):
    a snapshot's ``{"tid": [lower ms, upper ms]}`` or a holder probe's
    ``[[tid, lower ms, upper ms], ...]``; malformed entries are left out."""
    items: list[Any] = []
    if isinstance(raw, dict):
        items = list(raw.items())
    elif isinstance(raw, list):
        items = [(x[0], x[1:]) for x in raw if isinstance(x, list) and x]
    for tid, pair in items:
        try:
            t = int(tid)
        except (TypeError, ValueError):
            continue
        if isinstance(tid, bool) or not isinstance(pair, list) or len(pair) != 2 or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < math.inf
                for v in pair):
            continue
        row = acc.setdefault(t, [0.0, 0.0, 0])
        row[0] += float(pair[0])
        row[1] += float(pair[1])
        row[2] += 1


def stops_json(acc: dict[int, list[float]]) -> dict[str, list[int]]:
    """``{"tid": [lower ns, upper ns, stops]}``, as ``meta.extra`` keeps it."""
    return {str(t): [round(lo * 1e6), round(hi * 1e6), int(n)]
            for t, (lo, hi, n) in sorted(acc.items())}


def merge_measured(parts: list[Any]) -> dict[int, list[int]]:
    """Sum several ``stops_json`` mappings (several snapshot logs, the owner probes)."""
    out: dict[int, list[int]] = {}
    for part in parts:
        if not isinstance(part, dict):
            continue
        for tid, row in part.items():
            try:
                t = int(tid)
                lo, hi, n = (int(v) for v in row)
            except (TypeError, ValueError, OverflowError):
                continue
            if min(lo, hi, n) < 0:
                continue
            acc = out.setdefault(t, [0, 0, 0])
            acc[0] += lo
            acc[1] += hi
            acc[2] += n
    return out


def record_measured(profile: Profile, measured: dict[int, list[int]], cause: str) -> None:
    """Keep the tracer's own timing of its stops (``merge_measured``) beside the stopped
    time the scheduler saw, in ``meta.extra["tracer_stops"]["measured"]``."""
    if not measured:
        return
    ts = profile.meta.extra.setdefault(
        "tracer_stops", {"cause": cause, "total_ns": 0, "ns": {}})
    ts["measured"] = {str(t): row for t, row in sorted(measured.items())}


def bound_by_measured(profile: Profile) -> int:
    """With sampled scheduler stacks, keep each thread's stopped time within the tracer's own
    timing of its stops; returns how many threads were adjusted.

    A sampled stack stands for every switch its period covers, so one sampled ``ptrace_stop``
    counts a thread as stopped far longer than it was (several ms a stop over the tracer's upper
    bound on a busy server), and one not sampled not at all.  The tracer timed every stop it made
    (``measured_ns``): the blocked part of each thread's stopped time (what follows the
    release, waiting for a CPU, aside) is brought within [lower, upper], and the difference
    goes back to, or is taken from, the thread's other blocked stacks in proportion to them
    (never more than they hold).  The estimates before and after are kept in
    ``meta.extra["tracer_stops"]["bounded"]``."""
    ts = profile.meta.extra.get("tracer_stops")
    measured = measured_ns(profile)
    if not measured:
        return 0
    if ts is None:
        ts = profile.meta.extra.setdefault(
            "tracer_stops", {"cause": "wallflame", "total_ns": 0, "ns": {}})
    ns, after = stopped_ns(profile), stopped_runnable_ns(profile)
    bounded: dict[str, list[int]] = {}
    for tid, (lo, hi, _n) in sorted(measured.items()):
        blocked = ns.get(tid, 0) - after.get(tid, 0)
        want = min(max(blocked, lo), hi)
        if want == blocked:
            continue
        others = [(k, w) for k, w in profile.stacks.items()
                  if k.tid == tid and k.state == OFF and k.wait != RUNNABLE and w > 0]
        have = sum(w for _, w in others)
        if not others:  # nothing to give it back to or take it from: it stays as it is
            continue
        if want > blocked:  # taken from the others, as far as they hold it
            want = blocked + min(want - blocked, have)
        move = blocked - want  # > 0: back to the others; < 0: taken from them
        given = 0
        for i, (k, w) in enumerate(others):
            part = move - given if i == len(others) - 1 else move * w // have
            given += part
            profile.stacks[k] = w + part
        ts["ns"][str(tid)] = ns.get(tid, 0) - move
        ts["total_ns"] = int(ts.get("total_ns", 0)) - move
        bounded[str(tid)] = [blocked, want]
    if bounded:
        ts["bounded"] = bounded
        profile.meta.note(f"the time wallflame held {len(bounded)} thread(s) stopped was set "
                          "from its own timing of the stops (scheduler stacks were sampled)")
    return len(bounded)


def measured_ns(profile: Profile) -> dict[int, tuple[int, int, int]]:
    """Each thread's stops as the tracer timed them: (lower ns, upper ns, stops)."""
    raw = (profile.meta.extra.get("tracer_stops") or {}).get("measured")
    return {t: (row[0], row[1], row[2]) for t, row in merge_measured([raw]).items()}


def stopped_runnable_ns(profile: Profile) -> dict[int, int]:
    """Of each thread's stopped time, the part after the tracer let it go and before it ran
    again (woken from the stop, waiting for a CPU)."""
    return tid_ns((profile.meta.extra.get("tracer_stops") or {}).get("runnable_ns"))


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
            except (TypeError, ValueError, OverflowError):
                continue
    return out
