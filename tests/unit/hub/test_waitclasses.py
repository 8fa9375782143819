"""Every output that names or colours a wait class takes it from the one table
(``wallflame/waitclasses.py``): read back from what each writes, not from its source."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from click.testing import CliRunner

from wallflame.cli import cli
from wallflame.profile import BLOCKED_CLASSES, OFF, ON, Profile, StackKey
from wallflame.report import html, svg, text
from wallflame.report.gate.thresholds import Thresholds
from wallflame.report.palette import rgb, swatch
from wallflame.report.tree import CLASSES
from wallflame.waitclasses import (
    BY_NAME,
    FALLBACK,
    LOCK_CLASSES,
    ON_CPU,
    WAIT_CLASSES,
    WAIT_TABLE,
    of,
    page_table,
)

TEMPLATES = Path(html.__file__).resolve().parent.parent / "templates"
MS = 1_000_000


#: Weights per class (ns) across the forms an amount takes: seconds, ms, µs and their edges.
SPREAD = (150 * 10**9, 5 * 10**9 // 2, 1_500_000, 750_000, 999_999, 100 * 10**9, 10**9, 1, 7)


def every_class_profile(weights: tuple[int, ...] | None = None) -> Profile:
    """One thread with one stack per class, leaf ``f_CLASS``; by default 100-108 ms, all
    different and wide enough to be drawn."""
    w = weights or tuple((100 + i) * MS for i in range(len(CLASSES)))
    p = Profile()
    p.meta.window_ns = 10_000 * MS
    p.add(StackKey(("main", "f_on"), 1, "T", 1, ON), w[0])
    for i, c in enumerate(WAIT_CLASSES, 1):  # a class more than weights: they start again
        p.add(StackKey(("main", f"f_{c}"), 1, "T", 1, OFF, c), w[i % len(w)] + i)
    return p


def test_the_table_is_whole() -> None:
    assert tuple(c.name for c in WAIT_TABLE) == WAIT_CLASSES
    assert len(set(WAIT_CLASSES)) == len(WAIT_CLASSES) and ON_CPU.name not in WAIT_CLASSES
    assert FALLBACK in WAIT_CLASSES and of("no-such-class") is BY_NAME[FALLBACK]
    assert set(LOCK_CLASSES) == {"mutex", "rwlock"} <= set(WAIT_CLASSES)
    assert (ON_CPU.name, *WAIT_CLASSES) == CLASSES
    for c in BY_NAME.values():
        assert 0 < len(c.short) <= 8 and c.label
        for base, spread, seed in c.colour:
            assert base >= 0 and 0 <= base + spread <= 255 and seed in (0, 1)


def _page() -> str:
    return html.render_html(every_class_profile())


def test_page_data_carries_the_table() -> None:
    found = re.search(r'<script type="application/json" id="wf-data">(.*?)</script>', _page(),
                      re.S)
    assert found is not None
    data = json.loads(found.group(1))
    assert data["classes"] == page_table() and data["class_fallback"] == FALLBACK
    assert data["flame"]["classes"] == list(CLASSES)


def test_page_legend_heads_and_swatches_are_the_table() -> None:
    doc = _page()
    legend = doc[doc.index('<nav class="legend"'):doc.index("</nav>")]
    shown = re.findall(r'class="c-(\w+)"/></svg>([^<]*)</span>', legend)
    assert shown[: len(CLASSES)] == [(c, BY_NAME[c].label) for c in CLASSES]
    # on-CPU, runnable, blocked, then the blocked time by class
    head = doc[doc.index("<th>on-CPU</th>"):doc.index("<th>coverage</th>")]
    assert re.findall(r"<th>([^<]*)</th>", head) == ["on-CPU", "runnable", "blocked", *(
        BY_NAME[c].label for c in BLOCKED_CLASSES)]
    styles = "".join(re.findall(r"<style>(.*?)</style>", doc, re.S))
    fills = dict(re.findall(r"\.c-(\w+) \{ fill: (#[0-9a-f]{6}); \}", styles))
    assert {c: fills.get(c) for c in CLASSES} == {c: swatch(c) for c in CLASSES}


def test_page_scripts_and_styles_keep_no_copy() -> None:
    """No class name appears in the page's own scripts or styles: they read the table from the
    page's data, so a new class needs no edit there."""
    copies = {"report.js": r"[\"']{}[\"']|\b{}\s*:", "flamegraph.js": r"[\"']{}[\"']|\b{}\s*:",
              "diff.js": r"[\"']{}[\"']|\b{}\s*:", "report.css": r"\.c-{}\b",
              "diff.css": r"\.c-{}\b", "report.html": r"\bc-{}\b"}
    for name, pattern in copies.items():
        src = (TEMPLATES / name).read_text()
        for c in WAIT_CLASSES:
            assert not re.search(pattern.replace("{}", c), src), (name, c)


def test_svg_frames_are_coloured_by_the_table() -> None:
    out = io.StringIO()
    svg.write_svg(every_class_profile(), out)
    fills = dict(re.findall(r'<title>(f_\w+) \([^<]*</title><rect [^>]*fill="(rgb\([^"]*\))"',
                            out.getvalue()))
    assert set(fills) == {f"f_{c}" for c in CLASSES}
    for c in CLASSES:
        v1, v2, _ = svg._seed(f"f_{c}")
        assert fills[f"f_{c}"] == "rgb({},{},{})".format(*rgb(c, v1, v2)), c


def test_text_columns_are_the_table() -> None:
    out = io.StringIO()
    text.write_text(every_class_profile(), out)
    head = next(ln for ln in out.getvalue().splitlines() if ln.startswith("thread "))
    assert head.split()[4:-1] == [c.short for c in WAIT_TABLE]


def test_check_help_lists_the_table() -> None:
    res = CliRunner().invoke(cli, ["check", "--help"])
    assert res.exit_code == 0
    judged = ",".join(Thresholds().wait_classes)
    assert f"wait_classes={judged}  (of {','.join(WAIT_CLASSES)})" in res.output


def test_unknown_class_is_drawn_and_counted_as_the_fallback() -> None:
    assert rgb("waiting", 0.3) == rgb(FALLBACK, 0.3)
    p = Profile()
    p.add(StackKey(("main", "f"), 1, "T", 1, OFF, "waiting"), 5 * MS)
    out = io.StringIO()
    text.write_text(p, out)
    head = next(ln for ln in out.getvalue().splitlines() if ln.startswith("thread "))
    # the fallback's column, and runnable's, which the table always shows
    assert head.split()[4:-1] == [BY_NAME[FALLBACK].short, BY_NAME["runnable"].short]
