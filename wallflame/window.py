"""Every thread, the whole window: on-CPU + runnable + blocked = the window, per thread.

Two corrections a run's evidence needs before it adds up (``finish.build_profile``):

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

from typing import Any

from wallflame.classify import classify
from wallflame.profile import OFF, ON, RUNNABLE, Profile, StackKey, shares
from wallflame.stops import is_tracer_stop

#: The frame of on-CPU time measured by the switches with no sample to give it a stack.
NO_SAMPLE = "[no on-CPU sample]"
#: The frame above the ``wchan`` of a thread blocked for the whole window.
WHOLE_WINDOW = "[blocked for the whole window]"


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
        for k, part in shares(parts, on):
            profile.add(k, part)
    # what the samples alone said: the first scaling's (a second one, after the profile was
    # cut to the window, sees the scaled totals)
    profile.meta.extra.setdefault("oncpu_samples_ns", sampled)
    profile.meta.extra["oncpu_source"] = source


def kernel_oncpu(profile: Profile, listings: dict[str, Any], switches: dict[str, Any],
                 window_ns: int) -> dict[str, dict[str, int]]:
    """With a scheduler capture: each thread's on-CPU total becomes the kernel's run time over
    the window (``schedstat`` at both listings, scaled from their span to the window's), for
    the threads listed throughout whose switches (``switches``: ``SampledSched``'s
    ``sched_threads``) said otherwise.  perf writes its switch-in record after the context
    switch and after scheduling the thread's own events in, so each on-CPU interval starts
    late and the off-CPU interval before it ends late (2.3 µs a switch-in on a 2-vCPU VM; 11
    points of the window for a thread switching 25,000 times a second with sampled stacks:
    ``benchmarks/runnable_truth.py``).  The difference comes out of the thread's runnable
    stacks, then its blocked ones, or, when the switches counted more, goes to them in their
    proportions, so the thread still adds up to the window.  Returns the kernel's figures
    (``{tid: {"on_ns"}}``, for ``exact_oncpu``); the switches' own stay in
    ``meta.extra["oncpu_switches_ns"]``."""
    rows = [(listings.get(when) or {}) for when in ("start", "end")]
    span = int(rows[1].get("mono_ns") or 0) - int(rows[0].get("mono_ns") or 0)
    if span <= 0 or window_ns <= 0:
        return {}
    end = {int(r["tid"]): r for r in rows[1].get("threads") or []
           if isinstance(r, dict) and "tid" in r}
    kernel: dict[str, dict[str, int]] = {}
    said: dict[str, int] = {}
    for tid, start in sorted(listed_throughout(listings).items()):
        row = switches.get(str(tid))
        a, b = start.get("schedstat"), end[tid].get("schedstat")
        if not isinstance(row, dict) or not a or not b:
            continue
        ran = max(0, int(b[0]) - int(a[0])) * window_ns // span
        on = int(row.get("on_ns") or 0)
        kernel[str(tid)] = {"on_ns": ran}
        said[str(tid)] = on
        if ran != on:
            _move_off(profile, tid, ran - on)
    if kernel:
        profile.meta.extra["oncpu_switches_ns"] = said
        profile.meta.extra["schedstat_threads"] = kernel
    return kernel


def _move_off(profile: Profile, tid: int, more_on: int) -> None:
    """Take ``more_on`` ns out of ``tid``'s off-CPU stacks, runnable ones first (or, when it
    is negative, add it to all of them in their proportions); the collect's own stops, which
    the tracer timed, are left as they are."""
    mine = [(k, w) for k, w in profile.stacks.items()
            if k.tid == tid and k.state == OFF and not is_tracer_stop(k.frames)]
    runnable = sorted((k, w) for k, w in mine if k.wait == RUNNABLE)
    blocked = sorted((k, w) for k, w in mine if k.wait != RUNNABLE)
    if more_on < 0:
        _spread(profile, runnable + blocked, -more_on)
        return
    for parts in (runnable, blocked):
        have = sum(w for _, w in parts)
        take = min(have, more_on)
        _spread(profile, parts, -take)
        more_on -= take


def _spread(profile: Profile, parts: list[tuple[StackKey, int]], delta: int) -> None:
    """Add ``delta`` (ns, may be negative) to ``parts`` in proportion to their weights."""
    if not sum(w for _, w in parts) or not delta:
        return
    for (k, w), (_, part) in zip(parts, shares(parts, delta), strict=True):
        if w + part > 0:
            profile.stacks[k] = w + part
        else:
            del profile.stacks[k]


def listed_throughout(listings: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The threads the ``/proc`` listings (``raw/capture.json`` ``threads``) found both when
    the window opened and when it closed (their start row)."""
    rows = [{int(r["tid"]): r for r in (listings.get(when) or {}).get("threads") or []
             if isinstance(r, dict) and "tid" in r} for when in ("start", "end")]
    return {tid: r for tid, r in rows[0].items() if tid in rows[1]}


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
        if not sum(w for _, w in parts):
            frames = (WHOLE_WINDOW, str(row.get("wchan") or "[unknown]"))
            kstate = str(row.get("state") or "")[:1]
            parts = [(StackKey(frames, tid, comm, 0, OFF, classify(frames, kstate)), 1)]
        for k, part in shares(parts, window_ns):
            profile.add(k, part)
        done.append(tid)
    if done:
        profile.meta.warn(f"{len(done)} threads did not run or switch during the window: each "
                          "is counted blocked for the whole window, under its snapshot stacks "
                          "or the kernel function it slept in")
    profile.meta.extra["whole_window_threads"] = done
    return done


