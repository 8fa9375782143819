"""The differential report page: one self-contained HTML file, safe with hostile names.

The page embeds the union tree once (both sides' inclusive on- and off-CPU weight per node) and
draws it with the shared canvas flamegraph (``templates/flamegraph.js``): shaped like AFTER to
show what grew, shaped like BEFORE to show what vanished, self or inclusive deltas, rate or
share normalisation, neutral colour within the noise floor.  Tables that carry the key numbers
are static markup, so the page still informs with JavaScript blocked.

Safety (RELIABILITY.md): Jinja2 autoescape on, data only through ``|tojson`` inside a JSON
script tag, names through ``textContent``, a CSP that allows only the page's own script and
style by hash, no URL of any kind, and the file written 0600.
"""

from __future__ import annotations

import base64
import hashlib
import math
from functools import cache
from importlib import resources
from typing import Any

from markupsafe import Markup

from wallflame.output import open_output
from wallflame.profile import OFF, ON
from wallflame.report.check import Verdict
from wallflame.report.diff import Diff
from wallflame.report.diff_render import (
    VIEW_TITLES,
    fmt_delta,
    fmt_relative,
    fmt_value,
    noise_text,
    norm_text,
    visible,
)
from wallflame.report.html import environment

#: Beyond this many nodes the narrowest are left out of the embedded tree (stated on the page).
MAX_NODES = 120_000
TOP = 25


SCRIPTS = ("flamegraph.js", "diff.js")
STYLES = ("report.css", "diff.css")


def asset(name: str) -> str:
    return resources.files("wallflame.templates").joinpath(name).read_text(encoding="utf-8")


def csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@cache
def assets() -> dict[str, Any]:
    """The report's flamegraph renderer and style plus the diff's own, allowed by hash."""
    scripts = [asset(n) for n in SCRIPTS]
    styles = [asset(n) for n in STYLES]
    for text in scripts:
        assert "</script" not in text.lower(), "an inline script must not close its own tag"
    csp = ("default-src 'none'; script-src " + " ".join(map(csp_hash, scripts))
           + "; style-src " + " ".join(map(csp_hash, styles))
           + "; img-src 'none'; base-uri 'none'; form-action 'none'")
    return {"scripts": [Markup(t) for t in scripts], "styles": [Markup(t) for t in styles],
            "csp": Markup(csp)}


def tree_payload(diff: Diff, max_nodes: int = MAX_NODES) -> dict[str, Any]:
    """The union tree as parallel arrays, the widest ``max_nodes`` nodes kept (parents first)."""
    t = diff.tree
    n = len(t.parent)
    keep = list(range(n))
    elided = 0
    if n > max_nodes:
        tot = t.vals[0]
        ta, tb = (tot[0] + tot[1]) or 1, (tot[2] + tot[3]) or 1
        width = [max((v[0] + v[1]) / ta, (v[2] + v[3]) / tb) for v in t.vals]
        cut = sorted(width, reverse=True)[max_nodes - 1]
        alive = [False] * n
        alive[0] = True
        keep = [0]
        for i in range(1, n):  # parents come first, so a kept node's parent is already known
            if alive[t.parent[i]] and width[i] > cut:
                alive[i] = True
                keep.append(i)
        elided = n - len(keep)
    new = {old: j for j, old in enumerate(keep)}
    names: dict[int, int] = {}
    name_list: list[str] = []
    name_of, parent, vals = [], [], []
    for old in keep:
        ni = t.name[old]
        j = names.get(ni)
        if j is None:
            j = names[ni] = len(name_list)
            name_list.append(visible(t.names[ni]))
        name_of.append(j)
        parent.append(new[t.parent[old]] if old else -1)
        vals.extend(t.vals[old])
    return {"names": name_list, "name": name_of, "parent": parent, "v": vals,
            "elided": elided}


def page_data(diff: Diff) -> dict[str, Any]:
    return {
        "tree": tree_payload(diff),
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
    tops = {view: _rows(diff, diff.functions(view)[:TOP]) for view in ("all", ON, OFF)}
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
