"""Two profiles compared: what grew, what shrank, what vanished, and what is only noise.

A differential flamegraph that colours by delta at the leaf only, scales one side silently, or
hides frames that disappeared misleads its reader (FlameGraph #44, #342).  So this module:

* builds one **union tree** of frame paths (thread name, frames, an ``[off CLASS LOCK]`` leaf for
  off-CPU stacks) holding both sides' inclusive on-CPU and off-CPU weight per node; the page draws
  it shaped like AFTER (what grew) and shaped like BEFORE (what vanished) from the same data,
  with self or inclusive deltas;
* normalises each side explicitly: ``rate`` (seconds of thread time per second of window; the
  default when both windows are known, so runs of different length compare) or ``share`` (of the
  view's total);
* attaches a **noise floor** to every number: a share ``p`` measured from ``n`` samples has
  standard error ``sqrt(p(1-p)/n)``; a delta's error combines both sides; a change within
  ``k`` standard errors is not called a change;
* keys threads by name and locks by symbol (tids and addresses change from run to run).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from wallflame.profile import OFF, ON, UNIT_NS, WAIT_CLASSES, Profile, StackKey

RATE = "rate"
SHARE = "share"
NORMALISATIONS = (RATE, SHARE)
VIEWS = ("all", ON, OFF)

#: Evidence counters (``Meta.samples`` keys) that count on-CPU samples; anything else that a
#: folder counts is taken as off-CPU evidence (snapshots, scheduler switches).
ON_EVIDENCE = ("perf", "on", "oncpu", "cpu")
NOT_EVIDENCE = ("running", "threads", "lines", "stacks")


def lock_name(lock: str) -> str:
    """A lock's identity across runs: its symbol when known (``0xADDR <sym>``), else address."""
    start, end = lock.find("<"), lock.rfind(">")
    if 0 <= start < end:
        return lock[start + 1:end]
    return lock


def thread_name(profile: Profile, key: StackKey) -> str:
    name = profile.meta.threads.get(key.tid, key.thread) if key.tid else key.thread
    return name or "[unknown]"


def off_frame(key: StackKey) -> str:
    """The pseudo-frame that ends an off-CPU path: its wait class and lock."""
    lock = lock_name(key.lock)
    return f"[off {key.wait or 'other'} {lock}]" if lock else f"[off {key.wait or 'other'}]"


def stack_path(profile: Profile, key: StackKey) -> tuple[str, ...]:
    path = (thread_name(profile, key), *key.frames)
    return (*path, off_frame(key)) if key.state == OFF else path


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


def evidence(profile: Profile) -> tuple[int, int]:
    """How many samples stand behind the on-CPU and off-CPU weights of ``profile``."""
    meta = profile.meta
    t = profile.totals()
    if meta.unit != UNIT_NS:
        return t.on, t.off  # plain folded counts are sample counts
    n_on = sum(v for k, v in meta.samples.items() if k.lower() in ON_EVIDENCE)
    n_off = sum(v for k, v in meta.samples.items()
                if k.lower() not in ON_EVIDENCE and k.lower() not in NOT_EVIDENCE)
    hz = meta.rates.get("perf_hz", 0.0)
    if not n_on and t.on and hz > 0:
        n_on = max(1, round(t.on * hz / 1e9))  # cpu-clock: one sample per 1/hz of CPU
    return n_on, n_off


def make_side(label: str, profile: Profile) -> Side:
    t = profile.totals()
    n_on, n_off = evidence(profile)
    return Side(label, profile.meta.unit, profile.meta.window_ns / 1e9, t.on, t.off, n_on, n_off)


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


@dataclass
class UnionTree:
    """Frame paths of both sides: node 0 is the root; values are inclusive raw weights."""

    names: list[str] = field(default_factory=lambda: ["all"])
    parent: list[int] = field(default_factory=lambda: [-1])
    name: list[int] = field(default_factory=lambda: [0])
    #: per node: before on, before off, after on, after off (inclusive)
    vals: list[list[int]] = field(default_factory=lambda: [[0, 0, 0, 0]])
    _index: dict[tuple[int, int], int] = field(default_factory=dict)
    _names: dict[str, int] = field(default_factory=lambda: {"all": 0})

    def add(self, path: Iterable[str], slot: int, weight: int) -> None:
        node = 0
        self.vals[0][slot] += weight
        index, names = self._index, self._names
        for frame in path:
            ni = names.get(frame)
            if ni is None:
                ni = names[frame] = len(self.names)
                self.names.append(frame)
            child = index.get((node, ni))
            if child is None:
                child = index[(node, ni)] = len(self.parent)
                self.parent.append(node)
                self.name.append(ni)
                self.vals.append([0, 0, 0, 0])
            self.vals[child][slot] += weight
            node = child


