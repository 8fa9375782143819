"""Two profiles compared: what grew, what shrank, what vanished, and what is only noise.

A differential flamegraph that colours by delta at the leaf only, scales one side silently, or
hides frames that disappeared misleads its reader (FlameGraph #44, #342).  So this module:

* keeps the **union of both sides' paths** (thread name, frames, an ``[off CLASS LOCK]`` leaf
  for off-CPU stacks) with both sides' on- and off-CPU weight each; functions get inclusive
  (once per stack) and self totals from it, and the page builds one tree from it that it draws
  shaped like AFTER (what grew) or like BEFORE (what vanished), with self or total deltas;
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
from dataclasses import dataclass
from typing import Any

from wallflame.locks.lockshare import lock_name
from wallflame.profile import OFF, ON, WAIT_CLASSES, Profile, StackKey
from wallflame.report.diff.normalise import (
    NORMALISATIONS,
    RATE,
    SHARE,
    Change,
    Norm,
    Side,
    choose_norm,
    make_side,
)
from wallflame.waitclasses import FALLBACK

VIEWS = ("all", ON, OFF)


def off_frame(key: StackKey) -> str:
    """The pseudo-frame that ends an off-CPU path: its wait class and lock."""
    lock = lock_name(key.lock)
    wait = key.wait or FALLBACK
    return f"[off {wait} {lock}]" if lock else f"[off {wait}]"


class Names(dict[str | tuple[str], int]):
    """Names interned to small ints (``names[i]`` is the name of id ``i``).  A thread is
    interned as ``(name,)``: its id is never a function's, even when the names are equal."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []
        self[("all",)]  # id 0: the root

    def __missing__(self, key: str | tuple[str]) -> int:
        i = self[key] = len(self.names)
        self.names.append(key if isinstance(key, str) else key[0])
        return i


_LANE = 64
_MASK = (1 << _LANE) - 1


def function_totals(stacks: dict[tuple[int, ...], list[int]], n_names: int
                    ) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    """Per function id: inclusive (counted once per stack, however deep the recursion) and
    self weight, as ``[before on, before off, after on, after off]``.  Index 0 of a path is
    the thread, not a function.  The four weights travel packed in one int (64-bit lanes:
    292 years of thread time each), so each frame costs one addition."""
    incl = [0] * n_names
    self_ = [0] * n_names
    threads = set()
    for path, v in stacks.items():
        w = v[0] | v[1] << _LANE | v[2] << 2 * _LANE | v[3] << 3 * _LANE
        threads.add(path[0])  # thread ids are never function ids (see Names): dropped below
        frames = set(path)
        for f in path if len(frames) == len(path) else frames:
            incl[f] += w
        if len(path) > 1:
            self_[path[-1]] += w
    return _unpack(incl, threads), _unpack(self_, threads)


def _unpack(packed: list[int], skip: set[int]) -> dict[int, list[int]]:
    return {f: [w & _MASK, w >> _LANE & _MASK, w >> 2 * _LANE & _MASK, w >> 3 * _LANE]
            for f, w in enumerate(packed) if w and f not in skip}


@dataclass
class Diff:
    """Everything the text, JSON and HTML forms and the CI gate read."""

    norm: Norm
    k: float
    names: list[str]
    #: union of both sides' paths (interned): before on, before off, after on, after off
    stacks: dict[tuple[int, ...], list[int]]
    threads: tuple[dict[str, list[int]], dict[str, list[int]]]
    locks: tuple[dict[str, int], dict[str, int]]
    meta: tuple[dict[str, Any], dict[str, Any]]
    _funcs: tuple[dict[int, list[int]], dict[int, list[int]]] | None = None
    #: each side's ``memory.json`` content (``None`` when not read)
    memory: tuple[Any, Any] = (None, None)

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

    def functions(self, view: str, inclusive: bool = True, norm: Norm | None = None,
                  limit: int | None = None, grew_by: float | None = None) -> list[Change]:
        """Functions' changes in ``view``, largest absolute delta first: the first ``limit``,
        or those whose normalised value grew by more than ``grew_by``."""
        if self._funcs is None:
            self._funcs = function_totals(self.stacks, len(self.names))
        n = norm or self.norm
        on, off = {ON: (1, 0), OFF: (0, 1)}.get(view, (1, 1))
        sa, sb = n.scale(self.before, view), n.scale(self.after, view)
        rank = []
        for f, v in self._funcs[0 if inclusive else 1].items():
            ra, rb = v[0] * on + v[1] * off, v[2] * on + v[3] * off
            if ra or rb:
                d = rb / sb - ra / sa
                if grew_by is None or d > grew_by:
                    rank.append((-abs(d), self.names[f], v))
        rank.sort(key=lambda t: (t[0], t[1]))
        return [self.change(name, (v[0], v[1]), (v[2], v[3]), view, norm)
                for _, name, v in rank[:limit]]

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
        names = self.names
        new = [([names[f] for f in p], v[2] + v[3]) for p, v in self.stacks.items()
               if not (v[0] or v[1])]
        gone = [([names[f] for f in p], v[0] + v[1]) for p, v in self.stacks.items()
                if not (v[2] or v[3])]
        new.sort(key=lambda t: (-t[1], t[0]))
        gone.sort(key=lambda t: (-t[1], t[0]))
        sa, sb = self.norm.scale(self.before, "all"), self.norm.scale(self.after, "all")
        return {
            "new": [{"stack": p, "after": w / sb, "after_raw": w} for p, w in new[:limit]],
            "removed": [{"stack": p, "before": w / sa, "before_raw": w}
                        for p, w in gone[:limit]],
            "new_count": len(new), "removed_count": len(gone),
            "new_total": sum(w for _, w in new) / sb,
            "removed_total": sum(w for _, w in gone) / sa,
        }


