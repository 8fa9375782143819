"""What makes ``wallflame report`` fast must not change what it reads or draws: the folded
reader's fast path and chunked reading, the tree built without sorting already sorted stacks,
the compiled-template cache, and the CLI's quick exit."""

from __future__ import annotations

import os
import random
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wallflame.errors import InputError
from wallflame.fold import folded
from wallflame.fold.options import FoldOptions
from wallflame.profile import Profile, StackKey
from wallflame.report import html
from wallflame.report.tree import build_tree
from wallflame.textio import head, iter_lines

ROOT = Path(__file__).resolve().parent.parent


def line_by_line(path: str, options: FoldOptions) -> Profile:
    """The folded reader as it was: every line through ``read_line``, read one at a time."""
    profile = Profile()
    mode = folded._Mode(options, folded._data_lines(head(path))) if path != "-" else None
    before: dict[str, int] = {}
    for no, line in iter_lines(path):
        mode = folded.read_line(no, line, mode, options, profile, before)
    if not profile.stacks and not before and "malformed folded line" in profile.meta.losses:
        raise InputError("no folded line")
    if mode is None:
        mode = folded._Mode(options, [])
    profile.meta.unit = mode.unit
    if mode.diff:
        profile.meta.extra["diff_before"] = dict(sorted(before.items()))
    profile.meta.extra.setdefault("folded_sources", []).append(
        {"bcc": mode.bcc, "diff": mode.diff})
    return profile


def outcome(read: Any, path: str, options: FoldOptions) -> Any:
    try:
        p = read(path, options)
    except InputError:
        return "InputError"
    return list(p.stacks.items()), p.meta, p.holders


def fast(path: str, options: FoldOptions) -> Profile:
    p = Profile()
    folded.fold(path, options, p)
    return p


MIXED = (
    b"main;start;work 5\n"
    b"main;start;work;leaf 7\r\n"
    b"# a comment\n"
    b"#;hash-thread;f 2\n"
    b"\n   \n"
    b"w-1/17;a;b 3\n"
    b'process 12:"./app";thread (0x7f00);f (x.py:1) 4\n'
    b"thread (33);g 1\n"
    b"main;esc\\x3baped;x 6\n"
    b"main;bad\xff\xfeutf8;y 8\n"
    b"main;zero 0\n"
    b"main;frac 2.5\n"
    b"main;nocount\n"
    b" 9\n"
    b"main; spaced frame ;z 10\n"
    b"main 11\n"
    b"main; 12\n"
    b"main;\xd9\xa1 13\n"
    b"main;last-line-without-newline 14"
)


@pytest.mark.parametrize("chunk", [1, 2, 7, 64, 1 << 22])
@pytest.mark.parametrize("unit", ["samples", "us"])
def test_fast_folded_reading_is_line_by_line_reading(tmp_path: Path, chunk: int, unit: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "mixed.folded"
    path.write_bytes(MIXED)
    monkeypatch.setattr(folded, "CHUNK", chunk)
    options = FoldOptions(folded_unit=unit)
    expected = outcome(line_by_line, str(path), options)
    assert expected != "InputError" and len(expected[0]) > 10
    assert outcome(fast, str(path), options) == expected


_piece = st.sampled_from([b"a", b"b", b";", b" ", b"1", b"23", b"0.5", b"\\x3b", b"\\", b"#",
                          b"\r", b"\n", b"\n", b"\n", b"/", b"-4/5", b"process 1:\"x\"",
                          b"thread (0x1)", b"thread (7)", b"-", b"--", b"\xff", b"\xc3",
                          b"\xa9", b"\t"])


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_piece, max_size=80), st.sampled_from([1, 3, 16, 1 << 22]))
def test_any_bytes_read_as_line_by_line(tmp_path: Path, pieces: list[bytes], chunk: int) -> None:
    path = tmp_path / "any.folded"
    path.write_bytes(b"".join(pieces))
    old = folded.CHUNK
    folded.CHUNK = chunk
    try:
        for unit in ("samples", "ns"):
            options = FoldOptions(folded_unit=unit)
            assert outcome(fast, str(path), options) == outcome(line_by_line, str(path),
                                                                options)
    finally:
        folded.CHUNK = old


