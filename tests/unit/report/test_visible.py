"""One rule for what a reader sees of a name the target chose, on every page and summary."""

from __future__ import annotations

import io
import json

from hypothesis import given
from hypothesis import strategies as st

from wallflame.profile import OFF, Profile, StackKey
from wallflame.report import tree
from wallflame.report.diff import text as diff_text
from wallflame.report.diff.compare import compare
from wallflame.report.diff.page import render
from wallflame.report.diff.text import to_json, write_text
from wallflame.report.gate.check import judge_profiles
from wallflame.report.gate.output import markdown
from wallflame.report.visible import visible

MS = 1_000_000
NBSP = "\u00a0"
#: A function whose name holds a no-break space: it looks like "grow work" but is not.
NAME = f"grow{NBSP}work"
SHOWN = "grow⟨U+00A0⟩work"


def run(extra_ms: int = 0) -> Profile:
    p = Profile()
    p.meta.window_ns = 5 * 10**9
    p.meta.rates = {"perf_hz": 999.0}
    p.meta.samples = {"perf": 5000, "snapshots": 100}
    for tid in (1, 2, 3):
        name = f"mix-{tid}"
        p.add(StackKey(("worker_loop", "spin_work"), tid, name), 1500 * MS)
        p.add(StackKey(("worker_loop", "pthread_mutex_lock"), tid, name, 0, OFF, "mutex",
                       "0x55d0 <shared_lock>"), 500 * MS)
        if extra_ms:
            p.add(StackKey(("worker_loop", NAME), tid, name), extra_ms * MS)
    return p


def test_one_visible_for_every_output() -> None:
    assert tree.visible is visible and diff_text.visible is visible
    assert visible(NAME) == SHOWN
    assert visible("a\u202eb\u200bc\x1b") == "a⟨U+202E⟩b⟨U+200B⟩c⟨U+001B⟩"
    assert visible("x" * 10, 4) == "xxxx…(+6 chars)"


@given(st.text())
def test_visible_leaves_nothing_hidden(raw: str) -> None:
    shown = visible(raw, 10**6)
    assert NBSP not in shown and "\u202e" not in shown and "\x00" not in shown


def test_diff_page_text_and_json_show_the_no_break_space() -> None:
    diff = compare(run(), run(extra_ms=800))
    page = render(diff)
    assert SHOWN in page or json.dumps(SHOWN)[1:-1] in page
    assert NBSP not in page and "\\u00a0" not in page.lower()
    out = io.StringIO()
    write_text(diff, out)
    assert SHOWN in out.getvalue() and NBSP not in out.getvalue()
    assert NAME in json.dumps(to_json(diff), ensure_ascii=False)  # machines get the name as is


def test_check_markdown_shows_the_no_break_space() -> None:
    verdict = judge_profiles(run(), run(extra_ms=800))
    text = markdown(verdict, "diff.html")
    assert "grow" in text, text
    assert NBSP not in text and "U+00A0" in text
