"""``raw/releases.script`` (``collect.locks.futexwakes``) -> where each observed lock was released.

Each record is one futex wake by a thread of the target: its address, the waker and its user
stack.  A wake is a release of lock L when its address is L's futex word (a mutex's address; an
rwlock's base to base + 56).  Its *site* is the frame that released the lock: the first frame
above the unlock machinery (``pthread_mutex_unlock``, ``__lll_lock_wake``, ``std::mutex::unlock``,
``~lock_guard``...).  The result goes to ``meta.extra["lock_releases"]``:
``{lock: {"count": N, "sites": [[site, n, stack], ...]}}`` (``stack``: the site's most frequent
stack, escaped, root first, down to the site).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from wallflame.folded import escape
from wallflame.names import normalize
from wallflame.profile import Profile
from wallflame.textio import iter_lines

_HEADER = re.compile(r"^\S.*?\s(\d+)\s+[\d.]+:\s+\S*sys_enter_futex:\s+uaddr: (0x[0-9a-f]+)")
_RELEASE = ("__lll_lock_wake", "lll_unlock", "lll_mutex_unlock", "pthread_mutex_unlock",
            "__pthread_mutex_unlock",
            "___pthread_mutex_unlock", "pthread_rwlock_unlock", "__pthread_rwlock_unlock",
            "___pthread_rwlock_unlock", "futex_wake", "__futex_wake", "std::mutex::unlock",
            "std::lock_guard", "std::unique_lock", "std::scoped_lock", "std::shared_lock",
            "std::shared_mutex::unlock", "__gthread", "__gthrw", "syscall", "[unknown]")
#: Bytes of an rwlock from its base (the futex words lie inside).
RWLOCK_SPAN = 56
TOP_SITES = 5


def read_wakes(script: Path) -> list[tuple[int, int, tuple[str, ...]]]:
    """(waker tid, futex address, user frames leaf first) per wake."""
    out: list[tuple[int, int, tuple[str, ...]]] = []
    cur: tuple[int, int] | None = None
    frames: list[str] = []
    for _, line in iter_lines(str(script)):
        if not line.strip():
            if cur is not None:
                out.append((cur[0], cur[1], tuple(frames)))
            cur, frames = None, []
            continue
        if line[:1] in (" ", "\t"):
            if cur is None:
                continue
            parts = line.split(None, 1)
            if not parts or parts[0].startswith("ffff"):  # a kernel frame
                continue
            frames.append(normalize(parts[1]) if len(parts) > 1 else "[unknown]")
            continue
        m = _HEADER.match(line)
        if cur is not None:
            out.append((cur[0], cur[1], tuple(frames)))
        cur, frames = ((int(m.group(1)), int(m.group(2), 16)) if m else None), []
    if cur is not None:
        out.append((cur[0], cur[1], tuple(frames)))
    return out


def release_site(leaf_first: tuple[str, ...]) -> int:
    """The index (leaf first) of the frame that released the lock, or -1."""
    seen = False
    for i, f in enumerate(leaf_first):
        if f.startswith(_RELEASE) or ("::~" in f and "lock" in f.lower()):
            seen = True
            continue
        if seen:
            return i
    return -1


def _base(lock: str) -> int:
    head = lock.split(None, 1)[0] if lock else ""
    try:
        return int(head, 16)
    except ValueError:
        return -1


def attach(profile: Profile, script: Path) -> None:
    """``meta.extra["lock_releases"]`` from the wakes of ``script`` on the profile's locks."""
    evidence = profile.meta.extra.get("lock_evidence") or {}
    locks = sorted({k.lock for k in profile.stacks if k.lock})
    spans: list[tuple[int, int, str]] = []
    for lock in locks:
        base = _base(lock)
        if base < 0:
            continue
        kind = str((evidence.get(lock) or {}).get("kind") or "")
        spans.append((base, RWLOCK_SPAN if kind.startswith("rwlock") else 1, lock))
    if not spans:
        return
    counts: dict[str, int] = {}
    sites: dict[str, Counter[str]] = {}
    stacks: dict[tuple[str, str], Counter[tuple[str, ...]]] = {}
    for _tid, addr, frames in read_wakes(script):
        found = next((lk for base, span, lk in spans if base <= addr < base + span), None)
        if found is None:
            continue
        lock = found
        counts[lock] = counts.get(lock, 0) + 1
        i = release_site(frames)
        site = frames[i] if i >= 0 else "[unknown]"
        sites.setdefault(lock, Counter())[site] += 1
        kept = tuple(reversed(frames[i:])) if i >= 0 else tuple(reversed(frames))
        stacks.setdefault((lock, site), Counter())[kept] += 1
    out: dict[str, Any] = {}
    for lock, n in sorted(counts.items()):
        rows = []
        for site, m in sorted(sites[lock].items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_SITES]:
            stack = stacks[(lock, site)].most_common(1)[0][0]
            rows.append([site, m, ";".join(escape(f) for f in stack)])
        out[lock] = {"count": n, "sites": rows}
    profile.meta.extra["lock_releases"] = out


__all__ = ["attach", "read_wakes", "release_site"]