def test_stdin_reads_as_a_file_does(tmp_path: Path) -> None:
    path = tmp_path / "in.folded"
    path.write_bytes(MIXED)
    code = ("import sys; from wallflame.fold import folded; from wallflame.fold.options import "
            "FoldOptions; from wallflame.profile import Profile; p = Profile(); "
            "folded.fold('-', FoldOptions(), p); print(repr(sorted(p.stacks.items())))")
    with open(path, "rb") as stdin:
        out = subprocess.run([sys.executable, "-c", code], stdin=stdin, capture_output=True,
                             text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == repr(sorted(line_by_line(str(path), FoldOptions()).stacks.items()))


def _profile(seed: int) -> Profile:
    rng = random.Random(seed)
    p = Profile()
    p.meta.threads = {2: "renamed"}
    for _ in range(400):
        frames = tuple(rng.choice("abcde") for _ in range(rng.randint(0, 7)))
        tid = rng.choice([0, 1, 2, 3])
        state = rng.choice(["on", "on", "off"])
        wait = rng.choice(["mutex", "sleep", "io", "bogus"]) if state == "off" else ""
        lock = rng.choice(["", "0x10 <m>"]) if wait == "mutex" else ""
        p.add(StackKey(frames, tid, rng.choice(["t", "u", ""]), 1, state, wait, lock),
              rng.randint(0, 50))
    return p


@pytest.mark.parametrize("seed", range(6))
def test_tree_does_not_depend_on_the_order_of_stacks(seed: int) -> None:
    p = _profile(seed)
    items = list(p.stacks.items())
    ordered = Profile(stacks=dict(sorted(items)), meta=p.meta)
    random.Random(seed).shuffle(items)
    shuffled = Profile(stacks=dict(items), meta=p.meta)
    reverse = Profile(stacks=dict(reversed(sorted(items))), meta=p.meta)
    expected = build_tree(ordered).to_json()
    assert build_tree(shuffled).to_json() == expected
    assert build_tree(reverse).to_json() == expected
    assert build_tree(shuffled, 30).to_json() == build_tree(ordered, 30).to_json()


def test_template_cache_is_private_and_changes_nothing(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    p = _profile(1)
    monkeypatch.setenv("WALLFLAME_NO_CACHE", "1")
    assert html.bytecode_cache() is None
    html.environment.cache_clear()
    uncached = html.render_html(p)
    monkeypatch.delenv("WALLFLAME_NO_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    try:
        for _ in range(2):  # compiled and stored, then loaded
            html.environment.cache_clear()
            assert html.render_html(p) == uncached
        folder = tmp_path / "cache" / "wallflame" / "templates"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert list(folder.glob("*.jinja")), "compiled templates are kept"
        os.chmod(folder, 0o770)  # another user could plant code: not used
        assert html.bytecode_cache() is None
        monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")
        assert html.bytecode_cache() is None
    finally:
        html.environment.cache_clear()


def test_report_process_writes_everything_and_exits_zero(tmp_path: Path) -> None:
    src = tmp_path / "in.folded"
    src.write_text("".join(f"main;f{i % 7};g{i} {i + 1}\n" for i in range(300)))
    out = tmp_path / "r.html"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "wallflame", "report", str(src), "-o", str(out)],
                       capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stderr and "300 stacks, 1 threads" in r.stderr
    page = out.read_text(encoding="utf-8")
    assert page.rstrip().endswith("</html>") and "g299" in page
    r = subprocess.run([sys.executable, "-m", "wallflame", "report", str(src), "--format",
                        "txt", "-o", "-"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 0 and "main" in r.stdout
