"""Off-CPU time by the rule that classified it (``lock: ProcSleep``, ``rwlock: srw_lock``), and
the time the collect's own tracer kept threads stopped, which no rule counts.

A stack's sub-label is the label of the rule that gave it its wait class (``wallflame.classify``,
``rules.tsv``); stacks whose rule has no label count under their class alone."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from wallflame.classify import wait_label
from wallflame.profile import OFF, UNIT_NS, Group, Profile
from wallflame.stops import measured_ns, stopped_ns, stopped_runnable_ns

#: How many labels the summary lists.
TOP_LABELS = 20


def rule_weights(profile: Profile, groups: Iterable[Group] | None = None
                 ) -> dict[tuple[str, str], int]:
    """Off-CPU weight per (wait class, label of the rule that classified it), labelled rules
    only.  ``groups`` (``profile.grouped()``'s, when at hand) spare the pass over the stacks
    of a profile without off-CPU time."""
    acc: dict[tuple[str, str], int] = {}
    if groups is not None and not any(g.state == OFF for g in groups):
        return acc
    for k, w in profile.stacks.items():
        if k.state != OFF or w <= 0:
            continue
        label = wait_label(k.frames, k.wait)
        if label:
            acc[(k.wait, label)] = acc.get((k.wait, label), 0) + w
    return acc


def label_totals(profile: Profile, groups: Iterable[Group] | None = None
                 ) -> list[dict[str, Any]]:
    """``[{"class", "label", "s"}]``, the largest first: off-CPU time per labelled rule
    (seconds, or samples for profiles of unknown unit; ``groups`` as ``rule_weights``)."""
    acc = rule_weights(profile, groups)
    ns = profile.meta.unit == UNIT_NS
    rows = sorted(acc.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_LABELS]
    return [{"class": c, "label": label, "s": round(w / 1e9, 6) if ns else float(w)}
            for (c, label), w in rows]


def tracer_stops(profile: Profile, pause: dict[str, Any]) -> dict[str, Any]:
    """The time the collect's own tracer kept the target's threads stopped (out of every wait
    class), beside what the snapshot loop measured of its pauses."""
    raw = profile.meta.extra.get("tracer_stops") or {}
    per = stopped_ns(profile)
    timed = measured_ns(profile)
    after = stopped_runnable_ns(profile)
    names = profile.meta.threads

    def row(t: int, ns: int) -> dict[str, Any]:
        out: dict[str, Any] = {"tid": t, "name": names.get(t, ""), "s": round(ns / 1e9, 6)}
        if t in after:  # of which released, waiting for a CPU
            out["runnable_s"] = round(after[t] / 1e9, 6)
        if t in timed:  # the tracer's own timing of its stops of this thread
            lo, hi, n = timed[t]
            out.update(timed_s=[round(lo / 1e9, 6), round(hi / 1e9, 6)], stops=n)
        return out

    out: dict[str, Any] = {
        "cause": str(raw.get("cause", "")) if per or timed else "",
        "total_s": round(sum(per.values()) / 1e9, 6),
        "threads": [row(t, per.get(t, 0)) for t in sorted(
            set(per) | set(timed), key=lambda t: (-per.get(t, 0), t))],
        "measured_pause_s": round(float(pause.get("total_ms") or 0) / 1e3, 6),
    }
    if after:
        out["runnable_s"] = round(sum(after.values()) / 1e9, 6)
    if timed:
        out["timed_s"] = [round(sum(v[0] for v in timed.values()) / 1e9, 6),
                          round(sum(v[1] for v in timed.values()) / 1e9, 6)]
        out["timed_stops"] = sum(v[2] for v in timed.values())
    return out
