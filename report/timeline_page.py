"""The report page's timeline: each thread's events, tied to the nodes of the page's flame tree.

The page draws one row per thread over the window (``templates/timeline.js``) and, when a
range is selected, rebuilds every flame graph from the events in it.  So each event carries
the flame-tree node its time belongs to: an on-CPU sample its stack's leaf, a blocked span
the pseudo-frame that ends its stack (``[mutex 0x... <lock>]``), as the folded stacks put
them.  A stack the tree pruned goes to the ``(elided)`` node that holds its time; a blocked
span with no sampled stack goes to its thread's node (class ``other``), where the page splits
its time over the thread's stacks as ``report --from --to`` does (``report.timerange``): each
blocked span with a stack carries its period (``pp``: listed when it is not 1; 0 for a wait a
snapshot's stop showed), a span the range cut its whole duration (``pw``: the stratum), and a
thread with unsampled spans its blocked time of the whole profile by node and class (``wb``).
A runnable span counts as the runnable class under its own stack when it has one, else under
its thread's node; stopped spans are drawn, not counted in the graphs.

Times are nanoseconds from the start of what is shown (the window, or the range the report
was made for), as differences from the previous event of the same thread and kind.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from wallflame.errors import InputError
from wallflame.profile import OFF, WAIT_CLASSES, Profile, StackKey
from wallflame.report.timerange import Range, timeline_of, whole_blocked
from wallflame.report.tree import ELIDED, FlameTree, thread_label, visible, wait_label
from wallflame.timeline import KINDS, RUNNABLE, TIMELINE, UNSAMPLED, Timeline
from wallflame.waitclasses import FALLBACK

RUNNABLE_CLASS = "runnable"

_SHORTENED = re.compile(r"^(.*)…\(\+(\d+) chars\)$", re.S)


class NodeFinder:
    """Walks the flame tree by names, as ``report.tree`` built it (visible names, shortened
    ones matched by their prefix and length)."""

    def __init__(self, tree: FlameTree) -> None:
        self.tree = tree
        self.child: dict[tuple[int, int], int] = {}
        for i in range(1, len(tree.parent)):
            self.child[(tree.parent[i], tree.name[i])] = i
        self.exact: dict[str, int] = {}
        self.cut: dict[tuple[str, int], int] = {}
        for nid, name in enumerate(tree.names):
            m = _SHORTENED.match(name) if tree.shortened else None
            if m is not None:
                self.cut[(m.group(1), len(m.group(1)) + int(m.group(2)))] = nid
            self.exact.setdefault(name, nid)
        self.cap = min((len(k[0]) for k in self.cut), default=0)
        self.elided = tree.names.index(ELIDED) if ELIDED in tree.names else -1
        self.threads = {tid: node for node, tid, _ in tree.threads}

    def name_id(self, frame: str) -> int:
        v = visible(frame)
        nid = self.exact.get(v)
        if nid is None and self.cut:
            nid = self.cut.get((v[:self.cap], len(v)))
        return -1 if nid is None else nid

    def node(self, tid: int, names: tuple[str, ...]) -> int:
        """The node of ``names`` under the thread's node (-1: the thread is not in the
        tree)."""
        node = self.threads.get(tid, -1)
        if node < 0:
            return -1
        for name in names:
            nxt = self.child.get((node, self.name_id(name)), -1)
            if nxt < 0:
                return self.child.get((node, self.elided), node)
            node = nxt
        return node


def page_timeline(profile: Profile, tree: FlameTree) -> dict[str, Any] | None:
    """The timeline the page embeds, or ``None`` when the profile is not a run directory's
    with a timeline."""
    run_dir = profile.meta.extra.get("run_dir")
    if not isinstance(run_dir, str):
        return None
    try:
        tl, rng = timeline_of(profile)
    except InputError as e:
        if os.path.exists(os.path.join(run_dir, TIMELINE)):
            # A damaged timeline: the page goes without it, and says so.
            message = f"the page has no timeline: {e.format_message()}"
            profile.meta.warn(message)
            print(f"wallflame: warning: {message}", file=sys.stderr)
        return None
    return _embed(tl, rng, profile, NodeFinder(tree))


def _embed(tl: Timeline, rng: Range, profile: Profile, finder: NodeFinder) -> dict[str, Any]:
    names = profile.meta.threads
    nodes: dict[tuple[int, int, int, int], int] = {}
    blocked = _whole_blocked(profile, finder)
    rows = []
    for th in tl.sorted_threads():
        name = names.get(th.tid, th.name)
        root = finder.threads.get(th.tid, -1)
        s_t, s_w, s_n = [], [], []
        prev = rng.start
        for t, w, sid in zip(th.s_time, th.s_weight, th.s_stack, strict=True):
            if not rng.start <= t < rng.end:
                continue
            key = (th.tid, sid, -1, 0)
            n = nodes.get(key)
            if n is None:
                n = nodes[key] = finder.node(th.tid, tl.stacks.frames_of(sid))
            s_t.append(t - prev)
            s_w.append(w)
            s_n.append(n)
            prev = t
        p_t: list[int] = []
        p_d: list[int] = []
        p_k: list[int] = []
        p_n: list[int] = []
        p_l: list[int] = []
        periods: list[list[int]] = []  # [i, period] of blocked spans with a stack, period not 1
        whole: list[list[int]] = []  # [i, duration] of the spans the range cut
        unsampled = False
        prev = rng.start
        for s, d, k, sid, p, ref in zip(th.p_start, th.p_dur, th.p_kind, th.p_stack,
                                        th.p_period, th.p_locks, strict=True):
            c = rng.clip(s, d)
            if not c:
                continue
            start = max(s, rng.start)
            key = (th.tid, sid, k, ref)
            n = nodes.get(key)
            if n is None:
                n = nodes[key] = _span_node(finder, tl, th.tid, name, sid, k, ref, root)
            if k < UNSAMPLED and p != 1:
                periods.append([len(p_t), p])
            if c != d:
                whole.append([len(p_t), d])
            unsampled = unsampled or k == UNSAMPLED
            p_t.append(start - prev)
            p_d.append(c)
            p_k.append(k)
            p_n.append(n)
            p_l.append(ref)
            prev = start
        if not (s_t or p_t):
            continue
        row = {"tid": th.tid, "name": visible(name), "node": root,
               "s": [s_t, s_w, s_n], "p": [p_t, p_d, p_k, p_n, p_l]}
        if periods:
            row["pp"] = periods
        if whole:
            row["pw"] = whole
        if unsampled and blocked.get(th.tid):
            row["wb"] = blocked[th.tid]
        rows.append(row)
    holders: dict[str, list[int]] = {}
    for h in profile.holders:
        holders.setdefault(h.lock, [])
        if h.tid not in holders[h.lock]:
            holders[h.lock].append(h.tid)
    return {"length": rng.end - rng.start, "offset": rng.start - tl.t0,
            "window": tl.t1 - tl.t0, "kinds": list(KINDS), "kind_class": kind_classes(),
            "classes": _n_classes(),
            "sched": tl.off_source == "sched",
            "locks": [visible(tl.lock_of(i + 1)) for i in range(len(tl.lock_sets))],
            "holders": [sorted(holders.get(tl.lock_of(i + 1), []))
                        for i in range(len(tl.lock_sets))],
            "threads": rows}


def _whole_blocked(profile: Profile, finder: NodeFinder) -> dict[int, list[list[int]]]:
    """Each thread's blocked time of the profile (``report.timerange.whole_blocked``) by
    flame-tree node and class, as ``[node x classes + class, ns]``: where a range of the page
    puts the blocked time of a thread none of whose spans in it has a stack, as
    ``report.timerange`` does."""
    from wallflame.report.tree import CLASSES

    out: dict[int, dict[int, int]] = {}
    for tid, stacks in whole_blocked(profile).items():
        for k, w in stacks:
            node = finder.node(tid, (*k.frames, wait_label(k)))
            if node >= 0 and k.wait in CLASSES:
                at = out.setdefault(tid, {})
                i = node * len(CLASSES) + CLASSES.index(k.wait)
                at[i] = at.get(i, 0) + w
    return {tid: [[i, w] for i, w in sorted(by.items())] for tid, by in out.items()}


def _span_node(finder: NodeFinder, tl: Timeline, tid: int, name: str, sid: int, kind: int,
               ref: int, root: int) -> int:
    """The node a span's time sits under: the pseudo-frame ending its stack (a runnable
    span's, when it has one: the stack it was preempted or blocked at)."""
    if kind == RUNNABLE and sid:
        wait, lock = RUNNABLE_CLASS, ""
    elif kind >= UNSAMPLED:
        return root
    else:
        wait, lock = WAIT_CLASSES[kind], tl.lock_of(ref)
    frames = tl.stacks.frames_of(sid)
    key = StackKey(frames, tid, name, 0, OFF, wait, lock)
    return finder.node(tid, (*frames, wait_label(key)))


def _n_classes() -> int:
    """How many classes a node has in the page (``wb``'s indices are node x this + class)."""
    from wallflame.report.tree import CLASSES

    return len(CLASSES)


def kind_classes() -> list[int]:
    """For each span kind, the flame graph's class its time counts under (-1: none)."""
    from wallflame.report.tree import CLASSES

    out = []
    for k in KINDS:
        if k == "unsampled":
            out.append(CLASSES.index(FALLBACK))
        else:
            out.append(CLASSES.index(k) if k in CLASSES else -1)
    return out


__all__ = ["NodeFinder", "page_timeline", "thread_label"]
