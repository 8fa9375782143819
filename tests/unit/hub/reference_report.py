"""The references the report's native passes (``wallflame._speedups``) are held to: each pass
in plain Python, for the tests only (the product has one implementation, the native one).

``use_references`` puts them, and those of ``reference_folded`` and ``reference_timeline``,
in place of the product's functions, so that a whole command runs on them (the tests, and
``benchmarks/native_pure.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from wallflame.classify import default_rules, find_wait
from wallflame.names import is_unknown
from wallflame.profile import OFF, ON, Group, Profile
from wallflame.report.summary import SHALLOW_DEPTH
from wallflame.report.tree import (
    _CLASS_INDEX,
    CLASSES,
    FlameTree,
    Row,
    thread_label,
    visible,
    wait_label,
)
from wallflame.waitclasses import FALLBACK


def grouped(profile: Profile) -> dict[Group, int]:
    """``Profile.grouped`` (``_speedups.group_weights``)."""
    acc: dict[Group, int] = {}
    for k, w in profile.stacks.items():
        g = Group(k.tid, k.thread, k.state, k.wait, k.lock)
        acc[g] = acc.get(g, 0) + w
    return acc


def stack_weights(profile: Profile) -> tuple[int, int]:
    """``summary.stack_weights`` (``_speedups.frame_weights``): each distinct frame name
    judged once, then each stack one set test."""
    shallow = sum(w for k, w in profile.stacks.items() if len(k.frames) <= SHALLOW_DEPTH)
    names: set[str] = set()
    names.update(*(k.frames for k in profile.stacks))
    unknown = {f for f in names if is_unknown(f)}
    if not unknown:
        return shallow, 0
    known = unknown.isdisjoint
    return shallow, sum(w for k, w in profile.stacks.items() if not known(k.frames))


def on_cpu_in(profile: Profile) -> dict[int, dict[str, int]]:
    """``summary.on_cpu_in`` (``_speedups.frame_names`` and ``stacks_naming``)."""
    out: dict[int, dict[str, int]] = {}
    every = [(k, w) for k, w in profile.stacks.items() if k.state != OFF]
    named = default_rules().named(set().union(*(k.frames for k, _ in every)))
    if not named:
        return out
    for k, w in every:
        if named.isdisjoint(k.frames):
            continue
        cls = find_wait(k.frames)
        if cls is not None:
            per = out.setdefault(k.tid, {})
            per[cls] = per.get(cls, 0) + w
    return out


def tree_rows(profile: Profile) -> list[Row]:
    """``tree.tree_rows`` (``_speedups.tree_rows``)."""
    thread_names = profile.meta.threads
    other = _CLASS_INDEX[FALLBACK]
    rows = []
    for key, weight in profile.stacks.items():
        if weight > 0:
            ident = (key.tid, thread_names.get(key.tid, key.thread) if key.tid else key.thread)
            if key.state == ON:
                rows.append((ident, key.frames, 0, weight))
            else:
                rows.append((ident, (*key.frames, wait_label(key)),
                             _CLASS_INDEX.get(key.wait, other), weight))
    return rows


def grow_sorted(profile: Profile) -> FlameTree | None:
    """``tree._grow_sorted`` (``_speedups.grow_stacks``)."""
    return grow_rows(tree_rows(profile), profile.meta.unit, check=True)


def grow_rows(rows: list[Row], unit: str, check: bool) -> FlameTree | None:
    """``tree._grow`` (``_speedups.grow``)."""
    return grow(rows, FlameTree(unit=unit), check)


def grow(rows: list[Row], tree: FlameTree, check: bool) -> FlameTree | None:
    """``rows`` into ``tree`` as ``_speedups.grow`` grows them."""
    names, parent, name, selfs = tree.names, tree.parent, tree.name, tree.selfs
    ids: dict[str, int] = {"all": 0}
    width = len(CLASSES)
    last_ident: tuple[int, str] | None = None
    last: tuple[str, ...] = ()
    path: list[int] = []  # path[i]: the node of last[: i + 1]
    root = 0
    for ident, frames, cls, weight in rows:
        if ident != last_ident:
            if check and last_ident is not None and ident < last_ident:
                return None
            last_ident, last, path = ident, (), []
            root = len(parent)
            parent.append(0)
            name.append(len(names))
            selfs.append(None)
            names.append(visible(thread_label(*ident)))
            tree.threads.append((root, ident[0], visible(ident[1])))
        # i: the length of the common prefix with the previous stack
        n = len(frames) if len(frames) < len(last) else len(last)
        i = 0
        while i < n and frames[i] == last[i]:
            i += 1
        if check and (frames[i] < last[i] if i < n else len(frames) < len(last)):
            return None
        del path[i:]
        node = path[-1] if path else root
        for frame in frames[i:]:
            nid = ids.get(frame)
            if nid is None:
                nid = ids[frame] = len(names)
                names.append(visible(frame))
            parent.append(node)
            node = len(name)
            name.append(nid)
            selfs.append(None)
            path.append(node)
        last = frames
        s = selfs[node]
        if s is None:
            s = selfs[node] = [0] * width
        s[cls] += weight
    return tree


def use_references(mp: pytest.MonkeyPatch) -> None:
    """Every native path of a report, and of ``finish``'s timeline, replaced by its
    reference."""
    from unit.hub import reference_folded, reference_timeline
    from wallflame import folded, profile, timebuild, timeline
    from wallflame.fold import foreign_folded
    from wallflame.report import summary, tree

    def profile_grouped(self: Profile) -> dict[Group, int]:
        return grouped(self)

    patches: list[tuple[Any, str, Any]] = [
        (profile.Profile, "grouped", profile_grouped),
        (summary, "stack_weights", stack_weights),
        (summary, "on_cpu_in", on_cpu_in),
        (tree, "tree_rows", tree_rows),
        (tree, "_grow_sorted", grow_sorted),
        (tree, "_grow", grow_rows),
        (foreign_folded, "_fold_plain", reference_folded.fold_plain),
        (foreign_folded, "frame_splitter", reference_folded.frame_splitter),
        (folded, "frame_splitter", reference_folded.frame_splitter),
        (timebuild, "add_spans", reference_timeline.add_spans),
        (timeline, "json_text", reference_timeline.json_text),
    ]
    for owner, attr, value in patches:
        mp.setattr(owner, attr, value)
