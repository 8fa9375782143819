"""The colours of the classes, drawn from the one table (``wallflame/waitclasses.py``): the
frame colours the SVG writer uses (the page's script computes the same from the table it finds
in its embedded data) and the legend swatches' CSS.
"""

from __future__ import annotations

from wallflame.waitclasses import BY_NAME, of


def rgb(cls: str, v: float, w: float = 0.5) -> tuple[int, int, int]:
    """The colour of a frame of class ``cls`` (``other``'s when unknown) for hashes ``v`` and
    ``w``, truncated to integers as report.js does."""
    r, g, b = (int(base + spread * (w if seed else v)) for base, spread, seed in of(cls).colour)
    return r, g, b


def swatch(cls: str) -> str:
    """The legend colour of ``cls`` as ``#rrggbb``."""
    return "#{:02x}{:02x}{:02x}".format(*rgb(cls, 0.5, 0.5))


def swatch_css() -> str:
    """The legend swatches' rules (``.c-CLASS``), one per class of the table."""
    return "".join(f".c-{name} {{ fill: {swatch(name)}; }}\n" for name in BY_NAME)
