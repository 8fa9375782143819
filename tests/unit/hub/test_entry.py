"""The plain report's short way (``wallflame.entry``): the parameters click would give, or
none; no click imported; the same lines and exit codes as the full command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from hypothesis import given
from hypothesis import strategies as st

from wallflame.commands.report import command
from wallflame.entry import plain_report
from wallflame.errors import EXIT_INPUT, EXIT_USAGE

FOLDED = ROOT / "tests" / "fixtures" / "folded" / "plain-tid.folded"

CASES = [
    ["in.folded"],
    ["in.folded", "-o", "out.html"],
    ["-o", "out.svg", "a.folded", "b.folded"],
    ["--output=out.html", "x"],
    ["x", "--format", "svg"],
    ["x", "--format=json", "-o", "-"],
    ["-", "-o", "o.html"],
    ["x", "--title", "a title; <b>"],
    ["x", "--title=--odd", "-o", "first", "-o", "second"],
    ["x", "-o", "--format"],
    ["x", "--state", "on"],
    ["x", "--format", "docx"],
    ["x", "-oout.html"],
    ["x", "-o"],
    ["--help"],
    [],
    ["-o", "out.html"],
    ["x", "--", "-y"],
    ["x", "-o=out.html"],
]


def _click(args: list[str]) -> dict[str, object]:
    ctx = command.make_context("report", list(args))
    return {k: ctx.params[k] for k in ("inputs", "output", "fmt", "title")}


@pytest.mark.parametrize("args", CASES, ids=[" ".join(c) or "(none)" for c in CASES])
def test_the_short_way_reads_what_click_reads(args: list[str]) -> None:
    got = plain_report(args)
    if got is None:
        return  # the full command line reads it
    assert got == _click(args)


def test_other_options_go_to_the_full_command_line() -> None:
    for args in (["x", "--state", "on"], ["--help"], ["x", "--format", "docx"], [],
                 ["x", "-oout.html"], ["x", "--", "-y"]):
        assert plain_report(args) is None, args


@given(st.lists(st.sampled_from(["in", "-", "-o", "--output", "--output=o", "--format",
                                 "svg", "html", "--title", "t", "--title=t", "--unit", "ns",
                                 "-x", "--format=svg"]), max_size=7))
def test_any_mix_of_words_is_read_as_click_reads_it_or_left_to_click(args: list[str]) -> None:
    got = plain_report(args)
    if got is not None:
        assert got == _click(args)


def _wallflame(*args: str, code: str = "") -> subprocess.CompletedProcess[str]:
    prog = code or "import sys; from wallflame.entry import main; main()"
    return subprocess.run([sys.executable, "-c", prog, *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def test_the_plain_report_imports_no_click(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    code = ("import sys, atexit; atexit.register(lambda: sys.stderr.write("
            "'CLICK=%s\\n' % ('click' in sys.modules)));"
            "from wallflame.entry import main; sys.argv = ['wallflame'] + sys.argv[1:];"
            "import wallflame.exits as e; e.quick_exit = lambda *a: False; main()")
    r = _wallflame("report", str(FOLDED), "-o", str(out), code=code)
    assert r.returncode == 0, r.stderr
    assert "CLICK=False" in r.stderr and out.exists()
    r = _wallflame("report", str(FOLDED), "-o", str(tmp_path / "s.html"), "--state", "all",
                   code=code)
    assert r.returncode == 0 and "CLICK=True" in r.stderr, r.stderr


def test_errors_read_the_same_either_way(tmp_path: Path) -> None:
    code = ("import sys; sys.argv = ['wallflame'] + sys.argv[1:];"
            "from wallflame.entry import main; main()")
    short = _wallflame("report", str(tmp_path / "missing.folded"), code=code)
    full = _wallflame("report", str(tmp_path / "missing.folded"), "--state", "all", code=code)
    assert short.returncode == full.returncode == EXIT_INPUT
    assert short.stderr == full.stderr
    assert short.stderr.startswith("wallflame: error: ") and short.stderr.count("\n") == 1
    bad = _wallflame("report", "x", "--format", "docx", code=code)
    assert bad.returncode == EXIT_USAGE and "Invalid value for '--format'" in bad.stderr


def test_a_line_that_cannot_be_encoded_is_written_escaped() -> None:
    """A thread or frame name from the target may hold bytes that are not text (surrogate
    escapes) or characters the stream cannot encode: the warning is still one line."""
    import io

    from wallflame.errors import say

    buf = io.BytesIO()
    stream = io.TextIOWrapper(buf, encoding="ascii")
    say("wallflame: warning: thread w\udcff\u00e9 <b>", stream)
    assert buf.getvalue() == b"wallflame: warning: thread w\\udcff\\xe9 <b>\n"


def test_an_unrecognised_input_names_a_fix_that_works(tmp_path: Path) -> None:
    """``report`` has no input format option (its ``--format`` is the report's): the fix it
    gives for an input it cannot recognise is the ``fold`` command, which then reads it."""
    code = ("import sys; sys.argv = ['wallflame'] + sys.argv[1:];"
            "from wallflame.entry import main; main()")
    odd = ROOT / "tests" / "fixtures" / "folded" / "hostile.folded"
    r = _wallflame("report", str(odd), "-o", str(tmp_path / "r.html"), code=code)
    assert r.returncode == EXIT_INPUT and "wallflame fold --format F" in r.stderr, r.stderr
    out = tmp_path / "x.folded"
    r = _wallflame("fold", "--format", "folded", str(odd), "-o", str(out), code=code)
    assert r.returncode == 0, r.stderr
    r = _wallflame("report", str(out), "-o", str(tmp_path / "r.html"), code=code)
    assert r.returncode == 0, r.stderr


def test_a_newline_in_a_path_does_not_start_a_second_line(tmp_path: Path) -> None:
    code = ("import sys; sys.argv = ['wallflame'] + sys.argv[1:];"
            "from wallflame.entry import main; main()")
    r = _wallflame("report", str(tmp_path / "a\nb\x1b[31m"), code=code)
    assert r.returncode == EXIT_INPUT and r.stderr.count("\n") == 1, r.stderr
    assert "a\\nb\\x1b[31m" in r.stderr
