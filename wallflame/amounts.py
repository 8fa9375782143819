"""How an amount of thread time (or a count of samples) is written, in every output.

Two forms, each written in one place:

* ``readable``: for a reader (the page, its tooltips, the SVG's): the unit chosen by size,
  ``150.0 s``, ``2.500 s``, ``1.50 ms``, ``750.0 µs``, or ``4,200 samples``.  The page's script
  writes its tooltips by the same rule (``fmt`` in ``templates/report.js``; a browser test
  holds it to this one);
* ``column``: for fixed-width tables in terminals and CI logs (``report --format txt``,
  ``fold --summary``): seconds with three decimals, or the bare count.

A profile's weights are nanoseconds (``UNIT_NS``) or sample counts; ``summary.json`` holds
seconds (its unit ``seconds``).  Both functions take a value with the unit it is in.
"""

from __future__ import annotations

from wallflame.profile import UNIT_NS

#: ``summary.json``'s unit for times (its values are seconds).
SECONDS = "seconds"


def _seconds(value: float, unit: str) -> float | None:
    """``value`` in seconds, or None when it is a count of samples."""
    if unit == UNIT_NS:
        return value / 1e9
    return value if unit == SECONDS else None


def readable(value: float, unit: str) -> str:
    """``value`` (in ``unit``) for a reader: ``1.234 s``, ``12.00 ms``, ``4,200 samples``."""
    s = _seconds(value, unit)
    if s is None:
        return f"{round(value):,} samples"
    if s >= 100:
        return f"{s:.1f} s"
    if s >= 1 or s == 0:
        return f"{s:.3f} s"
    if s >= 0.001:
        return f"{s * 1e3:.2f} ms"
    return f"{s * 1e6:.1f} µs"


def column(value: float, unit: str, suffix: str = "") -> str:
    """``value`` (in ``unit``) for a table column: seconds with three decimals (none from
    1,000 s on, so a column keeps its width) followed by ``suffix``, or the count rounded."""
    s = _seconds(value, unit)
    if s is None:
        return f"{round(value)}"
    return (f"{s:.3f}" if s < 1000 else f"{s:.0f}") + suffix


def percent(part: float, whole: float) -> str:
    """``part`` as a share of ``whole`` (``12.3%``), ``-`` when there is no whole."""
    return f"{100 * part / whole:.1f}%" if whole else "-"
