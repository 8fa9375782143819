"""What the folders' lock attribution (``wallflame.fold.locks``) leaves in a profile, and how
the reports read it: the lock classes, the wait per lock, the uncertainty of a share.

Here, beneath the stages, so that the reports read the attribution without importing the
folder that makes it.
"""

from __future__ import annotations

import math

from wallflame.profile import OFF, Profile
from wallflame.waitclasses import LOCK_CLASSES

#: Below this many observations a share is shown as a count ("3 of 7"), not a percentage.
MIN_OBSERVATIONS = 20
#: Wait classes whose waits are attributed to locks (the table's).
LOCK_WAITS = LOCK_CLASSES


def lock_name(lock: str) -> str:
    """A lock as a reader names it, the same across runs: its symbol when known
    (``0xADDR <g_mutex_queue+0x28>`` -> ``g_mutex_queue+0x28``), else its address."""
    start, end = lock.find("<"), lock.rfind(">")
    if 0 <= start < end:
        return lock[start + 1:end]
    return lock


def wait_by_lock(profile: Profile) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, w in profile.stacks.items():
        if k.state == OFF and k.lock:
            out[k.lock] = out.get(k.lock, 0) + w
    return out


def share_interval(count: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a share ``count / n`` (a binomial proportion)."""
    if n <= 0:
        return 0.0, 1.0
    p = count / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


__all__ = ["LOCK_WAITS", "MIN_OBSERVATIONS", "share_interval", "wait_by_lock"]
