"""Every thread, the whole window: on-CPU + runnable + blocked = the window, per thread.

Two corrections a run's evidence needs before it adds up (``assemble.profile.build_profile``):

* **On-CPU totals from the switches.**  ``cpu-clock`` samples estimate a thread's on-CPU time
  as samples x period; the scheduler capture measures it exactly (each switch-in to the next
  switch-out, clipped to the window: ``SampledSched``).  Where the scheduler was recorded,
  each thread's on-CPU stacks are scaled to its exact time, so the samples give only the
  split over stacks.  What the samples alone said is kept (``meta.extra["oncpu_samples_ns"]``)
  so the difference can be seen; a thread that ran with no sample gets ``[no on-CPU sample]``.
* **Threads that never switched.**  A thread blocked from before the window to after it makes
  no switch, so the scheduler has no interval for it.  The ``/proc`` listings taken when the
  window opened and closed (``raw/capture.json`` ``threads``) name it; it gets the whole window,
  blocked, under its snapshot stacks when the snapshots caught it (in their proportions), else
  under the kernel function it slept in (``wchan``, read without stopping it).
"""

from __future__ import annotations

from typing import Any, TypeGuard

from wallflame.classify import classify
from wallflame.profile import OFF, ON, RUNNABLE, Profile, StackKey

#: The frame of on-CPU time measured by the switches with no sample to give it a stack.
NO_SAMPLE = "[no on-CPU sample]"
#: The frame above the ``wchan`` of a thread blocked for the whole window.
WHOLE_WINDOW = "[blocked for the whole window]"
#: The frame of blocked time the kernel's counters measured (``kernel_runqueue``) in a thread
#: no snapshot caught blocked.
NO_SNAPSHOT = "[blocked: no snapshot caught it]"
#: The frame of runnable time the kernel's counters measured (``kernel_runqueue``): drawn
#: under its thread, with no stack.
RUNNABLE_FRAME = "[runnable]"


def exact_oncpu(profile: Profile, exact: dict[str, Any], source: str = "switches") -> None:
    """Scale each thread's on-CPU stacks to ``exact[tid]["on_ns"]`` (``SampledSched``'s
    switch-derived figures, or the kernel's run time from schedstat: ``source``)."""
    by_tid: dict[int, list[tuple[StackKey, int]]] = {}
    for k, w in profile.stacks.items():
        if k.state == ON:
            by_tid.setdefault(k.tid, []).append((k, w))
    sampled: dict[str, int] = {}
    for tid_s, row in sorted(exact.items()):
        tid, on = int(tid_s), int(row.get("on_ns") or 0)
        parts = sorted(by_tid.get(tid, []))
        total = sum(w for _, w in parts)
        sampled[tid_s] = total
        for k, _ in parts:
            del profile.stacks[k]
        if not total:
            if on:
                profile.add(StackKey((NO_SAMPLE,), tid, profile.meta.threads.get(tid, ""), 0,
                                     ON), on)
            continue
        given = 0
        for i, (k, w) in enumerate(parts):
            part = on - given if i == len(parts) - 1 else on * w // total
            given += part
            profile.add(k, part)
    # what the samples alone said: the first scaling's (a second one, after the profile was
    # cut to the window, sees the scaled totals)
    profile.meta.extra.setdefault("oncpu_samples_ns", sampled)
    profile.meta.extra["oncpu_source"] = source