@dataclass
class FuncTotals:
    """Per function: inclusive (counted once per stack) and self weight, on and off CPU."""

    incl: dict[str, list[int]] = field(default_factory=dict)
    self_: dict[str, list[int]] = field(default_factory=dict)

    def add(self, path: tuple[str, ...], off: bool, weight: int) -> None:
        slot = 1 if off else 0
        frames = path[1:]  # the thread name is not a function
        for f in set(frames):
            acc = self.incl.get(f)
            if acc is None:
                acc = self.incl[f] = [0, 0]
            acc[slot] += weight
        if frames:
            acc = self.self_.get(frames[-1])
            if acc is None:
                acc = self.self_[frames[-1]] = [0, 0]
            acc[slot] += weight


@dataclass
class Diff:
    """Everything the text, JSON and HTML forms and the CI gate read."""

    norm: Norm
    k: float
    tree: UnionTree
    funcs: tuple[FuncTotals, FuncTotals]
    stacks: dict[tuple[str, ...], list[int]]
    threads: tuple[dict[str, list[int]], dict[str, list[int]]]
    locks: tuple[dict[str, int], dict[str, int]]
    meta: tuple[dict[str, Any], dict[str, Any]]

    @property
    def before(self) -> Side:
        return self.norm.before

    @property
    def after(self) -> Side:
        return self.norm.after

    def change(self, name: str, a: tuple[int, int], b: tuple[int, int], view: str,
               norm: Norm | None = None) -> Change:
        """Compare weights given as (on, off) raw pairs, in ``view`` (and ``norm``)."""
        n = norm or self.norm
        pick = {ON: (1, 0), OFF: (0, 1)}.get(view, (1, 1))
        ra = a[0] * pick[0] + a[1] * pick[1]
        rb = b[0] * pick[0] + b[1] * pick[1]
        va = ra / n.scale(self.before, view)
        vb = rb / n.scale(self.after, view)
        var = (n.variance(self.before, a[0] * pick[0], a[1] * pick[1], view)
               + n.variance(self.after, b[0] * pick[0], b[1] * pick[1], view))
        return Change(name, ra, rb, va, vb, math.sqrt(var), self.k)

    def with_mode(self, mode: str) -> Norm:
        return Norm(mode, self.before, self.after)

    def functions(self, view: str, inclusive: bool = True,
                  norm: Norm | None = None) -> list[Change]:
        """Every function's change in ``view``, largest absolute delta first."""
        fa, fb = (f.incl if inclusive else f.self_ for f in self.funcs)
        out = [self.change(name, _pair(fa.get(name)), _pair(fb.get(name)), view, norm)
               for name in fa.keys() | fb.keys()]
        out = [c for c in out if c.raw_a or c.raw_b]
        out.sort(key=lambda c: (-abs(c.delta), c.name))
        return out

    def thread_changes(self, view: str = "all") -> list[Change]:
        ta, tb = self.threads
        return self._changes(ta, tb, lambda v: (v[0], sum(v[1:])), view)

    def class_changes(self, norm: Norm | None = None) -> list[Change]:
        """On-CPU and each wait class, in the ``all`` view's normalisation."""
        ca = _class_totals(self.threads[0])
        cb = _class_totals(self.threads[1])
        out = [self.change(ON, (ca[0], 0), (cb[0], 0), "all", norm)]
        for i, cls in enumerate(WAIT_CLASSES, 1):
            out.append(self.change(cls, (0, ca[i]), (0, cb[i]), "all", norm))
        return out

    def lock_changes(self, norm: Norm | None = None) -> list[Change]:
        la, lb = self.locks
        out = [self.change(n, (0, la.get(n, 0)), (0, lb.get(n, 0)), "all", norm)
               for n in la.keys() | lb.keys()]
        out.sort(key=lambda c: (-abs(c.delta), c.name))
        return out

    def _changes(self, da: dict[str, list[int]], db: dict[str, list[int]],
                 pair: Any, view: str) -> list[Change]:
        empty = [0] * (1 + len(WAIT_CLASSES))
        out = [self.change(n, pair(da.get(n, empty)), pair(db.get(n, empty)), view)
               for n in da.keys() | db.keys()]
        out.sort(key=lambda c: (-abs(c.delta), c.name))
        return out

    def new_and_removed(self, limit: int = 50) -> dict[str, Any]:
        """Stacks present on one side only, heaviest first (by normalised ``all`` weight)."""
        new = [(p, v[1]) for p, v in self.stacks.items() if not v[0]]
        gone = [(p, v[0]) for p, v in self.stacks.items() if not v[1]]
        new.sort(key=lambda t: (-t[1], t[0]))
        gone.sort(key=lambda t: (-t[1], t[0]))
        sa, sb = self.norm.scale(self.before, "all"), self.norm.scale(self.after, "all")
        return {
            "new": [{"stack": list(p), "after": w / sb, "after_raw": w} for p, w in new[:limit]],
            "removed": [{"stack": list(p), "before": w / sa, "before_raw": w}
                        for p, w in gone[:limit]],
            "new_count": len(new), "removed_count": len(gone),
            "new_total": sum(w for _, w in new) / sb,
            "removed_total": sum(w for _, w in gone) / sa,
        }


