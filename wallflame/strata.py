"""A thread's blocked time over stacks when only some of its waits have one: stratum by
stratum of the waits' durations.

Every wait's duration is exact (the scheduler's switch records); its stack is known only for
a sample of the waits (one switch in N carries a call chain) and for the waits a snapshot's
stop interrupted.  A wait's kind goes with how long it lasts (a 300 ms sleep is not the 2 ms
condition-variable wait after it, however often the sampling falls on the latter), so the
time of the waits with no stack is split within each duration stratum (factors of 4), over
the stacks of that stratum's waits that have one:

* the waits a stop showed keep their own time;
* the rest of the stratum goes over the sampled waits in proportion to period x duration
  (each stands for ``period`` switches) and over the waits a stop showed in proportion to
  duration, the two estimates weighted by how many waits each holds;
* a stratum with neither is left over, for the caller to split over all the thread's sampled
  stacks.

``fold.perf.sampled_switches`` splits the whole window with it, ``report.timerange`` a range
of the window from the timeline's spans (where a wait a stop showed is a span with its stack
and period 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

K = TypeVar("K")

#: Strata of durations up to 2**64 ns (``stratum``).
N_STRATA = 32


def stratum(dur: int) -> int:
    """The stratum of a wait lasting ``dur`` ns: factors of 4 (1-4 us, 4-16 us, ...,
    0.27-1.07 s, ...).  ``_speedups.clip_log`` computes the same."""
    return dur.bit_length() >> 1


@dataclass
class Donors:
    """One thread's waits by stratum: each stratum's time, and its waits of known stack.
    Keys are the callers' stacks (anything that sorts)."""

    total: dict[int, int] = field(default_factory=dict)  # stratum -> ns of every wait in it
    sampled: dict[int, dict[Any, int]] = field(default_factory=dict)  # -> key -> period x ns
    known: dict[int, dict[Any, int]] = field(default_factory=dict)  # -> key -> ns
    n_sampled: dict[int, int] = field(default_factory=dict)
    n_known: dict[int, int] = field(default_factory=dict)

    def wait(self, dur: int, ns: int) -> None:
        """A wait lasting ``dur`` (its whole length gives the stratum), ``ns`` of it counted."""
        b = stratum(dur)
        self.total[b] = self.total.get(b, 0) + ns

    def sample(self, dur: int, key: Any, weight: int) -> None:
        """A sampled wait (counted by ``wait`` too): ``weight`` is period x ns."""
        _add(self.sampled, self.n_sampled, stratum(dur), key, weight)

    def show(self, dur: int, key: Any, ns: int) -> None:
        """A wait whose own stack a stop showed (counted by ``wait`` too)."""
        _add(self.known, self.n_known, stratum(dur), key, ns)


def _add(by: dict[int, dict[Any, int]], count: dict[int, int], b: int, key: Any,
         w: int) -> None:
    one = by.setdefault(b, {})
    one[key] = one.get(key, 0) + w
    count[b] = count.get(b, 0) + 1


def split(d: Donors) -> tuple[dict[Any, int], int, int]:
    """The waits' time over stacks, stratum by stratum: (ns per key, the ns of strata with no
    wait of known stack, left to the caller; the ns split by a stratum's own waits)."""
    out: dict[Any, int] = {}
    leftover = by_stratum = 0
    for b, ns in sorted(d.total.items()):
        known = d.known.get(b, {})
        for key, own in known.items():
            out[key] = out.get(key, 0) + own
        rest = ns - sum(known.values())
        if rest <= 0:
            continue
        sampled = d.sampled.get(b, {})
        if not sampled and not known:
            leftover += rest
            continue
        n_s, n_k = d.n_sampled.get(b, 0), d.n_known.get(b, 0)
        ws, wk = sum(sampled.values()) or 1, sum(known.values()) or 1
        weights: dict[Any, int] = {}
        for key, w in sampled.items():  # the two shares over a common denominator
            weights[key] = weights.get(key, 0) + n_s * w * wk
        for key, w in known.items():
            weights[key] = weights.get(key, 0) + n_k * w * ws
        for key, part in shares(sorted(weights.items()), rest):
            out[key] = out.get(key, 0) + part
        by_stratum += rest
    return out, leftover, by_stratum


def shares(parts: Sequence[tuple[K, int]], total: int) -> list[tuple[K, int]]:
    """``total`` over ``parts`` in proportion to their weights, the rounding to the last."""
    denom = sum(w for _, w in parts) or 1
    out: list[tuple[K, int]] = []
    given = 0
    for i, (key, w) in enumerate(parts):
        part = total - given if i == len(parts) - 1 else total * w // denom
        given += part
        out.append((key, part))
    return out


__all__ = ["N_STRATA", "Donors", "shares", "split", "stratum"]
