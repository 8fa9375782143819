"""wallflame diff: the comparison, its normalisations and noise floor, and its three forms."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from wallflame.cli import cli
from wallflame.fold import load_inputs
from wallflame.locks.lockshare import lock_name
from wallflame.profile import OFF, ON, Profile, StackKey
from wallflame.report.diff.compare import RATE, SHARE, compare
from wallflame.report.diff.page import csp_hash, render, stacks_payload, write_html
from wallflame.report.diff.text import to_json, write_text

FIX = FIXTURES / "diff"
BEFORE, AFTER = str(FIX / "before.folded"), str(FIX / "after.folded")
MS = 1_000_000


def prof(stacks: dict[tuple[str, ...], int], window_s: float = 0, perf: int = 0,
         snapshots: int = 0, thread: str = "t", tid: int = 1) -> Profile:
    p = Profile()
    p.meta.unit = "ns" if window_s or perf else "samples"
    p.meta.window_ns = int(window_s * 1e9)
    if perf:
        p.meta.samples["perf"] = perf
    if snapshots:
        p.meta.samples["snapshots"] = snapshots
    for frames, w in stacks.items():
        if frames and frames[-1].startswith("[off "):
            wait, _, lock = frames[-1][5:-1].partition(" ")
            p.add(StackKey(frames[:-1], tid, thread, 1, OFF, wait, lock), w)
        else:
            p.add(StackKey(frames, tid, thread), w)
    return p


def by_name(changes: list, name: str):  # type: ignore[no-untyped-def]
    return next(c for c in changes if c.name == name)


def test_fixture_pair_both_directions_self_and_inclusive() -> None:
    d = compare(load_inputs([BEFORE]), load_inputs([AFTER]))
    assert d.norm.mode == RATE  # windows known (4 s and 2 s) and different
    on = d.functions(ON)
    extra = by_name(on, "extra_work")
    assert extra.a == 0 and extra.b == pytest.approx(0.25) and extra.significant
    helper = by_name(on, "helper")  # vanished: visible from BEFORE's side
    assert helper.a == pytest.approx(0.05) and helper.b == 0 and helper.significant
    # inclusive vs self: worker_loop has no self time, but its inclusive rate grew
    assert by_name(d.functions(ON, inclusive=False), "mix_hash").delta > 0
    assert not any(c.name == "worker_loop" for c in d.functions(ON, inclusive=False))
    assert by_name(on, "worker_loop").delta == pytest.approx(0.2)
    nr = d.new_and_removed()
    assert nr["new_count"] == 2 and nr["removed_count"] == 1
    assert nr["removed"][0]["stack"] == ["mix-2", "worker_loop", "old_path", "helper"]


def test_locks_keyed_by_symbol_and_threads_by_name() -> None:
    d = compare(load_inputs([BEFORE]), load_inputs([AFTER]))
    locks = d.lock_changes()
    assert [c.name for c in locks] == ["shared_lock"]  # addresses differ, the symbol does not
    assert locks[0].a == pytest.approx(0.1) and locks[0].b == pytest.approx(0.4)
    assert {c.name for c in d.thread_changes()} == {"mix-1", "mix-2"}  # tids differ
    assert lock_name("0x10") == "0x10" and lock_name("0x10 <m>") == "m"


def test_share_normalisation_and_default_without_windows() -> None:
    a = prof({("main", "f"): 300, ("main", "g"): 700})
    b = prof({("main", "f"): 600, ("main", "g"): 600})
    d = compare(a, b)
    assert d.norm.mode == SHARE  # plain counts, no windows: share is the only honest choice
    f = by_name(d.functions(ON), "f")
    assert (f.a, f.b) == (pytest.approx(0.3), pytest.approx(0.5))
    assert compare(a, b, mode=RATE).norm.mode == SHARE  # rate asked, impossible: stated
    w = compare(prof({("f",): 10**9}, window_s=1), prof({("f",): 2 * 10**9}, window_s=2))
    assert w.norm.mode == RATE and by_name(w.functions(ON), "f").delta == 0


def test_less_cpu_is_told_apart_from_less_work() -> None:
    """The same thread over the same second: given less CPU (its on-CPU time went to the run
    queue, its waits unchanged) against doing less (its on-CPU time went to waiting on the
    client): the class changes name which."""
    ms = 10**6
    base = prof({("main", "work"): 600 * ms, ("main", "wait", "[off runnable]"): 100 * ms,
                 ("main", "poll", "[off poll]"): 300 * ms}, window_s=1)
    starved = prof({("main", "work"): 300 * ms, ("main", "wait", "[off runnable]"): 400 * ms,
                    ("main", "poll", "[off poll]"): 300 * ms}, window_s=1)
    idle = prof({("main", "work"): 300 * ms, ("main", "wait", "[off runnable]"): 100 * ms,
                 ("main", "poll", "[off poll]"): 600 * ms}, window_s=1)
    for other, grew in ((starved, "runnable"), (idle, "poll")):
        changes = compare(base, other).class_changes()
        assert by_name(changes, ON).delta == pytest.approx(-0.3)
        assert by_name(changes, grew).delta == pytest.approx(0.3)
        rest = [c for c in changes if c.name not in (ON, grew)]
        assert all(c.delta == pytest.approx(0.0) for c in rest), rest


def test_noise_floor_from_sample_counts() -> None:
    # 52% vs 50% of 100 samples is noise; of 100,000 samples it is not
    def pair(n: int) -> tuple[Profile, Profile]:
        return (prof({("f",): 50 * n // 100, ("g",): 50 * n // 100}),
                prof({("f",): 52 * n // 100, ("g",): 48 * n // 100}))

    small = by_name(compare(*pair(100)).functions(ON), "f")
    big = by_name(compare(*pair(100_000)).functions(ON), "f")
    assert small.delta == pytest.approx(big.delta) == pytest.approx(0.02)
    assert not small.significant and big.significant
    expected = math.sqrt(2 * 0.5 * 0.5 / 100)  # binomial SE, both sides (p about 0.5)
    assert small.se == pytest.approx(expected, rel=0.05)
    unknown = compare(prof({("f",): 10}, window_s=1), prof({("f",): 90}, window_s=1))
    assert unknown.functions(ON)[0].se == math.inf  # ns without a sample count: no floor


def test_text_form_states_normalisation_and_floor() -> None:
    import io

    out = io.StringIO()
    write_text(compare(load_inputs([BEFORE]), load_inputs([AFTER])), out)
    text = out.getvalue()
    assert "normalisation: rate" in text and "noise floor" in text
    assert re.search(r"\+0\.2500\s+0\.0000\s+0\.2500\s+new\s+extra_work", text)
    assert re.search(r"-0\.0500\s+0\.0500\s+0\.0000\s+gone\s+helper", text)
    assert "removed stacks: 1" in text


def test_json_form_golden(golden: Callable[[Path, str], None]) -> None:
    d = compare(load_inputs([BEFORE]), load_inputs([AFTER]), ("before", "after"))
    text = json.dumps(to_json(d, top=10), sort_keys=True, indent=1) + "\n"
    golden(FIX / "diff.golden.json", text)


HOSTILE = ['</script><script>alert(1)</script>', '<img src=x onerror=alert(1)>', "a;b",
           "\u202egnp.exe", "x\x1b[31m", "&amp;'\"", "http://evil.example/x"]


def hostile_pair() -> tuple[Profile, Profile]:
    a = prof({("main", HOSTILE[0]): 500, ("main", HOSTILE[1], HOSTILE[2]): 300},
             thread=HOSTILE[3])
    b = prof({("main", HOSTILE[4]): 500, ("main", HOSTILE[5], HOSTILE[6]): 300,
              ("main", "[off mutex 0x1 <" + HOSTILE[1] + ">]"): 100}, thread=HOSTILE[3])
    return a, b


def test_html_is_self_contained_and_safe(tmp_path: Path) -> None:
    a, b = hostile_pair()
    d = compare(a, b, (HOSTILE[0], HOSTILE[1]))
    path = tmp_path / "diff.html"
    write_html(d, str(path))
    assert os.stat(path).st_mode & 0o777 == 0o600
    html = path.read_text(encoding="utf-8")
    assert html.count("<script") == 3 and html.count("</script>") == 3  # 2 scripts, 1 JSON
    assert "<img" not in html and "alert(1)</script>" not in html
    assert not re.search(r"https?://", html)
    assert "\x1b" not in html and "\u202e" not in html
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert csp and "default-src 'none'" in csp.group(1)
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    styles = re.findall(r"<style>(.*?)</style>", html, re.S)
    assert len(scripts) == 2 and len(styles) == 2
    for text in scripts + styles:
        assert csp_hash(text) in csp.group(1)
    assert "unsafe-inline" not in csp.group(1)
    data = re.search(r'<script type="application/json" id="wf-diff-data">(.*?)</script>',
                     html, re.S)
    assert data
    payload = json.loads(data.group(1))
    assert not any("innerHTML" in t or ".html(" in t for t in scripts)
    names = payload["stacks"]["names"]
    assert HOSTILE[0] in names  # the name survives, escaped inside the JSON script tag
    assert any("U+202E" in n for n in names) and any("U+001B" in n for n in names)


def test_html_payload_budget_keeps_heaviest_stacks() -> None:
    stacks = {("main", f"f{i}"): 10 + i for i in range(200)}
    d = compare(prof(stacks), prof(stacks))
    full, cut = stacks_payload(d), stacks_payload(d, max_frames=150)
    assert len(full["len"]) == 200 and full["elided"] == 0 and sum(full["len"]) == 600
    assert len(cut["len"]) == 50 and cut["elided"] == 150 and len(cut["frames"]) == 150
    kept = {cut["names"][i] for i in cut["frames"]}
    assert "f199" in kept and "f150" in kept and "f149" not in kept
    assert full["names"][0] == "all" and len(full["v"]) == 4 * 200


def test_cli_diff_three_forms(tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(cli, ["diff", BEFORE, AFTER])
    assert r.exit_code == 0, r.output
    assert "extra_work" in r.output
    r = runner.invoke(cli, ["diff", BEFORE, AFTER, "-o", str(tmp_path / "d.json")])
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "d.json").read_text())
    assert data["normalisation"]["mode"] == "rate"
    r = runner.invoke(cli, ["diff", BEFORE, AFTER, "--normalise", "share", "-o",
                            str(tmp_path / "d.html")])
    assert r.exit_code == 0, r.output
    assert "normalisation: share" in (tmp_path / "d.html").read_text()
    r = runner.invoke(cli, ["diff", BEFORE, str(tmp_path / "missing")])
    assert r.exit_code == 2


def test_cli_diff_bad_input_is_clean(tmp_path: Path) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x00\xff\xfe garbage\n")
    r = CliRunner().invoke(cli, ["diff", str(bad), AFTER])
    assert r.exit_code == 3 and "Traceback" not in r.output


frames = st.lists(st.sampled_from(["a", "b", "c", "d;e", "<x>"]), min_size=1, max_size=6)
stack_maps = st.dictionaries(st.tuples(frames.map(tuple), st.sampled_from([ON, OFF])),
                             st.integers(1, 10**9), max_size=25)


def from_map(m: dict[tuple[tuple[str, ...], str], int]) -> Profile:
    p = Profile()
    p.meta.samples = {"perf": 1000, "snapshots": 100}
    p.meta.window_ns = 10**9
    for (fr, state), w in m.items():
        p.add(StackKey(fr, 1, "t", 1, state, "mutex" if state == OFF else ""), w)
    return p


@settings(max_examples=60, deadline=None)
@given(stack_maps, stack_maps)
def test_property_swap_negates_and_totals_add_up(ma: dict, mb: dict) -> None:  # type: ignore[type-arg]
    a, b = from_map(ma), from_map(mb)
    d, r = compare(a, b), compare(b, a)
    fwd = {c.name: c for c in d.functions("all")}
    back = {c.name: c for c in r.functions("all")}
    assert fwd.keys() == back.keys()
    for name, c in fwd.items():
        assert c.delta == pytest.approx(-back[name].delta)
        assert c.significant == back[name].significant
    assert sum(v[0] + v[1] for v in d.stacks.values()) == a.total()
    assert sum(v[2] + v[3] for v in d.stacks.values()) == b.total()
    nr, rn = d.new_and_removed(), r.new_and_removed()
    assert nr["new_count"] == rn["removed_count"] and nr["removed_count"] == rn["new_count"]
    assert "<script" not in render(d).split("<body>")[1].split('<script type="application')[0]


def test_html_render_is_deterministic() -> None:
    a, b = hostile_pair()
    assert render(compare(a, b)) == render(compare(a, b))


def test_embedded_page_data_golden(golden: Callable[[Path, str], None]) -> None:
    from wallflame.report.diff.page import page_data

    d = compare(load_inputs([BEFORE]), load_inputs([AFTER]), ("before", "after"))
    data = page_data(d)
    stacks = data["stacks"]
    assert sum(stacks["len"]) == len(stacks["frames"]) and len(stacks["v"]) == 4 * len(
        stacks["len"])
    golden(FIX / "page-data.golden.json", json.dumps(data, sort_keys=True, indent=1) + "\n")
