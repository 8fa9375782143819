"""The flame tree, derived from a flat ``Profile`` only for rendering.

A node is one frame under one parent.  The root is ``all``; below it one node per thread
(``name (tid)``), then the frames root first; an off-CPU stack ends in one pseudo-frame that
names its wait class and lock (``[mutex 0x... <shared_lock>]``) so the graph says what a
thread waited on.  Each node keeps its *self* time split by class (index 0 is on-CPU, then the
wait classes in ``WAIT_CLASSES`` order); totals are summed bottom-up in one reverse pass
(children always come after their parent), so nothing here recurses and a 10,000-frame stack
costs what its frames cost.

Huge profiles are pruned to ``max_nodes``: the narrowest nodes go, and the time they held is
kept in an ``(elided)`` child of their nearest surviving ancestor, so every total still adds up.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from wallflame.profile import ON, UNIT_NS, WAIT_CLASSES, Profile, StackKey

#: Class names by index: what the ``self`` triples and the page's legend refer to.
CLASSES = (ON, *WAIT_CLASSES)
_CLASS_INDEX = {c: i for i, c in enumerate(CLASSES)}
#: Beyond this many nodes the narrowest are elided (a page stays responsive).
MAX_NODES = 150_000
#: Names longer than this are cut (with the count of what was cut) even in the embedded data.
MAX_NAME = 2000
ELIDED = "(elided)"

_PLAIN = re.compile(r"[^\x20-\x7e]")


def _visible_char(ch: str) -> str:
    cat = unicodedata.category(ch)
    if cat in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") or ch == "\u00a0":
        return f"⟨U+{ord(ch):04X}⟩"
    return ch


def visible(name: str, cap: int = MAX_NAME) -> str:
    """``name`` with control, format (bidi, zero-width) and unpaired surrogate characters
    written out as ``⟨U+XXXX⟩``, cut to ``cap`` characters: what a reader may see of a
    string the target chose."""
    if _PLAIN.search(name) is not None:
        name = "".join(map(_visible_char, name))
    if len(name) > cap:
        name = f"{name[:cap]}…(+{len(name) - cap} chars)"
    return name


def class_index(key: StackKey) -> int:
    if key.state == ON:
        return 0
    return _CLASS_INDEX.get(key.wait, _CLASS_INDEX["other"])


def wait_label(key: StackKey) -> str:
    """The pseudo-frame that ends an off-CPU stack."""
    parts = [key.wait or "other"]
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
    """

    names: list[str] = field(default_factory=lambda: ["all"])
    name: list[int] = field(default_factory=lambda: [0])
    parent: list[int] = field(default_factory=lambda: [-1])
    selfs: list[list[int] | None] = field(default_factory=lambda: [None])
    threads: list[tuple[int, int, str]] = field(default_factory=list)
    unit: str = UNIT_NS
    elided: int = 0

    def __len__(self) -> int:
        return len(self.parent)

    def totals(self) -> list[list[int]]:
        """Total time per class of every node (self plus descendants), without recursion."""
        n = len(self.parent)
        tot = [[0] * len(CLASSES) if s is None else list(s) for s in self.selfs]
        parent = self.parent
        for i in range(n - 1, 0, -1):
            p, t = tot[parent[i]], tot[i]
            for c in range(len(CLASSES)):
                p[c] += t[c]
        return tot

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
        }


class _Builder:
    def __init__(self, unit: str) -> None:
        self.tree = FlameTree(unit=unit)
        self.name_ids: dict[str, int] = {"all": 0}
        self.kids: dict[tuple[int, int], int] = {}
        self.thread_nodes: dict[tuple[int, str], int] = {}

    def intern(self, raw: str) -> int:
        i = self.name_ids.get(raw)
        if i is None:
            i = self.name_ids[raw] = len(self.tree.names)
            self.tree.names.append(visible(raw))
        return i

    def child(self, parent: int, name_id: int) -> int:
        key = (parent, name_id)
        node = self.kids.get(key)
        if node is None:
            t = self.tree
            node = self.kids[key] = len(t.parent)
            t.parent.append(parent)
            t.name.append(name_id)
            t.selfs.append(None)
        return node

    def thread(self, tid: int, name: str) -> int:
        node = self.thread_nodes.get((tid, name))
        if node is None:
            node = self.thread_nodes[(tid, name)] = self.child(0, self.intern(
                thread_label(tid, name)))
            self.tree.threads.append((node, tid, visible(name)))
        return node

    def add(self, node: int, cls: int, weight: int) -> None:
        s = self.tree.selfs[node]
        if s is None:
            s = self.tree.selfs[node] = [0] * len(CLASSES)
        s[cls] += weight


def build_tree(profile: Profile, max_nodes: int = MAX_NODES) -> FlameTree:
    """The per-thread flame tree of ``profile`` (threads merge on the page, not here)."""
    b = _Builder(profile.meta.unit)
    names = profile.meta.threads
    child, intern = b.child, b.intern
    for key, weight in sorted(profile.stacks.items()):
        if weight <= 0:
            continue
        node = b.thread(key.tid, names.get(key.tid, key.thread) if key.tid else key.thread)
        for frame in key.frames:
            node = child(node, intern(frame))
        cls = class_index(key)
        if cls:
            node = child(node, intern(wait_label(key)))
        b.add(node, cls, weight)
    tree = b.tree
    if len(tree) > max_nodes:
        tree = prune(tree, max_nodes)
    return tree


def prune(tree: FlameTree, max_nodes: int) -> FlameTree:
    """Keep at most ``max_nodes`` nodes: the widest ones, plus one ``(elided)`` node under each
    survivor that lost children, holding their time (so the tree may exceed the budget by the
    number of such nodes, never its total)."""
    tot = tree.totals()
    width = [sum(t) for t in tot]
    order = sorted(range(1, len(width)), key=width.__getitem__, reverse=True)
    threshold = width[order[max_nodes - 1]] if max_nodes <= len(order) else -1
    out = FlameTree(unit=tree.unit, names=tree.names)
    new_id = [-1] * len(tree)
    new_id[0] = 0
    elided_id = len(tree.names)
    used_elided = False
    elided_nodes: dict[int, int] = {}
    pruned = 0
    for i in range(1, len(tree)):
        p = new_id[tree.parent[i]]
        if p < 0:
            pruned += 1  # an ancestor was pruned: its elided node already holds this time
            continue
        if width[i] > threshold:
            new_id[i] = len(out.parent)
            out.parent.append(p)
            out.name.append(tree.name[i])
            s = tree.selfs[i]
            out.selfs.append(None if s is None else list(s))
            continue
        pruned += 1
        e = elided_nodes.get(p)
        if e is None:
            e = elided_nodes[p] = len(out.parent)
            out.parent.append(p)
            out.name.append(elided_id)
            out.selfs.append([0] * len(CLASSES))
            used_elided = True
        acc = out.selfs[e]
        assert acc is not None
        for c, v in enumerate(tot[i]):
            acc[c] += v
    if used_elided:
        out.names = [*tree.names, ELIDED]
    out.threads = [(new_id[n], tid, name) for n, tid, name in tree.threads if new_id[n] >= 0]
    out.elided = pruned
    return out
