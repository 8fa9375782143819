"""The flame tree and the data the page embeds: golden files, totals, pruning, hostile names."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import FIXTURES
from hypothesis import given
from hypothesis import strategies as st

from unit.report.test_report_fixtures import HOSTILE, demo_profile, hostile_profile
from wallflame.profile import Profile, StackKey
from wallflame.report.html import embedded_data, render_html
from wallflame.report.tree import CLASSES, ELIDED, build_tree, fit_names, prune, visible

GOLDEN = FIXTURES / "report"


def page_data(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="wf-data">(.*?)</script>', page, re.S)
    assert m, "the page embeds its data in one JSON script tag"
    data: dict[str, Any] = json.loads(m.group(1))
    return data


def decode(data: dict[str, Any]) -> str:
    """The embedded tree as readable lines: ``path<TAB>class<TAB>self`` per self triple."""
    flame = data["flame"]
    names, name, parent = flame["names"], flame["name"], flame["parent"]
    lines = [f"unit {data['unit']} window_ns {data['window_ns']} nodes {len(parent)} "
             f"elided {flame['elided']}"]
    lines += [f"thread node {n} tid {tid} name {t}" for n, tid, t in flame["threads"]]
    triples = flame["self"]
    for k in range(0, len(triples), 3):
        node, cls, value = triples[k:k + 3]
        path = []
        while node > 0:
            path.append(names[name[node]])
            node = parent[node]
        lines.append(f"{';'.join(reversed(path))}\t{flame['classes'][cls]}\t{value}")
    return "\n".join(lines) + "\n"


def test_demo_embedded_data_matches_golden(golden: Callable[[Path, str], None]) -> None:
    golden(GOLDEN / "demo-data.txt", decode(page_data(render_html(demo_profile()))))


def test_hostile_embedded_data_matches_golden(golden: Callable[[Path, str], None]) -> None:
    golden(GOLDEN / "hostile-data.txt", decode(page_data(render_html(hostile_profile(12)))))


def test_embedded_data_is_what_embedded_data_returns() -> None:
    p = demo_profile()
    assert page_data(render_html(p)) == json.loads(json.dumps(embedded_data(p)))


def test_tree_totals_equal_profile_totals_per_class() -> None:
    p = demo_profile()
    tree = build_tree(p)
    root = tree.totals()[0]
    per_class = p.per_class()
    assert root == [per_class[c] for c in CLASSES]
    # one node per thread below the root, named "name (tid)"
    assert sorted(tree.names[tree.name[n]] for n, _, _ in tree.threads) == sorted(
        f"{t.name} ({t.tid})" for t in p.per_thread())


def test_off_cpu_stacks_end_in_a_named_wait_frame() -> None:
    tree = build_tree(demo_profile())
    assert "[mutex 0x55d0c0a04040 <shared_lock> held by 4244]" in tree.names
    assert "[poll]" in tree.names and "[condvar]" in tree.names


def test_ten_thousand_frame_stack_builds_without_recursion() -> None:
    tree = build_tree(hostile_profile(10_000))
    assert max(tree.depth()) == 10_003  # thread, main, 10,000 frames, bottom
    assert tree.totals()[0][0] == sum(w for k, w in hostile_profile(10).on_cpu().stacks.items())


def test_pruning_keeps_every_nanosecond_in_elided_nodes() -> None:
    p = Profile()
    for i in range(3000):
        p.add(StackKey(("main", f"f{i % 50}", f"g{i}"), 1, "t"), 1 + i)
    full = build_tree(p)
    small = prune(full, 200)
    assert len(small) < 200 + 60
    assert small.totals()[0] == full.totals()[0]
    assert ELIDED in small.names
    elided_id = small.names.index(ELIDED)
    elided_nodes = sum(1 for n in small.name if n == elided_id)
    assert small.elided == len(full) - (len(small) - elided_nodes)
    kept = [small.parent[i] < i for i in range(1, len(small))]
    assert all(kept)


def test_hostile_names_are_visible_and_json_safe() -> None:
    page = render_html(hostile_profile(20))
    data = page_data(page)
    names = data["flame"]["names"]
    for raw in HOSTILE:
        assert visible(raw) in names
    assert "bidi⟨U+202E⟩txt.exe" in names
    assert "esc⟨U+001B⟩[31mred" in names
    assert "nul⟨U+0000⟩byte" in names


@given(st.text(max_size=60))
def test_visible_leaves_no_control_format_or_surrogate(raw: str) -> None:
    out = visible(raw, cap=80)
    assert not any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in out)
    if raw.isprintable() and len(raw) <= 80 and "\u00a0" not in raw:
        assert out == raw
    out.encode("utf-8")  # always encodable


_frame = st.sampled_from(["a", "b", "c", "d;e", "f"])
_stack = st.tuples(st.lists(_frame, max_size=6).map(tuple), st.sampled_from([1, 2]),
                   st.sampled_from(["on", "mutex", "sleep"]), st.integers(1, 1000))


@given(st.lists(_stack, max_size=40))
def test_tree_is_a_trie_holding_exactly_the_stacks(stacks: list[Any]) -> None:
    p = Profile()
    expected: dict[tuple[str, ...], int] = {}
    for frames, tid, cls, w in stacks:
        key = StackKey(frames, tid, f"t{tid}", 1, "on" if cls == "on" else "off",
                       "" if cls == "on" else cls)
        p.add(key, w)
        path = (f"t{tid} ({tid})", *frames) + (() if cls == "on" else (f"[{cls}]",))
        expected[path] = expected.get(path, 0) + w
    tree = build_tree(p)
    seen: set[tuple[int, int]] = set()
    for i in range(1, len(tree)):
        assert tree.parent[i] < i
        assert (tree.parent[i], tree.name[i]) not in seen, "a child name appears twice"
        seen.add((tree.parent[i], tree.name[i]))
    got: dict[tuple[str, ...], int] = {}
    for i, s in enumerate(tree.selfs):
        if s is not None:
            path, node = [], i
            while node > 0:
                path.append(tree.names[tree.name[node]])
                node = tree.parent[node]
            got[tuple(reversed(path))] = sum(s)
    assert got == expected


def test_long_names_are_shortened_to_the_budget() -> None:
    p = Profile()
    for i in range(50):
        p.add(StackKey(("main", f"tmpl<{i}," + "x" * 5000 + ">"), 1, "t"), 10)
    tree = build_tree(p)
    assert all(len(n) <= 2000 + 20 for n in tree.names)  # MAX_NAME, plus the "(+N chars)"
    fit_names(tree, 20_000)
    assert sum(len(n) for n in tree.names) <= 20_000 + 20 * tree.shortened
    assert tree.shortened == 50 and all(n.startswith("tmpl<") for n in tree.names[-50:])