def kernel_runqueue(profile: Profile, listings: dict[str, Any], window_ns: int = 0) -> int:
    """Without a scheduler capture (``--off-cpu pmp`` or ``none``) nothing sees a thread wait
    for a CPU: take each thread's run-queue delay over the window from the kernel's own
    counters (``schedstat`` at both listings) as its runnable time, with no stack, and say
    so.  With ``window_ns``, each such thread's blocked time is what the kernel leaves of
    the window (the window - run time - run-queue delay), split over its snapshot stacks in
    their proportions: a snapshot's weight (the time since the previous one) only estimates
    it.  Returns the total runnable time (ns)."""
    start = {int(r["tid"]): r for r in (listings.get("start") or {}).get("threads") or []
             if isinstance(r, dict) and "tid" in r}
    rq: dict[str, int] = {}
    ran_ns: dict[str, dict[str, int]] = {}
    for r in (listings.get("end") or {}).get("threads") or []:
        s = start.get(int(r.get("tid", 0)))
        if s is None or not s.get("schedstat") or not r.get("schedstat"):
            continue
        d = int(r["schedstat"][1]) - int(s["schedstat"][1])
        if d > 0:
            rq[str(r["tid"])] = d
        if window_ns:
            ran = max(0, int(r["schedstat"][0]) - int(s["schedstat"][0]))
            _scale_blocked(profile, int(r["tid"]), max(0, window_ns - ran - max(0, d)))
            ran_ns[str(r["tid"])] = {"on_ns": ran}
    if ran_ns and any(k.state == ON for k in profile.stacks):
        # The samples' split of each thread's time over its stacks, at the kernel's exact run
        # time: on + runnable + blocked is then the window (the samples alone would be off
        # by their sampling error).
        profile.meta.extra["schedstat_threads"] = ran_ns
        exact_oncpu(profile, ran_ns, "schedstat")
    if rq:
        profile.meta.extra["runqueue_ns"] = rq
        profile.meta.extra["runqueue_source"] = "schedstat"
        profile.meta.warn("no scheduler capture: each thread's runnable time (waiting for a "
                          "CPU) is the kernel's run-queue delay over the window "
                          "(/proc/PID/task/TID/schedstat), without stacks; threads that "
                          "started or ended during the window have none (record the scheduler "
                          "with --off-cpu both or sched for its stacks)")
    return sum(rq.values())


def _scale_blocked(profile: Profile, tid: int, total: int) -> None:
    """Scale ``tid``'s blocked stacks to ``total`` (nothing when it has none)."""
    parts = sorted((k, w) for k, w in profile.stacks.items()
                   if k.tid == tid and k.state == OFF and k.wait != RUNNABLE)
    denom = sum(w for _, w in parts)
    if not denom:
        return
    for k, part in shares(parts, total):
        profile.stacks[k] = part
    profile.meta.extra.setdefault("blocked_from_schedstat", []).append(tid)


__all__ = ["NO_SAMPLE", "WHOLE_WINDOW", "exact_oncpu", "kernel_oncpu", "kernel_runqueue",
           "listed_throughout", "whole_window"]