def _pair(v: list[int] | None) -> tuple[int, int]:
    return (v[0], v[1]) if v else (0, 0)


def _class_totals(threads: dict[str, list[int]]) -> list[int]:
    acc = [0] * (1 + len(WAIT_CLASSES))
    for v in threads.values():
        for i, x in enumerate(v):
            acc[i] += x
    return acc


_CLASS_INDEX = {c: i for i, c in enumerate(WAIT_CLASSES, 1)}


def _absorb(profile: Profile, slot: int, tree: UnionTree, funcs: FuncTotals,
            stacks: dict[tuple[str, ...], list[int]], threads: dict[str, list[int]],
            locks: dict[str, int]) -> None:
    """One pass over one side's stacks feeding every aggregate."""
    side = slot // 2
    for key, w in profile.stacks.items():
        off = key.state == OFF
        path = stack_path(profile, key)
        tree.add(path, slot + off, w)
        funcs.add(path, off, w)
        acc = stacks.get(path)
        if acc is None:
            acc = stacks[path] = [0, 0]
        acc[side] += w
        t = threads.get(path[0])
        if t is None:
            t = threads[path[0]] = [0] * (1 + len(WAIT_CLASSES))
        t[_CLASS_INDEX.get(key.wait, len(WAIT_CLASSES)) if off else 0] += w
        if off and key.lock:
            name = lock_name(key.lock)
            locks[name] = locks.get(name, 0) + w


def compare(before: Profile, after: Profile, labels: tuple[str, str] = ("before", "after"),
            mode: str | None = None, k: float = 3.0) -> Diff:
    """Compare two profiles; ``mode`` is ``rate``, ``share`` or ``None`` (chosen, see above)."""
    sa, sb = make_side(labels[0], before), make_side(labels[1], after)
    norm = Norm(choose_norm(sa, sb, mode), sa, sb)
    if norm.mode == RATE and (sa.window_s <= 0 or sb.window_s <= 0):
        norm.mode = SHARE  # asked for a rate without windows: say so through the mode
    tree = UnionTree()
    funcs = (FuncTotals(), FuncTotals())
    stacks: dict[tuple[str, ...], list[int]] = {}
    threads: tuple[dict[str, list[int]], dict[str, list[int]]] = ({}, {})
    locks: tuple[dict[str, int], dict[str, int]] = ({}, {})
    for i, p in enumerate((before, after)):
        _absorb(p, 2 * i, tree, funcs[i], stacks, threads[i], locks[i])
    metas = (_meta_digest(before), _meta_digest(after))
    return Diff(norm, k, tree, funcs, stacks, threads, locks, metas)


def _meta_digest(profile: Profile) -> dict[str, Any]:
    """What the gate and the page need to know about how a side was collected."""
    m = profile.meta
    return {
        "unit": m.unit,
        "window_ns": m.window_ns,
        "rates": dict(sorted(m.rates.items())),
        "samples": dict(sorted(m.samples.items())),
        "losses": {k: {"count": v.count, "first_line": v.first_line, "detail": v.detail}
                   for k, v in sorted(m.losses.items())},
        "warnings": list(m.warnings),
        "sources": [{k: v for k, v in s.items() if k != "path"} for s in m.sources],
        "work": m.extra.get("work"),
    }
