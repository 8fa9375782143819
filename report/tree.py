"""The flame tree, derived from a flat ``Profile`` only for rendering.

A node is one frame under one parent.  The root is ``all``; below it one node per thread
(``name (tid)``), then the frames root first; an off-CPU stack ends in one pseudo-frame that
names its wait class, the rule's sub-label and the lock (``[mutex 0x... <shared_lock>]``,
``[lock: ProcSleep]``) so the graph says what a thread waited on.  Each node keeps its *self*
time split by class (index 0 is on-CPU, then the wait classes in ``WAIT_CLASSES`` order);
totals are summed bottom-up in one reverse pass (children always come after their parent), so
nothing here recurses and a 10,000-frame stack costs what its frames cost.

Huge profiles are pruned to ``max_nodes``: the narrowest nodes go, and the time they held is
kept in an ``(elided)`` child of their nearest surviving ancestor, so every total still adds up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wallflame.classify import wait_label as sub_label
from wallflame.profile import ON, UNIT_NS, WAIT_CLASSES, Profile, StackKey
from wallflame.report.visible import visible as visible  # re-exported: the one rule
from wallflame.report.visible import visible_char as _visible_char  # noqa: F401 (tests)
from wallflame.speedups import native
from wallflame.waitclasses import FALLBACK

#: Class names by index: what the ``self`` triples and the page's legend refer to.
CLASSES = (ON, *WAIT_CLASSES)
_CLASS_INDEX = {c: i for i, c in enumerate(CLASSES)}
#: Beyond this many nodes the narrowest are elided (a page stays responsive).
MAX_NODES = 150_000
ELIDED = "(elided)"
#: Characters of names a page may embed; beyond it the longest names are shortened further.
NAME_BUDGET = 3_000_000


def class_index(key: StackKey) -> int:
    if key.state == ON:
        return 0
    return _CLASS_INDEX.get(key.wait, _CLASS_INDEX[FALLBACK])


def wait_label(key: StackKey) -> str:
    """The pseudo-frame that ends an off-CPU stack: its class, with the sub-label of the rule
    that gave it (``[lock: ProcSleep]``), then its lock and holder when known."""
    sub = sub_label(key.frames, key.wait)
    parts = [f"{key.wait}: {sub}" if sub else key.wait or FALLBACK]
    if key.lock:
        parts.append(key.lock)
    if key.holder:
        parts.append(f"held by {key.holder}")
    return "[" + " ".join(parts) + "]"


def thread_label(tid: int, name: str) -> str:
    name = name or "[unknown]"
    return f"{name} ({tid})" if tid else name


@dataclass
class FlameTree:
    """Parallel arrays, one entry per node; node 0 is the root ``all``.

    names:    the string table (display-safe, see ``visible``).
    name:     node -> index into ``names``.
    parent:   node -> parent node (-1 for the root); always smaller than the node.
    selfs:    node -> self time per class (``None`` when the node has none).
    threads:  thread nodes as ``(node, tid, thread name)``.
    unit:     ``ns`` or ``samples``.
    elided:   how many nodes were pruned into ``(elided)`` nodes.
    shortened: how many names were cut to keep the embedded names within ``NAME_BUDGET``.
    """

    names: list[str] = field(default_factory=lambda: ["all"])
    name: list[int] = field(default_factory=lambda: [0])
    parent: list[int] = field(default_factory=lambda: [-1])
    selfs: list[list[int] | None] = field(default_factory=lambda: [None])
    threads: list[tuple[int, int, str]] = field(default_factory=list)
    unit: str = UNIT_NS
    elided: int = 0
    shortened: int = 0

    def __len__(self) -> int:
        return len(self.parent)

    def widths(self) -> list[int]:
        """Total time of every node, all classes together (self plus descendants)."""
        w = [0] * len(self.parent)
        for i, s in enumerate(self.selfs):
            if s is not None:
                w[i] = sum(s)
        parent = self.parent
        for i in range(len(w) - 1, 0, -1):
            w[parent[i]] += w[i]
        return w

    def totals(self) -> list[list[int]]:
        """Total time per class of every node (self plus descendants), without recursion."""
        n, parent = len(self.parent), self.parent
        cols = []
        for c in range(len(CLASSES)):
            col = [0] * n
            for i, s in enumerate(self.selfs):
                if s is not None and s[c]:
                    col[i] = s[c]
            if any(col):
                for i in range(n - 1, 0, -1):
                    col[parent[i]] += col[i]
            cols.append(col)
        return [list(t) for t in zip(*cols, strict=True)]

    def depth(self) -> list[int]:
        d = [0] * len(self.parent)
        for i in range(1, len(self.parent)):
            d[i] = d[self.parent[i]] + 1
        return d

    def to_json(self) -> dict[str, Any]:
        """The compact form the page embeds: ``self`` is flat ``node, class, value`` triples."""
        flat: list[int] = []
        for i, s in enumerate(self.selfs):
            if s is not None:
                for c, v in enumerate(s):
                    if v:
                        flat.extend((i, c, v))
        return {
            "unit": self.unit,
            "classes": list(CLASSES),
            "names": self.names,
            "name": self.name,
            "parent": self.parent,
            "self": flat,
            "threads": [list(t) for t in self.threads],
            "elided": self.elided,
            "shortened": self.shortened,
        }


Row = tuple[tuple[int, str], tuple[str, ...], int, int]


def build_tree(profile: Profile, max_nodes: int = MAX_NODES) -> FlameTree:
    """The per-thread flame tree of ``profile`` (threads merge on the page, not here).

    This is the hot loop of report generation, so it leans on one fact: in stacks sorted by
    thread then frames, all stacks that share a prefix are adjacent.  Each stack therefore
    reuses the nodes of its common prefix with the previous stack and creates the rest, with
    no per-frame child lookup.  Nodes come out in that sorted (deterministic) order.  Stacks
    usually arrive sorted already (folded files are written sorted), so they are sorted only
    when the build finds one out of order."""
    tree = _grow_sorted(profile)
    if tree is None:
        rows = tree_rows(profile)
        rows.sort()
        tree = _grow(rows, profile.meta.unit, check=False)
        assert tree is not None
    if len(tree) > max_nodes:
        tree = prune(tree, max_nodes)
    fit_names(tree, NAME_BUDGET)
    return tree


def tree_rows(profile: Profile) -> list[Row]:
    """``(ident, frames, class index, weight)`` of each stack of positive weight: the thread
    it ran on (``(tid, name)``), its frames (an off-CPU stack's ending in its ``wait_label``)
    and its class (``_speedups.tree_rows``)."""
    rows: list[Row] = native.tree_rows(profile.stacks, profile.meta.threads, ON, _CLASS_INDEX,
                                       _CLASS_INDEX[FALLBACK], wait_label)
    return rows


def _grow_sorted(profile: Profile) -> FlameTree | None:
    """The tree of the profile's stacks in their order, or ``None`` when they are not sorted
    by thread then frames.  ``_speedups.grow_stacks`` does it without making the rows."""
    tree = FlameTree(unit=profile.meta.unit)
    ok = native.grow_stacks(profile.stacks, profile.meta.threads, ON, _CLASS_INDEX,
                            _CLASS_INDEX[FALLBACK], wait_label, tree.names, tree.name,
                            tree.parent, tree.selfs, tree.threads, {"all": 0}, len(CLASSES),
                            visible, thread_label)
    return tree if ok else None


def _grow(rows: list[Row], unit: str, check: bool) -> FlameTree | None:
    """The tree of ``rows`` (``_speedups.grow``): each thread's node, then each stack's frames
    under the nodes of the prefix it shares with the stack before it, its weight added to its
    last node's self time in its class.  ``None`` when ``check`` finds the rows out of order
    (by thread, then frames)."""
    tree = FlameTree(unit=unit)
    ok = native.grow(rows, tree.names, tree.name, tree.parent, tree.selfs, tree.threads,
                     {"all": 0}, len(CLASSES), check, visible, thread_label)
    return tree if ok else None


def fit_names(tree: FlameTree, budget: int) -> None:
    """Shorten the longest names until all of them fit in ``budget`` characters (C++ template
    names can run to kilobytes each; the page must stay small enough to open)."""
    lengths = [len(n) for n in tree.names]
    if sum(lengths) <= budget:
        return
    lo, hi = 40, max(lengths)  # the largest cap that fits, by bisection
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(n, mid) for n in lengths) <= budget:
            lo = mid
        else:
            hi = mid - 1
    for i, n in enumerate(tree.names):
        if len(n) > lo:
            tree.names[i] = f"{n[:lo]}…(+{len(n) - lo} chars)"
            tree.shortened += 1


def prune(tree: FlameTree, max_nodes: int) -> FlameTree:
    """Keep at most ``max_nodes`` nodes: the widest ones, plus one ``(elided)`` node under each
    survivor that lost children, holding their time (so the tree may exceed the budget by the
    number of such nodes, never its total)."""
    width = tree.widths()
    order = sorted(width[1:], reverse=True)
    threshold = order[max_nodes - 1] if max_nodes <= len(order) else -1
    out = FlameTree(unit=tree.unit, names=tree.names)
    parent, name, selfs = out.parent, out.name, out.selfs
    # new_id[i] >= 0: the node's id in ``out``; otherwise -(elided node that holds its time)
    new_id = [0] * len(tree)
    elided_id = len(tree.names)
    elided_nodes: dict[int, int] = {}
    pruned = 0
    for i in range(1, len(tree)):
        p = new_id[tree.parent[i]]
        s = tree.selfs[i]
        if p >= 0 and width[i] > threshold:
            new_id[i] = len(parent)
            parent.append(p)
            name.append(tree.name[i])
            selfs.append(None if s is None else list(s))
            continue
        pruned += 1
        if p >= 0:  # the first pruned node below a survivor: its elided node takes the time
            e = elided_nodes.get(p)
            if e is None:
                e = elided_nodes[p] = len(parent)
                parent.append(p)
                name.append(elided_id)
                selfs.append([0] * len(CLASSES))
            p = -e
        new_id[i] = p
        if s is not None:
            acc = selfs[-p]
            assert acc is not None
            for c, v in enumerate(s):
                acc[c] += v
    if elided_nodes:
        out.names = [*tree.names, ELIDED]
    out.threads = [(new_id[n], tid, name) for n, tid, name in tree.threads if new_id[n] > 0]
    out.elided = pruned
    return out
