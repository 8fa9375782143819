"""Every thread of the target when the window opens and when it closes, from ``/proc``.

The scheduler capture knows only threads that switched during the window: a thread blocked
from before the window to after it never switches and would be missing.  The two listings
(tid, name, kernel state, and the kernel's own per-thread accounting,
``/proc/PID/task/TID/schedstat``: time on a CPU, time waiting on a run queue, timeslices, in
nanoseconds) let the run give such a thread the whole window, and give the tests the kernel's
figures for the same window to check wallflame's against.

The listing also gives the wake-up recorder its filter: the kernel matches each
``sched:sched_wakeup`` against the target's thread ids before anything is written.
"""

from __future__ import annotations

import time
from typing import Any

from wallflame.collect.target import list_tids, read_stat, read_text

#: The kernel copies a tracepoint filter of at most a page (``PERF_EVENT_IOC_SET_FILTER``).
MAX_FILTER = 4000


def schedstat(pid: int, tid: int) -> tuple[int, int, int] | None:
    """``(on-CPU ns, run-queue ns, timeslices)`` of one thread (``None``: gone, or a kernel
    without schedstats)."""
    text = read_text(f"/proc/{pid}/task/{tid}/schedstat")
    if text is None:
        return None
    parts = text.split()
    if len(parts) < 3 or not all(p.isdigit() for p in parts[:3]):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def listing(pid: int) -> dict[str, Any]:
    """The target's threads now: ``{"mono_ns", "threads": [{tid, comm, state, schedstat,
    wchan}]}`` (``wchan``: the kernel function a blocked thread sleeps in, read without
    stopping it)
    ``mono_ns``: ``CLOCK_MONOTONIC``, the clock of the window and of perf's records."""
    rows = []
    for tid in list_tids(pid):
        st = read_stat(pid, tid)
        if st is None:
            continue
        ss = schedstat(pid, tid)
        wchan = (read_text(f"/proc/{pid}/task/{tid}/wchan") or "").strip()
        rows.append({"tid": tid, "comm": st.comm, "state": st.state,
                     "schedstat": list(ss) if ss is not None else None,
                     "wchan": wchan if wchan not in ("", "0") else ""})
    return {"mono_ns": time.monotonic_ns(), "threads": rows}


def wake_filter(tids: list[int]) -> str:
    """A tracepoint filter on the wakee (``pid``, the thread woken) that keeps the target's
    threads and every thread created after this listing (new tids are larger; others' are
    dropped when read), within the size the kernel accepts: the closest ranges are merged
    until it fits (a merged range lets some other tasks' wake-ups through, never drops the
    target's)."""
    if not tids:
        return ""
    ranges = _ranges(sorted(set(tids)))
    while len(_render(ranges)) > MAX_FILTER and len(ranges) > 1:
        gaps = [ranges[i + 1][0] - ranges[i][1] for i in range(len(ranges) - 1)]
        i = gaps.index(min(gaps))
        ranges[i:i + 2] = [(ranges[i][0], ranges[i + 1][1])]
    return _render(ranges)


def _ranges(tids: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for t in tids:
        if out and t == out[-1][1] + 1:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out


def _render(ranges: list[tuple[int, int]]) -> str:
    terms = [f"pid=={a}" if a == b else f"(pid>={a}&&pid<={b})" for a, b in ranges]
    terms.append(f"pid>{ranges[-1][1]}")
    return "||".join(terms)


__all__ = ["MAX_FILTER", "listing", "schedstat", "wake_filter"]
