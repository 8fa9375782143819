"""A thread's blocked and runnable time over its stacks, and its blocked time per wait class
in bins of the perf clock.

* A thread's exact blocked time is split over the stacks of its sampled blocked intervals in
  proportion to ``period x duration`` of each (a ratio estimator: the sampled intervals stand
  for the others in their part of the run, and the split sums exactly to the measured total).
  With ``-c 1`` (every switch sampled) every period is 1 and the split is the exact one.
* With sampled stacks, the intervals whose stack a snapshot's stop showed keep it, and the
  rest is split stratum by stratum of the intervals' durations (``split_strata``).
* Blocked time per wait class is kept in bins of ``BIN_NS`` (``bin_thread``): ``wallflame
  check`` measures how much each class moves within a run from them."""

from __future__ import annotations

from wallflame import stops, strata
from wallflame.fold.perf.sched_thread import Key, SchedThread
from wallflame.names import UNSAMPLED  # a blocked thread none of whose switches was sampled
from wallflame.profile import OFF, RUNNABLE, Profile, StackKey
from wallflame.strata import shares

#: Width of the bins of ``class_bins``: a twentieth of a second, so that a window's ten
#: slices (``wallflame check``) are cut from them to within half a bin.
BIN_NS = 50_000_000

#: (key, weight or ns) pairs.
Parts = list[tuple[Key, int]]


def add_to_bins(bins: dict[tuple[str, int], int], cls: str, start: int, end: int,
                period: int) -> None:
    """``period x`` the part of ``[start, end)`` in each bin of ``BIN_NS``."""
    b = start // BIN_NS
    while start < end:
        edge = min(end, (b + 1) * BIN_NS)
        key = (cls, b)
        bins[key] = bins.get(key, 0) + period * (edge - start)
        start = edge
        b += 1


def split_runnable(profile: Profile, th: SchedThread) -> None:
    """A thread's runnable time over the stacks it was preempted or blocked at (those of
    its blocked time when none of its runnable intervals was sampled)."""
    total = th.runnable
    if not total:
        return
    parts = sorted((th.rstacks or th.stacks).items())
    if not sum(w for _, w in parts):
        parts = [(((UNSAMPLED,), ""), 1)]
    for key, part in shares(parts, total):
        profile.add(StackKey(key[0], th.tid, th.comm, th.pid, OFF, RUNNABLE), part)


def bin_thread(th: SchedThread, per_class: dict[str, int],
               class_bins: dict[str, dict[int, int]]) -> None:
    """Add a thread's blocked time per class to ``class_bins``.  Its time in each class
    (``per_class``: the split over stacks) is shared between its intervals and the span
    before its first record in proportion to their lengths; the intervals' part goes to
    the bins where that class was sampled, in proportion to the sampled weight there
    (unsampled intervals stand with the sampled ones, as in the split), the leading part
    evenly over the leading span."""
    sampled: dict[str, int] = {}
    for (cls, _), w in th.bins.items():
        sampled[cls] = sampled.get(cls, 0) + w
    total = th.blocked + th.leading
    lead: dict[tuple[str, int], int] = {}
    for cls, ns in per_class.items():
        if ns and th.leading and total:
            add_to_bins(lead, cls, th.lead_start, th.lead_start + th.leading, 1)
    for (cls, b), w in lead.items():
        out = class_bins.setdefault(cls, {})
        out[b] = out.get(b, 0) + per_class[cls] * th.leading * w // (total * th.leading)
    for (cls, b), w in th.bins.items():
        if sampled[cls] and per_class.get(cls):
            out = class_bins.setdefault(cls, {})
            out[b] = out.get(b, 0) + per_class[cls] * th.blocked * w // (
                total * sampled[cls])


def split_blocked(parts: Parts, blocked: int, leading: int) -> Parts:
    """A thread's blocked time (``blocked`` in its intervals, ``leading`` before its first
    record) over its sampled stacks, in proportion to their weights.  A stop of the collect's
    own tracer gets its share of the intervals only: the time before the thread's first record
    was spent in a wait of its own (the tracer had not stopped it yet), so it goes to the
    other stacks, or to ``[unsampled]`` when there are none."""
    stop_w = sum(w for key, w in parts if stops.is_tracer_stop(key[0]))
    if not leading or not stop_w:
        return shares(parts, blocked + leading)
    denom = sum(w for _, w in parts)
    stop_ns = blocked * stop_w // denom
    rest = [(key, w) for key, w in parts if not stops.is_tracer_stop(key[0])]
    if not rest:
        rest = [(((UNSAMPLED,), ""), 1)]
    return (shares([(k, w) for k, w in parts if stops.is_tracer_stop(k[0])], stop_ns)
            + shares(rest, blocked + leading - stop_ns))


def blocked_split(th: SchedThread) -> tuple[Parts, int]:
    """A thread's blocked time (in its intervals and before its first record) over stacks,
    and how much of it had none (``[unsampled]``): the intervals whose stack a snapshot's
    stop showed (``SchedThread.known``) exactly, the rest over the sampled stacks, stratum by
    stratum of the intervals' durations when the stacks were sampled (``split_strata``)."""
    if th.strata:
        return split_strata(th)
    parts = sorted(th.stacks.items())
    unsampled = 0
    if not th.sampled_weight:
        parts = [(((UNSAMPLED,), ""), 1)]
        unsampled = th.blocked + th.leading - th.known_ns
    if not th.known_ns:
        return split_blocked(parts, th.blocked, th.leading), unsampled
    out = dict(th.known)
    for key, part in split_blocked(parts, th.blocked - th.known_ns, th.leading):
        out[key] = out.get(key, 0) + part
    return sorted((key, ns) for key, ns in out.items() if ns), unsampled


def split_strata(th: SchedThread) -> tuple[Parts, int]:
    """``blocked_split`` with sampled stacks, stratum by stratum of the intervals' whole
    durations (``wallflame.strata``): every interval's duration is exact, only some have a
    stack.

    In each stratum the intervals whose stack is known (a snapshot's stop:
    ``SchedThread.known``) keep it, and the rest of the stratum's time goes over the stacks
    of the intervals of that stratum with one: the sampled intervals in proportion to period
    x duration, the known ones to duration, the two estimates weighted by how many intervals
    each holds.  A wait's kind goes with how long it lasts (a sleep of 300 ms is not the 1 ms
    condition-variable wait that follows it, however often the sampling falls on the
    latter), so a few sampled short waits no longer stand for the long ones of another kind.
    The time of strata with no such interval, and before the thread's first record, goes
    over all the thread's sampled stacks (``split_blocked``), or is ``[unsampled]`` when it
    has none.  The parts sum to the thread's exact blocked time."""
    assert th.strata is not None
    out, leftover, by_stratum = strata.split(th.strata)
    th.split_by = (th.known_ns, by_stratum, leftover + th.leading)
    unsampled = 0
    parts = sorted(th.stacks.items())
    if not th.sampled_weight:
        parts = [(((UNSAMPLED,), ""), 1)]
        unsampled = leftover + th.leading
    for key, part in split_blocked(parts, leftover, th.leading):
        out[key] = out.get(key, 0) + part
    return sorted((key, ns) for key, ns in out.items() if ns), unsampled
