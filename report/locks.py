"""The locks section of the summary: per lock, who waited and from where, who held it (confirmed
stacks only, with the observations behind each share), where it was released; and the lock
waits whose lock was not identified, by call site.

A lock is one entry, named by its address (and symbol).  Waits that no observation tied to a
lock (``wallflame.fold.locks``) are never folded into a lock entry: they are listed apart as
``unidentified`` with their call site.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from wallflame.folded import escape, unescape
from wallflame.locks.lockshare import MIN_OBSERVATIONS, share_interval
from wallflame.profile import OFF, Profile
from wallflame.waitclasses import LOCK_CLASSES

#: How many holder stacks, functions and release sites a lock entry lists.
TOP = 5
#: Why an observation's holder was not caught, as the report says it.
REASONS = {
    "free": "lock free at that instant (being handed over)",
    "moved": "lock passed to another thread before the owner stopped",
    "released": "lock released before the owner stopped",
    "releasing": "owner caught inside the unlock",
    "owner waits on the same lock": "owner waiting on the lock itself",
    "no owner recorded": "owner field not yet written",
    "not probed": "owner not stopped (probe limit per round)",
    "stacks off": "owner not stopped (--no-holder-stacks)",
    "no frames": "owner stopped but its stack could not be unwound",
    "not checked": "owner stopped but the lock could not be read again",
    "not stopped": "owner could not be stopped",
    "no unwinder": "owner could not be stopped (the unwinder did not load)",
}


def reason(key: str) -> str:
    """Why a holder was not caught, in words; a tool's own error (the attach refused, say
    ``Operation not permitted`` while another of the collect's tracers had that thread
    stopped) is named as a failed stop with the error kept."""
    if key in REASONS:
        return REASONS[key]
    if key.startswith("check failed"):
        return f"owner stopped but the lock could not be read again ({key})"
    return f"owner could not be stopped ({key})"


def _reasons(counts: dict[str, int]) -> dict[str, int]:
    """Observations per reason in words (keys that say the same thing added together)."""
    out: dict[str, int] = {}
    for k, v in sorted(counts.items()):
        out[reason(k)] = out.get(reason(k), 0) + v
    return out


def _share(count: int, n: int, min_obs: int) -> dict[str, Any]:
    """A share with its observations: ``pct`` with its 95% interval when ``n`` is at least
    the minimum, else only the count."""
    lo, hi = share_interval(count, n)
    out: dict[str, Any] = {"count": count, "of": n}
    if n >= min_obs:
        out.update(share=round(count / n, 4), low=round(lo, 4), high=round(hi, 4))
    return out


def _under_lock(frames: tuple[str, ...], sites: set[str]) -> tuple[str, ...]:
    """The part of a holder's stack (root first) run under the lock: from the innermost frame
    that is one of the lock's call sites (where its waiters lock it) down to the leaf; the
    whole stack when no call site is on it."""
    for i in range(len(frames) - 1, -1, -1):
        if frames[i] in sites:
            return frames[i:]
    return frames


def lock_entries(profile: Profile, seconds: Any, call_site: Any) -> tuple[
        list[dict[str, Any]], list[dict[str, Any]]]:
    """(locks, unidentified): the summary's ``locks`` and ``unidentified_lock_waits``.
    ``seconds(value, unit)`` and ``call_site(frames)`` are the summary's own helpers."""
    unit = profile.meta.unit
    wait: defaultdict[str, int] = defaultdict(int)
    kinds: dict[str, str] = {}
    waiters: defaultdict[str, defaultdict[tuple[int, str], int]] = defaultdict(
        lambda: defaultdict(int))
    sites: defaultdict[str, defaultdict[str, int]] = defaultdict(lambda: defaultdict(int))
    unknown: defaultdict[str, int] = defaultdict(int)
    unknown_waiters: defaultdict[str, defaultdict[tuple[int, str], int]] = defaultdict(
        lambda: defaultdict(int))
    unknown_kind: dict[str, str] = {}
    for k, w in profile.stacks.items():
        if k.state != OFF or k.wait not in LOCK_CLASSES:
            continue
        site = call_site(k.frames)
        if not k.lock:
            unknown[site] += w
            unknown_waiters[site][(k.tid, k.thread)] += w
            unknown_kind.setdefault(site, k.wait)
            continue
        wait[k.lock] += w
        kinds.setdefault(k.lock, k.wait)
        waiters[k.lock][(k.tid, k.thread)] += w
        sites[k.lock][site] += w
    evidence = profile.meta.extra.get("lock_evidence") or {}
    min_obs = int(profile.meta.extra.get("lock_min_observations") or MIN_OBSERVATIONS)
    releases = profile.meta.extra.get("lock_releases") or {}
    held: defaultdict[str, list[tuple[int, Any]]] = defaultdict(list)
    for h, w in profile.holders.items():
        if h.frames:  # a holder without a confirmed stack is not a holder stack
            held[h.lock].append((w, h))
    out = []
    for lock, total in sorted(wait.items(), key=lambda kv: (-kv[1], kv[0])):
        ev = evidence.get(lock) if isinstance(evidence, dict) else None
        ev = ev if isinstance(ev, dict) else {}
        n = int(ev.get("observations") or 0)
        counts = {(int(t), str(s)): int(c) for t, _, s, c in ev.get("holders") or []}
        # A holder stack with no confirmed observation behind it (an input written before
        # holder stacks were confirmed, or one that lost its evidence) is not shown.
        hs = sorted(((w, h) for w, h in held.get(lock, [])
                     if counts.get((h.tid, ";".join(escape(f) for f in h.frames)))),
                    key=lambda x: (-x[0], x[1]))
        confirmed_w = sum(w for w, _ in hs)
        # One row per holder stack, with the threads caught running it.
        by_stack: dict[str, dict[str, Any]] = {}
        for w, h in hs:
            key = ";".join(escape(f) for f in h.frames)
            row = by_stack.setdefault(key, {"stack": key, "w": 0, "count": 0, "threads": []})
            row["w"] += w
            row["count"] += counts.get((h.tid, key), 0)
            row["threads"].append({"tid": h.tid, "name": h.thread})
        stack_rows = sorted(by_stack.values(), key=lambda r: (-r["w"], r["stack"]))
        confirmed_n = int(ev.get("confirmed") or 0)
        lock_sites = set(sites[lock])
        under: defaultdict[str, int] = defaultdict(int)
        for w, h in hs:
            for f in dict.fromkeys(_under_lock(h.frames, lock_sites)):
                under[f] += w
        layout = str(ev.get("kind") or "")
        entry: dict[str, Any] = {
            "lock": lock,
            "kind": "rwlock" if layout.startswith("rwlock") else kinds[lock],  # the waits' class
            "layout": layout,
            "wait_s": seconds(total, unit),
            "call_sites": [{"frame": s, "s": seconds(w, unit)} for s, w in
                           sorted(sites[lock].items(), key=lambda kv: (-kv[1], kv[0]))][:TOP],
            "waiters": [{"tid": tid, "name": name, "s": seconds(w, unit)} for (tid, name), w in
                        sorted(waiters[lock].items(), key=lambda kv: (-kv[1], kv[0]))],
            "observations": n,
            "holders": [{"tid": r["threads"][0]["tid"], "name": r["threads"][0]["name"],
                         "threads": r["threads"], "stack": r["stack"],
                         "s": seconds(r["w"], unit), **_share(r["count"], n, min_obs)}
                        for r in stack_rows[:TOP]],
            "holders_more": max(0, len(stack_rows) - TOP),
            "held_confirmed_s": seconds(confirmed_w, unit),
            "held_confirmed": _share(confirmed_n, n, min_obs),
            "holder_not_caught": {"count": max(0, n - confirmed_n),
                                  "s": seconds(max(0, total - confirmed_w), unit),
                                  "reasons": _reasons(ev.get("not_caught") or {})},
            "held_functions": [{"frame": f, "s": seconds(w, unit)} for f, w in
                               sorted(under.items(), key=lambda kv: (-kv[1], kv[0]))][:8],
            "released_from": _releases(releases.get(lock) if isinstance(releases, dict)
                                       else None, min_obs),
        }
        out.append(entry)
    unidentified = [
        {"call_site": site, "kind": unknown_kind[site], "s": seconds(w, unit),
         "waiters": [{"tid": tid, "name": name, "s": seconds(x, unit)} for (tid, name), x in
                     sorted(unknown_waiters[site].items(), key=lambda kv: (-kv[1], kv[0]))]}
        for site, w in sorted(unknown.items(), key=lambda kv: (-kv[1], kv[0]))]
    return out, unidentified


def _releases(rel: Any, min_obs: int) -> dict[str, Any]:
    """``meta.extra["lock_releases"][lock]``: ``{"count": N, "sites": [[site, n, stack]]}``."""
    if not isinstance(rel, dict):
        return {"count": 0, "sites": []}
    n = int(rel.get("count") or 0)
    rows = []
    for row in rel.get("sites") or []:
        try:
            site, count, stack = str(row[0]), int(row[1]), str(row[2])
        except (IndexError, TypeError, ValueError):
            continue
        rows.append({"frame": site, "stack": stack, **_share(count, n, min_obs)})
    return {"count": n, "sites": rows[:TOP]}


def holder_frames(stack: str) -> list[str]:
    """A holder's escaped, root-first stack -> its frames leaf first, for display."""
    return [unescape(f) for f in reversed(stack.split(";")) if f]
