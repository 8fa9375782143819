"""The differential report page: one self-contained HTML file, safe with hostile names.

The page embeds the union of both sides' stacks once (each with both sides' on- and off-CPU
weight), builds one tree from it and draws it with the shared canvas flamegraph
(``templates/flamegraph.js``): shaped like AFTER to show what grew, shaped like BEFORE to show
what vanished, self or total deltas, rate or share normalisation, neutral colour within the
noise floor.  Tables that carry the key numbers are static markup, so the page still informs
with JavaScript blocked.

Safety (docs/reliability.md): Jinja2 autoescape on, data only through ``|tojson`` inside a JSON
script tag, names through ``textContent``, a CSP that allows only the page's own script and
style by hash, no URL of any kind, and the file written 0600.
"""

from __future__ import annotations

import math
from itertools import chain
from typing import Any

from wallflame.output import open_output
from wallflame.profile import OFF, ON
from wallflame.report.diff.compare import Diff
from wallflame.report.diff.headline import headline
from wallflame.report.diff.text import (
    VIEW_TITLES,
    fmt_delta,
    fmt_relative,
    fmt_value,
    noise_text,
    norm_text,
    visible,
)
from wallflame.report.gate.check import Verdict
from wallflame.report.html import environment
from wallflame.report.page_assets import csp_hash as csp_hash  # the pages' one rule
from wallflame.report.page_assets import page_assets

#: Beyond this many frames in all, the lightest stacks are left out of the page (stated on it).
MAX_FRAMES = 3_000_000
TOP = 25


SCRIPTS = ("flamegraph.js", "diff.js")
STYLES = ("report.css", "diff.css")


def assets() -> dict[str, Any]:
    """The report's flamegraph renderer and style plus the diff's own, allowed by hash."""
    return page_assets(SCRIPTS, STYLES)


def stacks_payload(diff: Diff, max_frames: int = MAX_FRAMES) -> dict[str, Any]:
    """The union stacks as flat arrays, from which the page builds its tree: ``len[i]``
    frame ids of stack ``i`` in ``frames`` (ids index ``names``; 0 is the root), its four
    weights (before on/off, after on/off) in ``v``.  Past ``max_frames`` frames in all, the
    lightest stacks are left out (counted in ``elided``)."""
    paths, vals = list(diff.stacks.keys()), list(diff.stacks.values())
    lens = list(map(len, paths))
    elided = 0
    if sum(lens) > max_frames:
        order = sorted(range(len(paths)),
                       key=lambda i: (-max(vals[i][0] + vals[i][1], vals[i][2] + vals[i][3]), i))
        used, keep = 0, []
        for i in order:
            used += lens[i]
            if used > max_frames:
                break
            keep.append(i)
        keep.sort()
        elided = len(paths) - len(keep)
        paths, vals, lens = [paths[i] for i in keep], [vals[i] for i in keep], \
            [lens[i] for i in keep]
    return {"names": [visible(n) for n in diff.names],
            "frames": list(chain.from_iterable(paths)), "len": lens,
            "v": list(chain.from_iterable(vals)), "elided": elided}


def page_data(diff: Diff) -> dict[str, Any]:
    return {
        "stacks": stacks_payload(diff),
        "sides": [diff.before.to_json(), diff.after.to_json()],
        "mode": diff.norm.mode,
        "k": diff.k,
    }


def _rows(diff: Diff, changes: list[Any]) -> list[dict[str, str]]:
    return [{"name": visible(c.name, 300), "before": fmt_value(diff, c.a),
             "after": fmt_value(diff, c.b), "delta": fmt_delta(diff, c.delta),
             "rel": fmt_relative(c), "sign": _sign(c.delta) if c.significant else "noise",
             "se": fmt_value(diff, diff.k * c.se) if math.isfinite(c.se) else "unknown"}
            for c in changes]


def _sign(x: float) -> str:
    return "grew" if x > 0 else "shrank"


def context(diff: Diff, verdict: Verdict | None) -> dict[str, Any]:
    tops = {view: _rows(diff, diff.functions(view, limit=TOP)) for view in ("all", ON, OFF)}
    nr = diff.new_and_removed(limit=TOP)
    stacks = {kind: [{"stack": " ; ".join(visible(f, 200) for f in s["stack"]),
                      "value": fmt_value(diff, s.get("after", s.get("before", 0.0)))}
                     for s in nr[kind]] for kind in ("new", "removed")}
    return {
        "labels": [visible(diff.before.label, 300), visible(diff.after.label, 300)],
        "sides": [diff.before, diff.after],
        "norm": norm_text(diff), "noise": noise_text(diff), "k": diff.k,
        "views": VIEW_TITLES, "tops": tops,
        "classes": _rows(diff, [c for c in diff.class_changes() if c.raw_a or c.raw_b]),
        "threads": _rows(diff, diff.thread_changes()[:TOP]),
        "locks": _rows(diff, diff.lock_changes()[:TOP]),
        "stacks": stacks, "counts": nr,
        "counts_text": {"new": fmt_value(diff, nr["new_total"]),
                        "removed": fmt_value(diff, nr["removed_total"])},
        "verdict": verdict,
        "headline": [visible(line, 300) for line in headline(diff)],
    }


def render(diff: Diff, verdict: Verdict | None = None) -> str:
    """The page: ``templates/diff.html`` on the report's ``base.html`` and environment."""
    page = environment().get_template("diff.html").render(
        title=f"wallflame diff: {diff.before.label} vs {diff.after.label}",
        data=page_data(diff), **assets(), **context(diff, verdict))
    # names are text, but the file must not even look like it links anywhere: the page's own
    # markup, scripts and styles have no "://", the JSON encoder breaks it up, so any left is
    # in escaped text, where an entity is exact
    return page.replace("://", ":&#47;&#47;")


def write_html(diff: Diff, path: str, verdict: Verdict | None = None) -> None:
    text = render(diff, verdict)
    with open_output(path, 0o600) as out:
        out.write(text)
