"""The data model: time-weighted stacks of thread time.

Every weight is integer nanoseconds of one thread's time (or, for folded files of unknown unit,
a sample count, stated in ``Meta.unit``).  The model is flat: a mapping from a canonical
``StackKey`` to a weight.  Trees are derived only for rendering.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from wallflame.speedups import native
from wallflame.waitclasses import BLOCKED_CLASSES as BLOCKED_CLASSES
from wallflame.waitclasses import FALLBACK
from wallflame.waitclasses import RUNNABLE as RUNNABLE  # waiting for a CPU: not blocked
from wallflame.waitclasses import WAIT_CLASSES as WAIT_CLASSES  # the table's, in display order

if TYPE_CHECKING:  # the keys' types only: a report's start-up does not build them (1 ms)
    from wallflame.metaextra import Extra

ON = "on"
OFF = "off"
STATES = (ON, OFF)

UNIT_NS = "ns"
UNIT_SAMPLES = "samples"


class StackKey(NamedTuple):
    """One unique stack of one thread in one state.

    ``frames`` are root first and do not include the thread itself.  ``wait`` is empty for
    on-CPU stacks.  ``lock`` is the lock's identity (``0xADDR`` optionally followed by
    `` <symbol>``) when known, ``holder`` the tid that owned it at that instant (0: unknown).
    """

    frames: tuple[str, ...]
    tid: int = 0
    thread: str = ""
    pid: int = 0
    state: str = ON
    wait: str = ""
    lock: str = ""
    holder: int = 0


class Group(NamedTuple):
    """What the totals tell stacks apart by: everything of a ``StackKey`` but its frames,
    pid and holder."""

    tid: int
    thread: str
    state: str
    wait: str
    lock: str


class HolderKey(NamedTuple):
    """Who held ``lock`` while someone waited on it: the holder and its stack then."""

    lock: str
    tid: int
    thread: str
    frames: tuple[str, ...]


@dataclass
class Loss:
    """Input that could not be used: counted, never silently dropped."""

    count: int = 0
    first_line: int = 0
    detail: str = ""


@dataclass
class Meta:
    """Everything known about how a profile was obtained.

    unit:      ``ns`` (thread time) or ``samples`` (folded input of unknown unit).
    sources:   one dict per input: path, format, event, and anything the folder adds.
    window_ns: the collection window's length, when known (0: unknown).
    rates:     sampling rates by collector, e.g. ``{"perf_hz": 997.0, "pmp_hz": 10.0}``.
    samples:   evidence counts by kind, e.g. ``{"perf": 12000, "snapshots": 300}``.
    losses:    kind -> Loss (lost events, truncated records, undecodable lines...).
    warnings:  human-readable, deduplicated, in order of first appearance.
    threads:   tid -> latest known thread name.
    extra:     JSON-able data a stage passes on, one typed key each (``wallflame.metaextra``:
               those saved in ``meta.json`` and those kept in memory only).
    """

    unit: str = UNIT_NS
    sources: list[dict[str, Any]] = field(default_factory=list)
    window_ns: int = 0
    rates: dict[str, float] = field(default_factory=dict)
    samples: dict[str, int] = field(default_factory=dict)
    losses: dict[str, Loss] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    threads: dict[int, str] = field(default_factory=dict)
    extra: Extra = field(default_factory=lambda: cast("Extra", {}))

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def note(self, message: str) -> None:
        """How a figure was estimated, for the quality panel: not a warning (nothing to act
        on), so never printed on the terminal."""
        notes = self.extra.setdefault("notes", [])
        if message not in notes:
            notes.append(message)

    def lose(self, kind: str, line: int = 0, count: int = 1, detail: str = "") -> None:
        loss = self.losses.get(kind)
        if loss is None:
            self.losses[kind] = Loss(count, line, detail)
        else:
            loss.count += count
            if line and (not loss.first_line or line < loss.first_line):
                loss.first_line = line

    def count(self, kind: str, n: int = 1) -> None:
        self.samples[kind] = self.samples.get(kind, 0) + n

    def merge(self, other: Meta) -> None:
        if self.unit != other.unit:
            self.warn(f"merged profiles with different units ({self.unit}, {other.unit})")
        self.sources.extend(other.sources)
        self.window_ns = max(self.window_ns, other.window_ns)
        for k, v in other.rates.items():
            self.rates.setdefault(k, v)
        for k, n in other.samples.items():
            self.count(k, n)
        for k, loss in other.losses.items():
            self.lose(k, loss.first_line, loss.count, loss.detail)
        for w in other.warnings:
            self.warn(w)
        self.threads.update(other.threads)
        extra = cast("dict[str, Any]", self.extra)  # (``metaextra.add_missing``, not imported)
        for key, value in other.extra.items():
            extra.setdefault(key, value)

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["threads"] = {str(k): v for k, v in sorted(self.threads.items())}
        d["losses"] = {k: dataclasses.asdict(v) for k, v in sorted(self.losses.items())}
        return d


@dataclass
class ThreadTotals:
    """Per-thread (or overall) time split: on-CPU and each wait class."""

    tid: int
    name: str
    on: int = 0
    wait: dict[str, int] = field(default_factory=lambda: dict.fromkeys(WAIT_CLASSES, 0))

    @property
    def off(self) -> int:
        """Blocked time: every class but ``runnable``."""
        return sum(w for c, w in self.wait.items() if c != RUNNABLE)

    @property
    def runnable(self) -> int:
        return self.wait.get(RUNNABLE, 0)

    @property
    def total(self) -> int:
        return self.on + self.runnable + self.off

    def add(self, key: StackKey | Group, weight: int) -> None:
        if key.state == ON:
            self.on += weight
        else:
            cls = key.wait if key.wait in self.wait else FALLBACK
            self.wait[cls] += weight


@dataclass
class Profile:
    """Stacks and their weights, plus metadata and the lock-holder table."""

    stacks: dict[StackKey, int] = field(default_factory=dict)
    holders: dict[HolderKey, int] = field(default_factory=dict)
    meta: Meta = field(default_factory=Meta)

    def add(self, key: StackKey, weight: int) -> None:
        if weight:
            self.stacks[key] = self.stacks.get(key, 0) + weight

    def add_holder(self, key: HolderKey, weight: int) -> None:
        if weight:
            self.holders[key] = self.holders.get(key, 0) + weight

    def merge(self, other: Profile) -> Profile:
        """Add ``other`` into this profile (in place) and return it."""
        for k, w in other.stacks.items():
            self.add(k, w)
        for h, w in other.holders.items():
            self.add_holder(h, w)
        self.meta.merge(other.meta)
        return self

    def filter(self, keep: Callable[[StackKey], bool]) -> Profile:
        """A new profile with only the stacks ``keep`` accepts (metadata copied)."""
        out = Profile(meta=dataclasses.replace(self.meta))
        out.stacks = {k: w for k, w in self.stacks.items() if keep(k)}
        locks = {k.lock for k in out.stacks if k.lock}
        out.holders = {h: w for h, w in self.holders.items() if h.lock in locks}
        return out

    def on_cpu(self) -> Profile:
        return self.filter(lambda k: k.state == ON)

    def off_cpu(self) -> Profile:
        return self.filter(lambda k: k.state == OFF)

    def total(self) -> int:
        return sum(self.stacks.values())

    def grouped(self) -> dict[Group, int]:
        """The weight of each ``Group``: one pass over the stacks, from which the totals
        below are taken (a profile has thousands of stacks and a few dozen groups), in the
        order each group first appears (``_speedups.group_weights``)."""
        return {Group(*g): w for g, w in native.group_weights(self.stacks).items()}

    def totals(self) -> ThreadTotals:
        t = ThreadTotals(0, "all")
        for g, w in self.grouped().items():
            t.add(g, w)
        return t

    def per_thread(self, groups: dict[Group, int] | None = None) -> list[ThreadTotals]:
        """Totals per (tid, name), sorted by descending total, then tid (from ``groups``,
        this profile's ``grouped()``, when the caller has them)."""
        by: dict[tuple[int, str], ThreadTotals] = {}
        names = self.meta.threads
        for g, w in (self.grouped() if groups is None else groups).items():
            ident = (g.tid, names.get(g.tid, g.thread) if g.tid else g.thread)
            t = by.get(ident)
            if t is None:
                t = by[ident] = ThreadTotals(*ident)
            t.add(g, w)
        return sorted(by.values(), key=lambda t: (-t.total, t.tid, t.name))

    def per_class(self) -> dict[str, int]:
        """On-CPU time under ``on`` and off-CPU time per wait class."""
        t = self.totals()
        return {ON: t.on, **t.wait}

    def per_lock(self) -> dict[str, int]:
        acc: defaultdict[str, int] = defaultdict(int)
        for g, w in self.grouped().items():
            if g.lock:
                acc[g.lock] += w
        return dict(sorted(acc.items(), key=lambda kv: (-kv[1], kv[0])))

    def sorted_items(self) -> Iterator[tuple[StackKey, int]]:
        """Stacks in a deterministic order."""
        return iter(sorted(self.stacks.items()))


def merge_all(profiles: Iterable[Profile]) -> Profile:
    out = Profile()
    first = True
    for p in profiles:
        if first:
            out.meta.unit = p.meta.unit
            first = False
        out.merge(p)
    return out
