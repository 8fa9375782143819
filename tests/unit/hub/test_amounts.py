"""The one way amounts are written (``wallflame/amounts.py``); the page's script is held to
``readable`` by tests/browser/test_report_browser.py."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wallflame.amounts import SECONDS, column, percent, readable
from wallflame.profile import UNIT_NS, UNIT_SAMPLES


@pytest.mark.parametrize(("ns", "text"), [
    (0, "0.000 s"), (1, "0.0 µs"), (750_000, "750.0 µs"), (999_999, "1000.0 µs"),
    (1_000_000, "1.00 ms"), (1_500_000, "1.50 ms"), (10**9, "1.000 s"),
    (2_500_000_000, "2.500 s"), (99_999_000_000, "99.999 s"), (100 * 10**9, "100.0 s"),
])
def test_readable_picks_the_unit_by_size(ns: int, text: str) -> None:
    assert readable(ns, UNIT_NS) == text
    assert readable(ns / 1e9, SECONDS) == text


def test_counts_are_counts() -> None:
    assert readable(4200, UNIT_SAMPLES) == "4,200 samples"
    assert column(4200, UNIT_SAMPLES, "s") == "4200"
    assert column(41.6, "samples") == "42"


@given(st.integers(0, 10**15))
def test_column_keeps_its_width(ns: int) -> None:
    text = column(ns, UNIT_NS, "s")
    assert text.endswith("s") and len(text) <= 10
    assert abs(float(text[:-1]) - ns / 1e9) <= (0.5 if ns >= 1000 * 10**9 else 0.0005)


def test_percent() -> None:
    assert percent(1, 8) == "12.5%" and percent(3, 0) == "-"
