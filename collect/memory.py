"""Memory over the window, from /proc only (never by calling into the target).

RSS and thread count are sampled from ``/proc/PID/status``.  glibc malloc arenas other than the
main one live in heaps of ``HEAP_MAX_SIZE`` (64 MiB on 64-bit) aligned to that size: an
anonymous ``rw-p`` mapping (the committed part) at a 64 MiB-aligned address, followed by a
``---p`` mapping (the reserved rest) ending at the next 64 MiB boundary, or one 64 MiB ``rw-p``
mapping when fully committed (several such heaps side by side, as an arena past 64 MiB gets,
show as one mapping of a multiple of 64 MiB, or ending in one reserve).  Thread stacks have
their ``---p`` guard *below* the stack and are not 64 MiB-aligned, so they are not counted.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wallflame.collect.target import read_text

HEAP_MAX_SIZE = 64 << 20


@dataclass
class Region:
    start: int
    end: int
    perms: str
    path: str
    rss_kb: int = 0


def parse_smaps(text: str) -> list[Region]:
    regions: list[Region] = []
    for line in text.splitlines():
        head = line.split(None, 5)
        if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
            try:
                lo, hi = (int(x, 16) for x in head[0].split("-", 1))
            except ValueError:
                continue
            regions.append(Region(lo, hi, head[1], head[5].strip() if len(head) > 5 else ""))
        elif line.startswith("Rss:") and regions:
            with contextlib.suppress(IndexError, ValueError):
                regions[-1].rss_kb = int(line.split()[1])
    return regions


def arenas(regions: list[Region]) -> dict[str, Any]:
    """glibc non-main arena heaps (see the module docstring) and the main heap's RSS."""
    maps: list[dict[str, Any]] = []
    for i, r in enumerate(regions):
        if r.path or r.perms != "rw-p" or r.start % HEAP_MAX_SIZE:
            continue
        size = r.end - r.start
        nxt = regions[i + 1] if i + 1 < len(regions) else None
        # Heaps side by side whose committed parts touch show as one mapping (the kernel
        # merges them): k whole heaps, or whole heaps and the committed part of the last.
        guarded = (nxt is not None and nxt.start == r.end and nxt.perms == "---p"
                   and not nxt.path and (nxt.end - r.start) % HEAP_MAX_SIZE == 0)
        if guarded or size % HEAP_MAX_SIZE == 0:
            maps.append({"start": hex(r.start), "size_kb": size // 1024, "rss_kb": r.rss_kb})
    return {"count": len(maps), "mappings": maps,
            "total_rss_kb": sum(int(m["rss_kb"]) for m in maps)}


def main_heap_rss_kb(regions: list[Region]) -> int:
    return sum(r.rss_kb for r in regions if r.path == "[heap]")


def read_arenas(pid: int) -> tuple[dict[str, Any], int] | None:
    text = read_text(f"/proc/{pid}/smaps")
    if text is None:
        return None
    regions = parse_smaps(text)
    return arenas(regions), main_heap_rss_kb(regions)


def sample(pid: int) -> tuple[int, int] | None:
    text = read_text(f"/proc/{pid}/status")
    if text is None:
        return None
    rss = threads = 0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss, threads


class MemorySampler(threading.Thread):
    """Samples RSS and thread count every ``interval_s`` until ``stop`` is set."""

    def __init__(self, pid: int, stop: threading.Event, interval_s: float = 0.25,
                 alive: Callable[[], bool] = lambda: True) -> None:
        super().__init__(name="wallflame-memory", daemon=True)
        self.pid = pid
        self.alive = alive  # false once the process ended (or its PID was reused)
        self.stop_event = stop
        self.interval_s = interval_s
        self.samples: list[dict[str, Any]] = []
        self.cpu_s = 0.0  # this thread's CPU time, once it has ended
        self.t0 = time.monotonic()
        self.arenas_start = read_arenas(pid)

    def run(self) -> None:
        try:
            while self.alive():
                s = sample(self.pid)
                if s is not None:
                    self.samples.append({"t_s": round(time.monotonic() - self.t0, 3),
                                         "rss_kb": s[0], "threads": s[1]})
                if s is None or self.stop_event.wait(self.interval_s):
                    break
        finally:
            self.cpu_s = time.thread_time()

    def result(self) -> dict[str, Any]:
        end = read_arenas(self.pid) if self.alive() else None
        if end is not None:
            # The RSS that contains these arenas, read right after them: the last sample may be
            # a quarter of a second older, and a process still allocating has grown since.
            s = sample(self.pid)
            if s is not None:
                self.samples.append({"t_s": round(time.monotonic() - self.t0, 3),
                                     "rss_kb": s[0], "threads": s[1]})
        empty: dict[str, Any] = {"count": 0, "mappings": [], "total_rss_kb": 0}
        start = self.arenas_start
        last = end or start
        return {"samples": self.samples,
                "arenas_start": start[0] if start else empty,
                "arenas": last[0] if last else empty,
                "main_heap_rss_kb": last[1] if last else 0}
