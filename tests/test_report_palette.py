"""Every copy of the wait classes' colours and names agrees with report/palette.py: report.js,
report.css, the SVG writer, the HTML page's labels and the text report's columns."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wallflame.profile import WAIT_CLASSES
from wallflame.report import html, svg, text
from wallflame.report.palette import PALETTE, rgb, swatch
from wallflame.report.tree import CLASSES

TEMPLATES = Path(html.__file__).resolve().parent.parent / "templates"
_TERM = re.compile(r"^\s*(\d+)(?:\s*\+\s*(\d+)\s*\*\s*([vw]))?\s*$|^\s*(\d+)\s*\*\s*([vw])\s*$")


def _js_palette() -> dict[str, tuple[tuple[int, int, int], ...]]:
    js = (TEMPLATES / "report.js").read_text()
    block = js[js.index("var PALETTE = {"):]
    block = block[: block.index("};")]
    out = {}
    for cls, body in re.findall(r"(\w+): function \([vw, ]+\) \{ return rgb\((.*?)\); \}", block):
        chans = []
        for term in body.split(","):
            m = _TERM.match(term)
            assert m, f"{cls}: cannot read {term!r}"
            if m.group(4):  # "230 * w"
                chans.append((0, int(m.group(4)), int(m.group(5) == "w")))
            else:
                chans.append((int(m.group(1)), int(m.group(2) or 0), int(m.group(3) == "w")))
        out[cls] = tuple(chans)
    return out


def test_every_class_has_a_colour() -> None:
    assert set(PALETTE) == set(CLASSES) == {"on", *WAIT_CLASSES}


def test_report_js_palette_is_the_table() -> None:
    js = _js_palette()
    assert set(js) == set(PALETTE)
    for cls, chans in PALETTE.items():
        # a channel without a spread has no seed to agree on
        want = tuple((b, s, seed if s else 0) for b, s, seed in chans)
        got = tuple((b, s, seed if s else 0) for b, s, seed in js[cls])
        assert got == want, cls


def test_report_js_labels_every_class() -> None:
    js = (TEMPLATES / "report.js").read_text()
    block = js[js.index("var LABELS = {"):]
    block = block[: block.index("};")]
    assert set(re.findall(r"(\w+): \"", block)) == set(CLASSES)


def test_css_swatches_are_the_table_at_its_middle() -> None:
    css = (TEMPLATES / "report.css").read_text()
    fills = dict(re.findall(r"\.c-(\w+) \{ fill: (#[0-9a-f]{6}); \}", css))
    for cls in CLASSES:
        assert fills.get(cls) == swatch(cls), cls


@pytest.mark.parametrize("cls", CLASSES)
def test_svg_draws_the_table(cls: str) -> None:
    name = "SomeFunction"
    v1, v2, _ = svg._seed(name)
    assert svg.color(name, cls) == "rgb({},{},{})".format(*rgb(cls, v1, v2))


def test_unknown_class_is_drawn_as_other() -> None:
    assert rgb("waiting", 0.3) == rgb("other", 0.3)


def test_html_and_text_name_every_class() -> None:
    assert set(html.LABELS) == set(CLASSES)
    assert set(text.SHORT) == set(WAIT_CLASSES)
    assert all(len(v) <= 8 for v in text.SHORT.values())
