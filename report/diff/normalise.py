"""Normalisation and noise floor: how two sides' raw weights become comparable numbers.

``rate`` divides by each side's window (thread seconds per second: runs of different length
compare); ``share`` by each side's own total.  Every value carries its sampling error: a share
``p`` measured from ``n`` samples has variance ``p(1-p)/n``; a rate made of ``m`` of a side's
``n`` samples has relative error ``1/sqrt(m)``.  A ``Change`` within ``k`` standard errors
(both sides combined) is not a change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from wallflame.profile import OFF, ON, UNIT_NS, Profile

RATE = "rate"
SHARE = "share"
NORMALISATIONS = (RATE, SHARE)

#: Evidence counters (``Meta.samples`` keys) that count on-CPU samples; anything else that a
#: folder counts is taken as off-CPU evidence (snapshots, scheduler switches).
ON_EVIDENCE = ("perf", "on", "oncpu", "cpu")
NOT_EVIDENCE = ("running", "threads", "lines", "stacks")


@dataclass
class Side:
    """One input's totals and evidence, which every normalisation and noise floor needs.

    window_s: collection window in seconds (0: unknown, e.g. a plain folded file).
    n_on / n_off: number of independent samples behind the on- and off-CPU weights
    (0: unknown; then no noise floor can be drawn for that state).
    """

    label: str
    unit: str
    window_s: float
    total_on: int
    total_off: int
    n_on: int
    n_off: int

    def total(self, view: str) -> int:
        return self.total_on if view == ON else self.total_off if view == OFF else (
            self.total_on + self.total_off)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "unit": self.unit, "window_s": self.window_s,
                "total_on": self.total_on, "total_off": self.total_off,
                "samples_on": self.n_on, "samples_off": self.n_off}


def _on_cpu_counter(kind: str) -> bool:
    k = kind.lower()
    return k in ON_EVIDENCE or (k.startswith("perf:") and "sched" not in k)


def evidence(profile: Profile, on: int, off: int) -> tuple[int, int]:
    """How many samples stand behind the on-CPU (``on``) and off-CPU (``off``) weights.

    ``perf`` counts on-CPU samples (``perf:EVENT`` repeats it per event: used only without
    it); every other counter (snapshots, scheduler switches) is off-CPU evidence."""
    meta = profile.meta
    if meta.unit != UNIT_NS:
        return on, off  # plain folded counts are sample counts
    counts = {k: v for k, v in meta.samples.items() if k.lower() not in NOT_EVIDENCE}
    n_on = counts.get("perf") or sum(v for k, v in counts.items() if _on_cpu_counter(k))
    n_off = sum(v for k, v in counts.items() if not _on_cpu_counter(k) and k != "perf")
    hz = meta.rates.get("perf_hz", 0.0)
    if not n_on and on and hz > 0:
        n_on = max(1, round(on * hz / 1e9))  # cpu-clock: one sample per 1/hz of CPU
    return n_on, n_off


def make_side(label: str, profile: Profile, on: int, off: int) -> Side:
    n_on, n_off = evidence(profile, on, off)
    return Side(label, profile.meta.unit, profile.meta.window_ns / 1e9, on, off, n_on, n_off)


@dataclass
class Norm:
    """How raw weights become comparable numbers, and their sampling error."""

    mode: str
    before: Side
    after: Side

    def scale(self, side: Side, view: str) -> float:
        """Divide a raw weight by this to get the normalised value."""
        if self.mode == RATE:
            return side.window_s * (1e9 if side.unit == UNIT_NS else 1.0)
        return float(side.total(view)) or 1.0

    def unit(self) -> str:
        if self.mode == SHARE:
            return "share of total"
        return "s per s of window" if self.before.unit == UNIT_NS else "samples per s of window"

    def variance(self, side: Side, on: int, off: int, view: str) -> float:
        """Variance of the normalised value of a node weighing ``on`` + ``off`` raw units."""
        var = 0.0
        parts = [(on, side.total_on, side.n_on), (off, side.total_off, side.n_off)]
        if view == ON:
            parts = parts[:1]
        elif view == OFF:
            parts = parts[1:]
        for x, total, n in parts:
            if total <= 0 or x <= 0:
                continue
            if n <= 0:
                return math.inf
            # a share is binomial (p(1-p)/n); a rate also carries the count's own Poisson noise
            rest = max(0, total - x) if self.mode == SHARE else total
            var += x * rest / n
        return var / (self.scale(side, view) ** 2)


def choose_norm(before: Side, after: Side, mode: str | None) -> str:
    if mode is not None:
        return mode
    return RATE if before.window_s > 0 and after.window_s > 0 else SHARE


@dataclass
class Change:
    """One compared quantity: raw and normalised on both sides, delta and its noise floor."""

    name: str
    raw_a: int
    raw_b: int
    a: float
    b: float
    se: float
    k: float

    @property
    def delta(self) -> float:
        return self.b - self.a

    @property
    def relative(self) -> float | None:
        return None if self.a == 0 else self.delta / self.a

    @property
    def significant(self) -> bool:
        return abs(self.delta) > self.k * self.se and self.delta != 0

    def to_json(self) -> dict[str, Any]:
        se = self.se if math.isfinite(self.se) else None
        return {"name": self.name, "before_raw": self.raw_a, "after_raw": self.raw_b,
                "before": self.a, "after": self.b, "delta": self.delta,
                "relative": self.relative, "se": se, "significant": self.significant}