def listed_throughout(listings: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The threads the ``/proc`` listings (``raw/capture.json`` ``threads``) found both when
    the window opened and when it closed (their start row)."""
    start, end = _rows(listings.get("start")), _rows(listings.get("end"))
    return {tid: r for tid, r in start.items() if tid in end}


def whole_window(profile: Profile, listings: dict[str, Any], seen: set[int],
                 snapshots: Profile | None, window_ns: int) -> list[int]:
    """Give each thread present throughout the window and absent from ``seen`` (the threads
    the scheduler or the samples saw) the whole window, blocked; returns their tids."""
    if window_ns <= 0:
        return []
    snap: dict[int, list[tuple[StackKey, int]]] = {}
    if snapshots is not None:
        for k, w in snapshots.stacks.items():
            if k.state == OFF and k.tid:
                snap.setdefault(k.tid, []).append((k, w))
    done = []
    for tid, row in sorted(listed_throughout(listings).items()):
        if tid in seen:
            continue
        comm = str(row.get("comm") or "")
        profile.meta.threads.setdefault(tid, comm)
        for k in [k for k in profile.stacks if k.tid == tid]:
            del profile.stacks[k]  # the snapshots' own weights, replaced by the window
        parts = sorted(snap.get(tid, []))
        denom = sum(w for _, w in parts)
        if not denom:
            frames = (WHOLE_WINDOW, str(row.get("wchan") or "[unknown]"))
            kstate = str(row.get("state") or "")[:1]
            parts, denom = [(StackKey(frames, tid, comm, 0, OFF, classify(frames, kstate)),
                             1)], 1
        given = 0
        for i, (k, w) in enumerate(parts):
            part = window_ns - given if i == len(parts) - 1 else window_ns * w // denom
            given += part
            profile.add(k, part)
        done.append(tid)
    if done:
        profile.meta.warn(f"{len(done)} threads did not run or switch during the window: each "
                          "is counted blocked for the whole window, under its snapshot stacks "
                          "or the kernel function it slept in")
    profile.meta.extra["whole_window_threads"] = done
    return done


def born_ns(start_ticks: Any, clock: Any) -> int | None:
    """A thread's start on ``CLOCK_MONOTONIC``, from its ``start_ticks`` and a listing's
    ``clock`` (``collect.threads.clock``): to a clock tick (10 ms at the usual 100 Hz)."""
    if not isinstance(clock, dict) or not _is_int(start_ticks):
        return None
    tck, off = clock.get("clk_tck"), clock.get("boot_minus_mono_ns")
    if not _is_int(tck) or tck <= 0 or not _is_int(off):
        return None
    return start_ticks * 1_000_000_000 // tck - off


def _counters(row: Any) -> tuple[int, int] | None:
    ss = row.get("schedstat") if isinstance(row, dict) else None
    if not isinstance(ss, list) or len(ss) < 2:
        return None
    try:
        return int(ss[0]), int(ss[1])
    except (TypeError, ValueError):
        return None


def _rows(listing: Any) -> dict[int, dict[str, Any]]:
    """A listing's rows by tid (rows without an integer tid are left out)."""
    rows = listing.get("threads") if isinstance(listing, dict) else None
    return {r["tid"]: r for r in rows if isinstance(r, dict) and _is_int(r.get("tid"))} \
        if isinstance(rows, list) else {}


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _lived(tid: int, start: dict[int, dict[str, Any]], end: dict[int, dict[str, Any]],
           last: dict[int, dict[str, Any]], clock: Any,
           bounds: tuple[int, int]) -> tuple[int, int, int] | None:
    """(alive, on-CPU, run-queue) ns of a thread that began or ended within the window:
    from its start (counters zero) or the window's, to the window's end or its last reading
    (``threads.last``, every ``collect.procs.WATCH_S``)."""
    if tid in start:
        first_t, first = bounds[0], _counters(start[tid])
    else:
        row = end.get(tid) or last.get(tid) or {}
        born = born_ns(row.get("start_ticks"), clock)
        first_t, first = (max(born, bounds[0]), (0, 0)) if born is not None else (0, None)
    if tid in end:
        last_t, now = bounds[1], _counters(end[tid])
    else:
        row = last.get(tid) or {}
        at = row.get("schedstat_ns")
        last_t, now = (min(at, bounds[1]), _counters(row)) if _is_int(at) else (0, None)
    if first is None or now is None or last_t <= first_t:
        return None
    return last_t - first_t, max(0, now[0] - first[0]), max(0, now[1] - first[1])


def _draw_runnable(profile: Profile, rq: dict[str, int]) -> None:
    """Each thread's run-queue delay as a ``RUNNABLE_FRAME`` stack under it, when none of its
    runnable time has a stack: every view draws it (the same figure as ``runqueue_ns``)."""
    has = {k.tid for k in profile.stacks if k.state == OFF and k.wait == RUNNABLE}
    named = {k.tid: (k.thread, k.pid) for k in profile.stacks}
    for t, d in rq.items():
        tid = int(t)
        if tid not in has:
            thread, pid = named.get(tid, (profile.meta.threads.get(tid, ""), 0))
            profile.add(StackKey((RUNNABLE_FRAME,), tid, thread, pid, OFF, RUNNABLE), d)


def kernel_runqueue(profile: Profile, listings: dict[str, Any],
                    bounds: tuple[int, int] | None = None, snapshots: bool = True) -> int:
    """Without a scheduler capture (``--off-cpu pmp`` or ``none``) nothing sees a thread wait
    for a CPU: take each thread's run-queue delay over the window from the kernel's own
    counters (``schedstat`` at both listings) as its runnable time, with no stack (drawn as
    ``RUNNABLE_FRAME``), and say so.  With the window's ``bounds`` (``CLOCK_MONOTONIC``), each
    such thread's on-CPU time is the kernel's run time (its samples split it over stacks) and
    its blocked time what the kernel leaves of the window (the window - run time - run-queue
    delay), split over its snapshot stacks in their proportions: a snapshot's weight (the time
    since the previous one) only estimates it; with ``snapshots`` (the run took some), a thread
    none caught blocked has that time under ``NO_SNAPSHOT``.  A thread that began within the
    window is counted from its start, one that ended to its last reading (``threads.last``);
    the part of the window each lived is ``meta.extra["schedstat_alive_ns"]``.  Returns the
    total runnable time (ns)."""
    start, end = _rows(listings.get("start")), _rows(listings.get("end"))
    last = _rows(listings.get("last"))
    clock = next((lst.get("clock") for lst in (listings.get("end"), listings.get("last"))
                  if isinstance(lst, dict) and lst.get("clock")), None)
    rq: dict[str, int] = {}
    ran_ns: dict[str, dict[str, int]] = {}
    alive_ns: dict[str, int] = {}
    unseen: list[int] = []
    for tid in sorted(set(start) | set(end) | set(last)):
        if tid in start and tid in end:
            a, b = _counters(start[tid]), _counters(end[tid])
            if a is None or b is None:
                continue
            ran, d = max(0, b[0] - a[0]), b[1] - a[1]
            window_ns = bounds[1] - bounds[0] if bounds is not None else 0
        elif bounds is not None:
            lived = _lived(tid, start, end, last, clock, bounds)
            if lived is None:
                continue
            window_ns, ran, d = lived
            alive_ns[str(tid)] = window_ns
            row = end.get(tid) or last.get(tid) or start.get(tid) or {}
            profile.meta.threads.setdefault(tid, str(row.get("comm") or ""))
        else:
            continue
        if d > 0:
            rq[str(tid)] = d
        if window_ns:
            if not _scale_blocked(profile, tid, max(0, window_ns - ran - max(0, d)),
                                  snapshots):
                unseen.append(tid)
            ran_ns[str(tid)] = {"on_ns": ran}
    if ran_ns and any(k.state == ON for k in profile.stacks):
        # The samples' split of each thread's time over its stacks, at the kernel's exact run
        # time: on + runnable + blocked is then the window (the samples alone would be off
        # by their sampling error).
        profile.meta.extra["schedstat_threads"] = ran_ns
        exact_oncpu(profile, ran_ns, "schedstat")
    if alive_ns:
        profile.meta.extra["schedstat_alive_ns"] = alive_ns
    if unseen:
        profile.meta.warn(f"{len(unseen)} threads were blocked for part of the window but no "
                          f"snapshot caught them blocked: that time is under {NO_SNAPSHOT} "
                          "(more snapshots, --pmp-rate, would name it)")
    if rq:
        _draw_runnable(profile, rq)
        profile.meta.extra["runqueue_ns"] = rq
        profile.meta.extra["runqueue_source"] = "schedstat"
        profile.meta.warn("no scheduler capture: each thread's runnable time (waiting for a "
                          "CPU) is the kernel's run-queue delay over the window "
                          "(/proc/PID/task/TID/schedstat), without stacks ([runnable] under "
                          "each thread); a thread that "
                          "ended within the window is counted to its last reading, up to "
                          "0.25 s before its end (record the scheduler with --off-cpu both "
                          "or sched for runnable stacks and exact ends)")
    return sum(rq.values())


def _scale_blocked(profile: Profile, tid: int, total: int, fill: bool = True) -> bool:
    """Scale ``tid``'s blocked stacks to ``total``.  A thread with none (no snapshot caught
    it blocked) gets ``total`` under ``NO_SNAPSHOT`` with ``fill``, so that its time still
    adds up to the window; returns False then."""
    parts = sorted((k, w) for k, w in profile.stacks.items()
                   if k.tid == tid and k.state == OFF and k.wait != RUNNABLE)
    denom = sum(w for _, w in parts)
    if not denom:
        if total <= 0 or not fill:
            return True
        same = next((k for k in profile.stacks if k.tid == tid), None)
        frames = (NO_SNAPSHOT,)
        profile.add(StackKey(frames, tid, same.thread if same is not None else
                             profile.meta.threads.get(tid, ""),
                             same.pid if same is not None else 0, OFF, classify(frames, "")),
                    total)
        profile.meta.extra.setdefault("blocked_from_schedstat", []).append(tid)
        return False
    given = 0
    for i, (k, w) in enumerate(parts):
        part = total - given if i == len(parts) - 1 else total * w // denom
        given += part
        profile.stacks[k] = part
    profile.meta.extra.setdefault("blocked_from_schedstat", []).append(tid)
    return True


__all__ = ["NO_SAMPLE", "NO_SNAPSHOT", "WHOLE_WINDOW", "exact_oncpu", "kernel_runqueue",
           "listed_throughout", "whole_window"]
