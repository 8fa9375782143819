"""A ``flamegraph.pl``-style SVG: width 1200, 16 px frames, 12 px Verdana, root ``all`` at the
bottom, frames sorted by name, ``<title>`` tooltips ``name (N samples, P%)`` (or time), the hot
palette seeded by the function name for on-CPU frames and cool colours for off-CPU ones.

Unlike flamegraph.pl it embeds no script (the HTML report is the interactive view), and every
name passes through ``visible`` before XML escaping, so the file stays well-formed XML when a
name holds ESC, NUL, bidi overrides or invalid UTF-8.
"""

from __future__ import annotations

import zlib
from typing import IO
from xml.sax.saxutils import escape

from wallflame.amounts import readable
from wallflame.profile import Profile
from wallflame.report.palette import rgb
from wallflame.report.tree import CLASSES, FlameTree, build_tree, visible

WIDTH = 1200
FRAME_H = 16
FONT_SIZE = 12
FONT_WIDTH = 0.59
MIN_WIDTH = 0.1
PAD_X = 10
PAD_TOP = FONT_SIZE * 3
PAD_BOTTOM = FONT_SIZE * 2 + 10


def _attr(text: str) -> str:
    return escape(text, {'"': "&quot;", "'": "&#39;"})


def _seed(name: str) -> tuple[float, float, float]:
    h = zlib.crc32(name.encode("utf-8", "replace"))
    return ((h & 0xFF) / 255, ((h >> 8) & 0xFF) / 255, ((h >> 16) & 0xFF) / 255)


def color(name: str, cls: str) -> str:
    """The colour of a frame: hot for on-CPU (as flamegraph.pl), a fixed family per wait
    class (``waitclasses.WAIT_TABLE``, as the HTML page draws it)."""
    v1, v2, _ = _seed(name)
    return "rgb({},{},{})".format(*rgb(cls, v1, v2))


def _label(name: str, width: float) -> str:
    fit = int((width - 6) / (FONT_SIZE * FONT_WIDTH))
    if fit < 3:
        return ""
    return name if len(name) <= fit else name[: fit - 2] + ".."


def _layout(tree: FlameTree, totals: list[int]) -> list[tuple[int, float, float, int]]:
    """``(node, x, width, depth)`` of every frame at least ``MIN_WIDTH`` wide, iteratively."""
    kids: list[list[int]] = [[] for _ in range(len(tree))]
    for i in range(1, len(tree)):
        kids[tree.parent[i]].append(i)
    names = tree.names
    scale = (WIDTH - 2 * PAD_X) / totals[0] if totals[0] else 0.0
    out = []
    stack = [(0, float(PAD_X), 0)]
    while stack:
        node, x, depth = stack.pop()
        out.append((node, x, totals[node] * scale, depth))
        for c in sorted(kids[node], key=lambda c: names[tree.name[c]]):
            w = totals[c] * scale
            if w >= MIN_WIDTH:
                stack.append((c, x, depth + 1))
            x += w
    return out


def write_svg(profile: Profile, out: IO[str], title: str = "Flame Graph") -> None:
    tree = build_tree(profile)
    by_class = tree.totals()
    totals = [sum(t) for t in by_class]
    frames = _layout(tree, totals)
    depth = max((d for _, _, _, d in frames), default=0) + 1
    height = depth * FRAME_H + PAD_TOP + PAD_BOTTOM
    unit, total = profile.meta.unit, totals[0]
    out.write('<?xml version="1.0" standalone="no"?>\n'
              '<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" '
              '"http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n'
              f'<svg version="1.1" width="{WIDTH}" height="{height}" '
              f'viewBox="0 0 {WIDTH} {height}" xmlns="http://www.w3.org/2000/svg" '
              'xmlns:xlink="http://www.w3.org/1999/xlink">\n'
              '<!-- Flame graph stack visualization (wallflame). Width is thread time; '
              'on-CPU frames are warm, off-CPU frames cool, mutex/rwlock waits magenta. -->\n'
              f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#f8f8f0"/>\n'
              f'<text x="{WIDTH // 2}" y="24" text-anchor="middle" font-size="17" '
              f'font-family="Verdana">{escape(visible(title, 200))}</text>\n'
              '<g id="frames">\n')
    for node, x, w, d in frames:
        name = "all" if node == 0 else tree.names[tree.name[node]]
        cls_totals = by_class[node]
        cls = CLASSES[max(range(len(CLASSES)), key=cls_totals.__getitem__)]
        share = 100 * totals[node] / total if total else 0.0
        y = height - PAD_BOTTOM - (d + 1) * FRAME_H
        tip = f"{name} ({readable(totals[node], unit)}, {share:.2f}%)"
        out.write(f'<g>\n<title>{_attr(tip)}</title>'
                  f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{FRAME_H - 1}" '
                  f'fill="{color(name, cls)}" rx="2" ry="2"/>\n'
                  f'<text x="{x + 3:.2f}" y="{y + FRAME_H - 5}" font-size="{FONT_SIZE}" '
                  f'font-family="Verdana">{_attr(_label(name, w))}</text>\n</g>\n')
    out.write("</g>\n</svg>\n")


def write(profile: Profile, out: IO[str], title: str | None) -> None:
    """The ``svg`` format's writer (``report/writers.py``)."""
    write_svg(profile, out, title or "Flame Graph")
