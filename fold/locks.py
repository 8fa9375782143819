"""Which lock each exact wait was on, and who held it: only what was observed.

The evidence is the owner sampler's log (``raw/owners.log``, ``collect.locks.owners``) and the
snapshots' ``# wallflame-proc`` records: each record is one *observation* of one waiter thread
blocked on one lock (its address, its call site from a stack scan, its owner when the lock's
layout names one) and, in ``owners.log``, of the owner's stack taken while it was stopped and
still held the lock (``collect.locks.holders``: ``confirmed``), or why that stack was not caught.

Attribution (``attribute``):

* A scheduler wait (exact nanoseconds) goes to lock L only when *that thread* was observed
  waiting on L *at the same call site* (the record's two innermost call-site functions are
  caller and callee in the wait's stack).  Observed on several locks at that site (one mutex
  per connection, say): split in proportion to the observations of each.  Otherwise the wait
  stays ``lock not identified`` (kept with its stack; the summary lists it by call site).
* The holder table of L: L's attributed wait time spread over L's observations in
  ``owners.log``: each observation whose owner was caught holding L gives its share of the
  time to that holder's stack; the rest is "holder not caught", with the reasons counted.
  The counts behind every share are kept (``meta.extra["lock_evidence"]``) so the report
  can show them and their uncertainty, and a count instead of a share when they are few.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wallflame.folded import escape
from wallflame.locks.lockshare import LOCK_WAITS, MIN_OBSERVATIONS
from wallflame.names import normalize
from wallflame.profile import OFF, HolderKey, Profile
from wallflame.stops import add_stops
from wallflame.textio import iter_lines

#: The status of a holder probe whose stack is kept.
CONFIRMED = "confirmed"

Site = tuple[str, ...]


@dataclass
class LockStats:
    """What was observed of one lock."""

    observations: int = 0  # waiter records in owners.log
    waiters: set[int] = field(default_factory=set)
    confirmed: dict[tuple[int, str, tuple[str, ...]], int] = field(default_factory=dict)
    not_caught: dict[str, int] = field(default_factory=dict)
    kind: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"observations": self.observations, "kind": self.kind,
                "confirmed": sum(self.confirmed.values()),
                "not_caught": dict(sorted(self.not_caught.items())),
                "holders": [[tid, name, ";".join(escape(f) for f in frames), n]
                            for (tid, name, frames), n in sorted(self.confirmed.items())]}


@dataclass
class LockEvidence:
    """seen:  (waiter tid, call-site signature) -> lock -> observations.
    stats: lock -> ``LockStats`` (owners.log only: the records that carry a holder probe)."""

    seen: dict[tuple[int, Site], dict[str, int]] = field(default_factory=dict)
    stats: dict[str, LockStats] = field(default_factory=dict)
    #: every thread the holder probes stopped: tid -> [lower ms, upper ms, stops]
    stops: dict[int, list[float]] = field(default_factory=dict)

    def observe(self, rec: dict[str, Any], probed: bool) -> None:
        tid, lock = rec.get("tid"), rec.get("lock")
        if not isinstance(tid, int) or not isinstance(lock, str) or not lock:
            return
        sites = rec.get("sites")
        sig: Site = tuple(normalize(str(x)) for x in sites[:2]) \
            if isinstance(sites, list) else ()
        per = self.seen.setdefault((tid, sig), {})
        per[lock] = per.get(lock, 0) + 1
        if not probed:
            return
        h = rec.get("holder")
        if isinstance(h, dict):
            add_stops(self.stops, h.get("stops"))
        st = self.stats.setdefault(lock, LockStats())
        st.observations += 1
        st.waiters.add(tid)
        st.kind = st.kind or str(rec.get("kind") or "")
        status, key = _holder(rec)
        if key is not None:
            st.confirmed[key] = st.confirmed.get(key, 0) + 1
        else:
            st.not_caught[status] = st.not_caught.get(status, 0) + 1


def _holder(rec: dict[str, Any]) -> tuple[str, tuple[int, str, tuple[str, ...]] | None]:
    """A record's holder probe: (status, (tid, name, frames root first) when confirmed)."""
    from wallflame.fold.eustackframes import parse_frame  # the owner sampler writes its frames

    h = rec.get("holder")
    if not isinstance(h, dict):
        owner = rec.get("owner")
        if not owner:
            return str(rec.get("refused") or "no owner"), None
        return "not probed", None
    status = str(h.get("status") or "unknown")
    frames = h.get("frames")
    if status != CONFIRMED or not isinstance(frames, list) or not frames:
        return status, None
    names = tuple(reversed([parse_frame(str(x)).name for x in frames]))
    tid = h.get("tid") if isinstance(h.get("tid"), int) else 0
    return status, (int(tid or 0), str(h.get("comm") or ""), names)


