"""The diff's text form (terminals, CI logs) and JSON form (machines).

Both state the normalisation and the noise floor, give absolute and relative numbers, and list
stacks that appeared or vanished; the HTML page (``report/diff/page.py``) draws the same data.
"""

from __future__ import annotations

import math
from typing import IO, Any

from wallflame.profile import OFF, ON, UNIT_NS
from wallflame.report.diff.compare import RATE, Change, Diff, Side
from wallflame.report.diff.headline import headline
from wallflame.report.visible import visible as visible  # re-exported: the one rule

VIEW_TITLES = {"all": "merged (wall clock)", ON: "on-CPU", OFF: "off-CPU"}


def fmt_value(diff: Diff, v: float) -> str:
    if diff.norm.mode == RATE:
        return f"{v:.4f}" if diff.before.unit == UNIT_NS else f"{v:.1f}"
    return f"{100 * v:.2f}%"


def fmt_delta(diff: Diff, v: float) -> str:
    if diff.norm.mode == RATE:
        return f"{v:+.4f}" if diff.before.unit == UNIT_NS else f"{v:+.1f}"
    return f"{100 * v:+.2f}pp"


def fmt_relative(c: Change) -> str:
    r = c.relative
    if r is None:
        return "new" if c.b else "-"
    if c.b == 0:
        return "gone"
    return f"{100 * r:+.0f}%"


def describe_side(side: Side) -> str:
    window = f"window {side.window_s:.3f}s" if side.window_s else "window unknown"
    on = f"{side.n_on} on-CPU samples" if side.n_on else "on-CPU samples unknown"
    off = f", {side.n_off} off-CPU samples" if side.n_off else ""
    return f"{side.label}: {window}, {on}{off}, unit {side.unit}"


def noise_text(diff: Diff) -> str:
    model = ("a share p measured from n samples has SE = sqrt(p(1-p)/n)"
             if diff.norm.mode != RATE else
             "a rate made of m of a side's n samples has SE = rate/sqrt(m)")
    return (f"noise floor: a change counts only beyond {diff.k:g} standard errors of sampling "
            f"({model}; the two sides' errors combined); smaller changes are marked '~' "
            "and drawn neutral")


def norm_text(diff: Diff) -> str:
    if diff.norm.mode == RATE:
        return ("normalisation: rate - thread time per second of each side's window "
                f"({diff.norm.unit()})")
    return "normalisation: share - each side as a share of its own total"


def change_row(diff: Diff, c: Change, width: int = 70) -> str:
    mark = " " if c.significant else "~"
    name = visible(c.name, width)
    return (f"{mark} {fmt_delta(diff, c.delta):>11} {fmt_value(diff, c.a):>10} "
            f"{fmt_value(diff, c.b):>10} {fmt_relative(c):>7}  {name}")


def write_text(diff: Diff, out: IO[str], top: int = 15) -> None:
    lines = headline(diff)
    out.write("what changed:\n" if lines else "what changed: nothing beyond the noise floor\n")
    for i, line in enumerate(lines, 1):
        out.write(f"{i}. {visible(line, 300)}\n")
    out.write("\n")
    out.write(describe_side(diff.before) + "\n" + describe_side(diff.after) + "\n")
    out.write(norm_text(diff) + "\n" + noise_text(diff) + "\n")
    header = f"  {'delta':>11} {'before':>10} {'after':>10} {'rel':>7}  "
    for view in (ON, OFF):
        rows = [c for c in diff.functions(view) if c.significant][:top]
        out.write(f"\n{VIEW_TITLES[view]}, functions (inclusive), significant changes: "
                  f"{len(rows)} shown\n{header}function\n")
        for c in rows:
            out.write(change_row(diff, c) + "\n")
    out.write(f"\nwait classes\n{header}class\n")
    for c in diff.class_changes():
        if c.raw_a or c.raw_b:
            out.write(change_row(diff, c) + "\n")
    locks = diff.lock_changes()[:top]
    if locks:
        out.write(f"\nlocks (wait time)\n{header}lock\n")
        for c in locks:
            out.write(change_row(diff, c) + "\n")
    out.write(f"\nthreads (wall time)\n{header}thread\n")
    for c in diff.thread_changes()[:top]:
        out.write(change_row(diff, c) + "\n")
    nr = diff.new_and_removed(limit=5)
    out.write(f"\nnew stacks: {nr['new_count']} ({fmt_value(diff, nr['new_total'])}); "
              f"removed stacks: {nr['removed_count']} ({fmt_value(diff, nr['removed_total'])})\n")


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def to_json(diff: Diff, top: int = 50) -> dict[str, Any]:
    """The machine form: deterministic, every number with its unit and noise floor."""
    views: dict[str, Any] = {}
    for view in ("all", ON, OFF):
        views[view] = {
            "inclusive": [c.to_json() for c in diff.functions(view, True, limit=top)],
            "self": [c.to_json() for c in diff.functions(view, False, limit=top)],
        }
    return {
        "format": "wallflame-diff 1",
        "headline": headline(diff),
        "normalisation": {"mode": diff.norm.mode, "unit": diff.norm.unit(),
                          "text": norm_text(diff)},
        "noise": {"k": diff.k, "text": noise_text(diff)},
        "before": {**diff.before.to_json(), "meta": diff.meta[0]},
        "after": {**diff.after.to_json(), "meta": diff.meta[1]},
        "views": views,
        "classes": [c.to_json() for c in diff.class_changes()],
        "threads": [c.to_json() for c in diff.thread_changes()],
        "locks": [c.to_json() for c in diff.lock_changes()],
        "stacks": diff.new_and_removed(limit=top),
    }
