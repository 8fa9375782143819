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

import os
import threading
import time
from typing import Any

from wallflame.collect.target import (
    TaskFiles,
    list_pids,
    list_tids,
    parse_schedstat,
    read_stat,
    read_text,
)

#: The kernel copies a tracepoint filter of at most a page (``PERF_EVENT_IOC_SET_FILTER``).
MAX_FILTER = 4000


def schedstat(pid: int, tid: int) -> tuple[int, int, int] | None:
    """``(on-CPU ns, run-queue ns, timeslices)`` of one thread (``None``: gone, or a kernel
    without schedstats)."""
    return parse_schedstat(read_text(f"/proc/{pid}/task/{tid}/schedstat"))


def clock() -> dict[str, int]:
    """What places a thread's start (``/proc/PID/task/TID/stat`` field 22, ``start_ticks``:
    clock ticks after boot, on the boot-time clock) on ``CLOCK_MONOTONIC``, the window's
    clock: ``clk_tck`` and ``boot_minus_mono_ns`` (``wallflame.window.born_ns``)."""
    mono = time.monotonic_ns()
    boot = time.clock_gettime_ns(time.CLOCK_BOOTTIME)
    return {"clk_tck": os.sysconf("SC_CLK_TCK"), "boot_minus_mono_ns": boot - mono}


class LastCounters:
    """Each thread's latest ``schedstat`` reading (``poll``, from the process watch every
    ``WATCH_S``), for a run without a scheduler capture: a thread that ends within the window
    is in no closing listing, and these are its last figures (``raw/capture.json``
    ``threads.last``)."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.files: dict[int, TaskFiles] = {}

    def poll(self, pid: int) -> None:
        files = self.files.get(pid)
        if files is None:
            files = self.files[pid] = TaskFiles(pid, "schedstat")
        tids = list_tids(pid)
        files.keep_only(set(tids))
        for tid in tids:
            ss = parse_schedstat(files.read(tid))
            at = time.monotonic_ns()
            if ss is None:
                continue
            with self.lock:
                row = self.rows.get(tid)
            if row is None:
                st = read_stat(pid, tid)
                if st is None:
                    continue
                row = {"tid": tid, "pid": pid, "comm": st.comm, "start_ticks": st.start_ticks}
            with self.lock:
                self.rows[tid] = {**row, "schedstat": list(ss), "schedstat_ns": at}

    def to_json(self) -> dict[str, Any]:
        with self.lock:
            return {"clock": clock(), "threads": [r for _, r in sorted(self.rows.items())]}

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def listing(pid: int) -> dict[str, Any]:
    """The target's threads now: ``{"mono_ns", "clock", "threads": [{tid, comm, state,
    schedstat, schedstat_ns, start_ticks, wchan}]}`` (``clock``: see ``clock``; ``wchan``:
    the kernel function a blocked thread sleeps in, read without stopping it;
    ``schedstat_ns``: when that thread's ``schedstat`` was read).
    ``mono_ns``: ``CLOCK_MONOTONIC``, the clock of the window and of perf's records."""
    rows = []
    for tid in list_tids(pid):
        st = read_stat(pid, tid)
        if st is None:
            continue
        ss = schedstat(pid, tid)
        at = time.monotonic_ns()
        wchan = (read_text(f"/proc/{pid}/task/{tid}/wchan") or "").strip()
        rows.append({"tid": tid, "comm": st.comm, "state": st.state,
                     "schedstat": list(ss) if ss is not None else None,
                     "schedstat_ns": at, "start_ticks": st.start_ticks,
                     "wchan": wchan if wchan not in ("", "0") else ""})
    return {"mono_ns": time.monotonic_ns(), "threads": rows, "clock": clock()}


#: The lowest pid the kernel hands out again once allocation has wrapped at ``pid_max``
#: (``RESERVED_PIDS`` in the kernel).
RESERVED_PIDS = 300
#: How many new pids the wake-up filter keeps room for: every thread and process the machine
#: creates during the window takes one, the target's new threads among them.
NEW_PIDS = 1 << 16
#: At most this many ranges of free pids in the filter.
NEW_RANGES = 32


def next_pids(last: int, pid_max: int, used: set[int], room: int = NEW_PIDS,
              most: int = NEW_RANGES) -> list[tuple[int, int]]:
    """The pids the kernel hands out next, as ranges in the order it takes them: it allocates
    cyclically from ``last + 1`` (``/proc/sys/kernel/ns_last_pid``), skips the pids ``used``
    and wraps at ``pid_max`` to ``RESERVED_PIDS``; up to ``room`` pids in at most ``most``
    ranges.  Once pids have wrapped, old processes hold pids above ``last``: a filter of
    "above the newest tid" would let every one of their wake-ups through (a 3 s window wrote
    27 MB of other programs' wake-ups so) and miss a new thread given a lower pid."""
    out: list[tuple[int, int]] = []
    left = room
    for lo, hi in ((last + 1, pid_max - 1), (RESERVED_PIDS, last)):
        a = lo
        for u in [*sorted(p for p in used if lo <= p <= hi), hi + 1]:
            if u > a and left > 0 and len(out) < most:
                b = min(u - 1, a + left - 1)
                out.append((a, b))
                left -= b - a + 1
            a = max(a, u + 1)
    return out


def used_pids() -> set[int]:
    """Every thread id in use now (``/proc/*/task/*``)."""
    out: set[int] = set()
    for pid in list_pids():
        out.update(list_tids(pid))
    return out


def new_pid_ranges() -> list[tuple[int, int]] | None:
    """``next_pids`` for this machine now; ``None`` when ``/proc`` does not say (the filter
    then keeps every pid above the target's)."""
    last, top = (read_text(f"/proc/sys/kernel/{k}") for k in ("ns_last_pid", "pid_max"))
    if not (last and top and last.strip().isdigit() and top.strip().isdigit()):
        return None
    return next_pids(int(last), int(top), used_pids())


def wake_filter(tids: list[int], new: list[tuple[int, int]] | None = None,
                field: str = "pid") -> str:
    """A tracepoint filter on the wakee (``pid``, the thread woken; ``field`` names another
    field of the same kind, as ``prev_pid``) that keeps the target's
    threads and the threads created after this listing (``new``: ``new_pid_ranges``; without
    it every pid above the target's, which is right only until pids wrap; others' wake-ups
    are dropped when read), within the size the kernel accepts: the target's closest ranges
    are merged until it fits (a merged range lets some other tasks' wake-ups through, never
    drops the target's)."""
    if not tids:
        return ""
    ranges = _ranges(sorted(set(tids)))
    while len(_render(ranges, new, field)) > MAX_FILTER and len(ranges) > 1:
        gaps = [ranges[i + 1][0] - ranges[i][1] for i in range(len(ranges) - 1)]
        i = gaps.index(min(gaps))
        ranges[i:i + 2] = [(ranges[i][0], ranges[i + 1][1])]
    return _render(ranges, new, field)


def _ranges(tids: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for t in tids:
        if out and t == out[-1][1] + 1:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out


def _render(ranges: list[tuple[int, int]], new: list[tuple[int, int]] | None,
            field: str = "pid") -> str:
    def term(a: int, b: int) -> str:
        return f"{field}=={a}" if a == b else f"({field}>={a}&&{field}<={b})"

    terms = [term(a, b) for a, b in ranges]
    if new is None:
        terms.append(f"{field}>{ranges[-1][1]}")
    else:
        terms.extend(term(a, b) for a, b in new)
    return "||".join(terms)


__all__ = ["MAX_FILTER", "listing", "new_pid_ranges", "next_pids", "schedstat", "used_pids",
           "wake_filter"]
