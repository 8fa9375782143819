"""The colours of the wait classes: one table, which report.js, report.css and the SVG writer
follow (tests/test_report_palette.py checks every copy against it).

Each class gives, per channel (red, green, blue), ``(base, spread, seed)``: the channel is
``base + spread * h`` where ``h`` in [0, 1) is the frame name's hash (seed 0) or a second hash
of it (seed 1, on-CPU green only), so frames of one class vary a little and stay recognisable.
The legend's swatches (``.c-CLASS`` in report.css) are the colour at ``h = 0.5``.
"""

from __future__ import annotations

Channel = tuple[int, int, int]

PALETTE: dict[str, tuple[Channel, Channel, Channel]] = {
    "on": ((205, 50, 0), (0, 230, 1), (0, 55, 0)),              # warm, as flamegraph.pl
    "mutex": ((225, 30, 0), (20, 30, 0), (185, 40, 0)),         # magenta: contention
    "rwlock": ((190, 30, 0), (0, 30, 0), (235, 0, 0)),          # violet: contention
    "lock": ((135, 30, 0), (20, 30, 0), (150, 30, 0)),          # deep purple: database locks
    "condvar": ((70, 40, 0), (150, 40, 0), (205, 30, 0)),       # blue: waiting to be told
    "io": ((60, 40, 0), (105, 40, 0), (225, 25, 0)),            # deep blue
    "poll": ((196, 24, 0), (196, 24, 0), (196, 24, 0)),         # grey: idle
    "sleep": ((135, 40, 0), (195, 30, 0), (235, 0, 0)),         # light blue
    "other": ((120, 30, 0), (130, 30, 0), (185, 30, 0)),        # slate
}


def rgb(cls: str, v: float, w: float = 0.5) -> tuple[int, int, int]:
    """The colour of a frame of class ``cls`` (``other``'s when unknown) for hashes ``v`` and
    ``w``, truncated to integers as report.js does."""
    chans = PALETTE.get(cls) or PALETTE["other"]
    r, g, b = (int(base + spread * (w if seed else v)) for base, spread, seed in chans)
    return r, g, b


def swatch(cls: str) -> str:
    """The legend colour of ``cls`` as ``#rrggbb``."""
    return "#{:02x}{:02x}{:02x}".format(*rgb(cls, 0.5, 0.5))