def _class_totals(threads: dict[str, list[int]]) -> list[int]:
    acc = [0] * (1 + len(WAIT_CLASSES))
    for v in threads.values():
        for i, x in enumerate(v):
            acc[i] += x
    return acc


_CLASS_INDEX = {c: i for i, c in enumerate(WAIT_CLASSES, 1)}


def _absorb(profile: Profile, slot: int, names: Names,
            stacks: dict[tuple[int, ...], list[int]], threads: dict[str, list[int]],
            locks: dict[str, int]) -> None:
    """One pass over one side's stacks: union paths, thread and lock totals."""
    intern = names.__getitem__
    thread_of = profile.meta.threads
    other = len(WAIT_CLASSES)
    seen: dict[tuple[int, str], tuple[int, list[int]]] = {}  # (tid, name) -> id, totals
    for key, w in profile.stacks.items():
        frames, tid, name, _pid, state, wait, lock, _holder = key
        t = seen.get((tid, name))
        if t is None:
            thread = (thread_of.get(tid, name) if tid else name) or "[unknown]"
            acc = threads.get(thread)
            if acc is None:
                acc = threads[thread] = [0] * (1 + other)
            t = seen[(tid, name)] = (intern((thread,)), acc)
        if state == OFF:
            path = (t[0], *map(intern, frames), intern(off_frame(key)))
            s, cls = slot + 1, _CLASS_INDEX.get(wait, other)
            if lock:
                lk = lock_name(lock)
                locks[lk] = locks.get(lk, 0) + w
        else:
            path = (t[0], *map(intern, frames))
            s, cls = slot, 0
        v = stacks.get(path)
        if v is None:
            v = stacks[path] = [0, 0, 0, 0]
        v[s] += w
        t[1][cls] += w


def compare(before: Profile, after: Profile, labels: tuple[str, str] = ("before", "after"),
            mode: str | None = None, k: float = 3.0) -> Diff:
    """Compare two profiles; ``mode`` is ``rate``, ``share`` or ``None`` (chosen, see above)."""
    names = Names()
    stacks: dict[tuple[int, ...], list[int]] = {}
    threads: tuple[dict[str, list[int]], dict[str, list[int]]] = ({}, {})
    locks: tuple[dict[str, int], dict[str, int]] = ({}, {})
    for i, p in enumerate((before, after)):
        _absorb(p, 2 * i, names, stacks, threads[i], locks[i])
    ta, tb = _class_totals(threads[0]), _class_totals(threads[1])
    sa = make_side(labels[0], before, ta[0], sum(ta[1:]))
    sb = make_side(labels[1], after, tb[0], sum(tb[1:]))
    norm = Norm(choose_norm(sa, sb, mode), sa, sb)
    if norm.mode == RATE and (sa.window_s <= 0 or sb.window_s <= 0):
        norm.mode = SHARE  # asked for a rate without windows: say so through the mode
    metas = (_meta_digest(before), _meta_digest(after))
    return Diff(norm, k, names.names, stacks, threads, locks, metas,
                memory=(before.meta.extra.get("memory"), after.meta.extra.get("memory")))


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
        "window_start_ns": m.extra.get("window_start_ns"),
        "machine": m.extra.get("machine"),
    }


__all__ = ["NORMALISATIONS", "RATE", "SHARE", "VIEWS", "Change", "Diff", "Norm", "Side",
           "compare", "function_totals", "off_frame"]
