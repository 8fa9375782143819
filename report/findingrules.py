"""The findings that name a cause by the code it runs in, or by the memory it keeps: the
tables of calls whose on-CPU time is a known cost with a known remedy, and the rule that tells
retained malloc arenas from a leak.  ``report.findings`` states them for one run and
``report.diff.headline`` for the change between two.

* A call is recognised by a frame of its own anywhere in an on-CPU stack (``CALLS``: an
  anchored pattern each); a sample counts once, for the first rule that matches it.
* Retained memory: at least ``ARENAS_MIN`` glibc malloc arenas holding at least
  ``RETAINED_MIN_KB`` resident and ``RETAINED_MIN_SHARE`` of the process's resident size at the
  end of the window (``memory.json``: the arena mappings read from ``/proc/PID/smaps``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from wallflame.report.summary import RUNTIME_ROOT, user_frames

#: Retained memory: at least this many thread arenas (``memory.json`` lists the main heap apart),
ARENAS_MIN = 2
#: this many kB resident in them,
RETAINED_MIN_KB = 64 * 1024
#: and this share of the process's resident size: most of it (a busy server's arenas in use
#: stay under it: MariaDB under 32 clients, ``tests/live/test_busy_server_live.py``).
RETAINED_MIN_SHARE = 0.5


@dataclass(frozen=True)
class Call:
    """A call whose on-CPU time is a known cost: its finding's ``kind`` (a row of
    ``report.findings.RULES``), what it is in words, its frames, and the usual remedy."""

    kind: str
    what: str
    frames: re.Pattern[str]
    remedy: str


#: The calls recognised, in the order a sample is tried against them.
CALLS = (
    Call("busypoll", "an idle poll",
         re.compile(r"^(?:__)?(?:epoll_wait|epoll_pwait2?|poll|ppoll|select|pselect6?)$"),
         "a busy-polling loop (a zero timeout) keeps a CPU busy while there is nothing to "
         "do; blocking in the call frees it"),
    Call("gc", "Go's garbage collector and allocator",
         re.compile(r"^runtime\.(?:gcBgMarkWorker|gcDrain|gcAssistAlloc|markroot|bgsweep|"
                    r"sweepone|mallocgc)"),
         "fewer heap allocations (reused objects, sync.Pool) or a higher GOGC cut it"),
    Call("alloc", "the allocator",
         re.compile(r"^(?:operator (?:new|delete)|(?:__libc_)?(?:malloc|free|cfree|calloc|"
                    r"realloc|memalign|posix_memalign)$|_int_(?:malloc|free|realloc|memalign)$|"
                    r"malloc_consolidate$|unlink_chunk|sysmalloc$|tcache_|tcmalloc::|"
                    r"(?:tc|(?:__)?je)_(?:malloc|free|calloc|realloc|new|delete|memalign|"
                    r"[a-z]*allocx)|\[libjemalloc|\[libtcmalloc)"),
         "allocation churn: objects and buffers reused (a per-thread pool) avoid it"),
    Call("library", "ICU",
         re.compile(r"^(?:icu_\d+::|ucasemap_|ucase_|ustrcase_|u_str(?:To|Fold)|\[libicu)"),
         "on mostly-ASCII text, an ASCII fast path that calls ICU only for other bytes avoids "
         "most of it"),
)
CALL = {c.kind: c for c in CALLS}


@dataclass
class CallTime:
    """One call's on-CPU time: raw weight, by thread, by the call's own entry frame and by
    the code that called it (the nearest named frame outside the call)."""

    weight: int = 0
    tids: Counter[int] = field(default_factory=Counter)
    entries: Counter[str] = field(default_factory=Counter)
    callers: Counter[str] = field(default_factory=Counter)


@lru_cache(maxsize=1 << 16)
def _call_index(frame: str) -> int:
    return next((i for i, c in enumerate(CALLS) if c.frames.match(frame)), len(CALLS))


def which_call(frames: tuple[str, ...]) -> tuple[Call, int] | None:
    """The first of ``CALLS`` a stack's user frames run in, and the index of its root-most
    frame."""
    best, at = len(CALLS), 0
    for i, f in enumerate(user_frames(frames)):
        c = _call_index(f)
        if c < best:
            best, at = c, i
    return (CALLS[best], at) if best < len(CALLS) else None


def _named(frame: str) -> bool:
    return not frame.startswith("[") and frame not in RUNTIME_ROOT


def _own(frame: str) -> bool:
    """A frame of the program's own code: named, not the C++ library's nor Go's runtime."""
    return _named(frame) and not frame.startswith(("std::", "__gnu_cxx::", "runtime."))


def call_names(names: Iterable[str], kinds: Iterable[str] | None = None) -> frozenset[str]:
    """The ``names`` that are frames of a call (of ``kinds``, or any): a stack without one
    of them runs in none, which a set test tells without reading its frames one by one."""
    wanted = {CALLS[i].kind for i in range(len(CALLS))} if kinds is None else set(kinds)
    return frozenset(n for n in names if _call_index(n) < len(CALLS) and
                     CALLS[_call_index(n)].kind in wanted)


def call_times(stacks: Iterable[tuple[tuple[str, ...], int, int]]) -> dict[str, CallTime]:
    """Per call kind, the on-CPU ``(frames, tid, weight)`` stacks that run in it."""
    out: dict[str, CallTime] = {}
    stacks = list(stacks)
    hits = call_names(set().union(*(frames for frames, _, _ in stacks)))
    for frames, tid, w in stacks:
        if hits.isdisjoint(frames):
            continue
        hit = which_call(frames)
        if hit is None:
            continue
        call, i = hit
        t = out.setdefault(call.kind, CallTime())
        t.weight += w
        t.tids[tid] += w
        t.entries[frames[i]] += w
        caller = next((f for f in reversed(frames[:i]) if _own(f)), "")
        if caller:
            t.callers[caller] += w
    return out


def top(counts: Counter[str], n: int = 2) -> list[str]:
    """The ``n`` heaviest names, named frames before a library's unnamed ones."""
    return [k for k, _ in sorted(counts.items(), key=lambda kv: (not _named(kv[0]), -kv[1],
                                                                  kv[0]))[:n]]


@dataclass(frozen=True)
class Retained:
    """Memory held in glibc's malloc arenas at the end of the window."""

    arenas: int
    kb: int
    rss_kb: int


def arenas_kb(memory: Any) -> int:
    """The resident kB of the arena mappings in ``memory.json``'s content (0 without)."""
    arenas = (memory or {}).get("arenas") if isinstance(memory, dict) else None
    return int((arenas or {}).get("total_rss_kb") or 0)


def retained(memory: Any) -> Retained | None:
    """The arenas' memory when it is large enough to look like a leak, else ``None``."""
    if not isinstance(memory, dict):
        return None
    count = int((memory.get("arenas") or {}).get("count") or 0)
    kb = arenas_kb(memory)
    samples = memory.get("samples") or [{}]
    rss = int(samples[-1].get("rss_kb") or 0)
    if count < ARENAS_MIN or kb < RETAINED_MIN_KB or kb < RETAINED_MIN_SHARE * max(rss, kb):
        return None
    return Retained(count, kb, max(rss, kb))
