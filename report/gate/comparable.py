"""Whether two sides of a check can be compared at all: data complete enough, collected the
same way, on the same machine, under the same load of the rest of the machine.  Each test
makes the check inconclusive, with its reason; none judges the code."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from wallflame.report.gate.results import INCONCLUSIVE, PASS, SKIPPED, Result
from wallflame.report.gate.thresholds import Thresholds
from wallflame.runfiles import IDENTITY_FIELDS

if TYPE_CHECKING:
    from wallflame.report.gate.quantities import Run

#: Losses that say how much data is missing only vaguely (a file cut short, a perf chunk, a
#: target that exited early, unreadable input): never tolerated, however small their count.
INTEGRITY = re.compile(r"truncated last|malformed|unreadable|unrecognised|chunk|bad |exited",
                       re.I)
#: Rates that adapt during collection (the snapshot rate halves when snapshots pause the
#: target too long); snapshots are weighted by the time they stand for.
ADAPTIVE_RATES = ("pmp_hz",)


def _counted(r: Run, t: Thresholds) -> list[tuple[str, int]]:
    return [(k, v["count"]) for k, v in r.meta.get("losses", {}).items()
            if k not in t.allowed_losses and v["count"]]


def lost_too_much(r: Run, t: Thresholds) -> list[str]:
    """Why run ``r`` cannot be compared with any other: each integrity loss, and a share of
    its evidence lost beyond ``max_loss_share``; empty when it can."""
    counted = _counted(r, t)
    bad = [f"{r.label}: {n} {kind}" for kind, n in counted if INTEGRITY.search(kind)]
    share = max(r.lost_on, r.lost_off) if counted else 0.0
    if share > t.max_loss_share:
        bad.append(f"{r.label}: {100 * share:.1f}% of the evidence lost (more than "
                   f"{100 * t.max_loss_share:g}%)")
    return bad


def complete_data(before: list[Run], after: list[Run], t: Thresholds) -> Result:
    """Losses: integrity losses and losses beyond ``max_loss_share`` make runs
    incomparable (``lost_too_much``); smaller ones are named (they widen the intervals)."""
    bad: list[str] = []
    minor: list[str] = []
    for r in (*before, *after):
        counted = _counted(r, t)
        why = lost_too_much(r, t)
        bad += why
        if counted and not why:
            share = max(r.lost_on, r.lost_off)
            minor.append(f"{r.label}: " + ", ".join(f"{n} {k}" for k, n in counted)
                         + f" ({100 * share:.1f}%)")
    if bad:
        return Result("complete_data", INCONCLUSIVE, "cannot be compared: " + "; ".join(bad))
    if minor:
        return Result("complete_data", PASS, "losses widen the intervals: " + "; ".join(minor))
    return Result("complete_data", PASS, "no losses")


def others_share(machine: Any) -> float | None:
    """The share of the machine's CPUs that neither the target nor the collect used over a
    run's window: other processes and the hypervisor's steal (``machine`` of meta.json), or
    None when the run did not record it."""
    if not isinstance(machine, dict):
        return None
    try:
        cpus = float(machine["cpus"])
        taken = float(machine["other_cpus"]) + float(machine.get("steal_cpus", 0.0))
    except (KeyError, TypeError, ValueError):
        return None
    return taken / cpus if cpus > 0 and math.isfinite(taken) else None


def same_load(before: list[Run], after: list[Run], t: Thresholds) -> Result:
    """Whether the sides were collected under the same load of the rest of the machine
    (``max_load_difference``)."""
    shares = [[others_share(r.meta.get("machine")) for r in side] for side in (before, after)]
    if any(x is None for side in shares for x in side):
        return Result("same_load", SKIPPED, "the machine's load was not recorded for every "
                      "run (runs collected by an older wallflame, or folded from files)")
    a, b = (sum(side) / len(side) for side in shares)  # type: ignore[arg-type]
    said = (f"other processes and the hypervisor took {100 * a:.0f}% of the machine's CPUs "
            f"during the baseline, {100 * b:.0f}% during the current")
    if abs(b - a) > t.max_load_difference:
        busier = "current" if b > a else "baseline"
        return Result("same_load", INCONCLUSIVE,
                      f"collected under different load: {said} (more than "
                      f"{100 * t.max_load_difference:g} points apart: max_load_difference); "
                      f"a program's profile moves with its machine's load, so the {busier}'s "
                      "could differ with no change to the code: collect both sides under the "
                      "same load")
    return Result("same_load", PASS, said)


def machine_differences(a: Any, b: Any) -> list[str] | None:
    """How two runs' machines (``machine.identity`` of meta.json) differ, field by field;
    None when either run did not record its machine."""
    ia = a.get("identity") if isinstance(a, dict) else None
    ib = b.get("identity") if isinstance(b, dict) else None
    if not isinstance(ia, dict) or not isinstance(ib, dict):
        return None
    return [f"{k} {ia.get(k)!r} vs {ib.get(k)!r}" for k in IDENTITY_FIELDS
            if ia.get(k) != ib.get(k)]


def same_machine(before: list[Run], after: list[Run], t: Thresholds) -> Result:
    """Whether every run was collected on the same machine (``across_machines``)."""
    ref = before[0]
    diffs: list[str] = []
    for r in (*before[1:], *after):
        d = machine_differences(ref.meta.get("machine"), r.meta.get("machine"))
        if d is None:
            return Result("same_machine", SKIPPED, "the machine was not recorded for every run "
                          "(runs collected by an older wallflame, or folded from files)")
        diffs += [f"{ref.label} vs {r.label}: {x}" for x in d]
    if not diffs:
        return Result("same_machine", PASS, "every run collected on the same machine")
    said = "; ".join(diffs[:3])
    if t.across_machines:
        return Result("same_machine", PASS, f"runs from different machines, judged as alike "
                      f"as asked (across_machines): {said}")
    return Result("same_machine", INCONCLUSIVE,
                  f"runs from different machines: {said}; CPU time and shares move with the "
                  "machine: collect both sides on one machine, or pass --across-machines")


def same_collectors(before: list[Run], after: list[Run], t: Thresholds) -> Result:
    ref = before[0]
    diffs = []
    for r in (*before[1:], *after):
        for d in collector_mismatch(ref.meta, r.meta, t):
            diffs.append(f"{ref.label} vs {r.label}: {d}")
    if diffs:
        return Result("same_collectors", INCONCLUSIVE,
                      "runs collected differently: " + "; ".join(diffs[:4]))
    return Result("same_collectors", PASS, "every run collected the same way")


def collector_mismatch(a: dict[str, Any], b: dict[str, Any], t: Thresholds) -> list[str]:
    out = []
    if a["unit"] != b["unit"]:
        out.append(f"unit {a['unit']} vs {b['unit']}")
    kinds = [sorted(k for k, v in m["samples"].items() if v) for m in (a, b)]
    if kinds[0] != kinds[1]:
        out.append(f"evidence {','.join(kinds[0]) or 'none'} vs {','.join(kinds[1]) or 'none'}")
    for key in sorted((a["rates"].keys() | b["rates"].keys()) - set(ADAPTIVE_RATES)):
        ra, rb = a["rates"].get(key), b["rates"].get(key)
        if ra is None or rb is None or abs(ra - rb) > t.rate_tolerance * max(abs(ra), abs(rb)):
            out.append(f"{key} {ra} vs {rb}")
    fa = [sorted({(s.get("format"), s.get("event")) for s in m["sources"]}, key=str)
          for m in (a, b)]
    if fa[0] != fa[1]:
        out.append("sources " + " vs ".join(",".join(str(x[0]) + (f":{x[1]}" if x[1] else "")
                                                     for x in f) for f in fa))
    return out