def read_evidence(owners_log: Path | Iterable[Path] | None,
                  snapshot_records: Iterable[dict[str, Any]] = ()) -> LockEvidence:
    """The observations of ``raw/owners.log`` (with holder probes; a target of several
    processes has one log per process) and of the snapshots' /proc records (identification
    only)."""
    ev = LockEvidence()
    paths = [owners_log] if isinstance(owners_log, Path) else list(owners_log or [])
    for path in paths:
        if not path.exists():
            continue
        for _, line in iter_lines(str(path)):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                ev.observe(rec, probed=True)
    for rec in snapshot_records:
        if rec.get("lock"):
            ev.observe(rec, probed=False)
    return ev


def _matches(leaf_first: Sequence[str], sig: Site) -> bool:
    """``sig`` (innermost call-site function first) is where this stack called: its first
    function is in the stack and the next frame towards the root is its second."""
    if not sig:
        return False
    # every place the function is in the stack: perf names a frame with inlined calls by its
    # function both before and after them (``MutexQueue::pop;std::mutex::lock;
    # MutexQueue::pop``, root first), so only one of its places has the caller next to it
    return any(f == sig[0] and (len(sig) < 2 or (i + 1 < len(leaf_first)
                                                 and leaf_first[i + 1] == sig[1]))
               for i, f in enumerate(leaf_first))


def observed_locks(ev: LockEvidence, tid: int, frames: Sequence[str]) -> dict[str, int]:
    """The locks ``tid`` was observed waiting on at the call site of this stack (root-first
    ``frames``), with their observation counts."""
    leaf_first = list(reversed(frames))
    out: dict[str, int] = {}
    for (t, sig), locks in ev.seen.items():
        if t == tid and _matches(leaf_first, sig):
            for lock, n in locks.items():
                out[lock] = out.get(lock, 0) + n
    return out


def attribute(off: Profile, ev: LockEvidence) -> Profile:
    """Exact scheduler off-CPU time with each lock wait attributed only to the locks observed
    for that thread at that call site (see the module docstring), and the confirmed holders
    table.  Waits with no such observation keep an empty lock (``lock not identified``)."""
    out = Profile(meta=off.meta)
    wait_by_lock: dict[str, int] = {}
    for k, w in off.stacks.items():
        if k.state != OFF or k.wait not in LOCK_WAITS or k.lock:
            out.add(k, w)
            continue
        locks = sorted(observed_locks(ev, k.tid, k.frames).items())
        total = sum(n for _, n in locks)
        if not total:
            out.add(k, w)
            continue
        given = 0
        for i, (lock, n) in enumerate(locks):
            part = w - given if i == len(locks) - 1 else w * n // total
            given += part
            out.add(k._replace(lock=lock, holder=0), part)
            wait_by_lock[lock] = wait_by_lock.get(lock, 0) + part
    holders(out, ev, wait_by_lock)
    return out


def holders(profile: Profile, ev: LockEvidence, wait_by_lock: dict[str, int]) -> None:
    """Replace ``profile.holders`` by the confirmed holders: each lock's wait time spread over
    its observations; confirmed ones go to the holder's stack.  Records the evidence."""
    profile.holders = {}
    names = profile.meta.threads
    for lock, st in sorted(ev.stats.items()):
        waited = wait_by_lock.get(lock, 0)
        if not waited or not st.observations:
            continue
        for (tid, name, frames), n in sorted(st.confirmed.items()):
            profile.add_holder(HolderKey(lock, tid, name or names.get(tid, ""), frames),
                               waited * n // st.observations)
    profile.meta.extra["lock_evidence"] = {
        lock: st.to_json() for lock, st in sorted(ev.stats.items())
        if wait_by_lock.get(lock)}
    profile.meta.extra["lock_min_observations"] = MIN_OBSERVATIONS


__all__ = [
    "LockEvidence",
    "LockStats",
    "attribute",
    "holders",
    "observed_locks",
    "read_evidence",
]
