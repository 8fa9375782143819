"""The report as plain text for a terminal or a CI log: the per-thread table, the locks and the
top stacks, in at most 100 columns.  Names are made visible (no escape sequence from the
target reaches the terminal) and cut to fit."""

from __future__ import annotations

import heapq
from typing import IO, Any

from wallflame.profile import OFF, UNIT_NS, WAIT_CLASSES, Profile
from wallflame.report.summary import build_summary
from wallflame.report.tree import visible

TOP = 10
SHORT = {"mutex": "mutex", "rwlock": "rwlock", "condvar": "condv", "io": "io", "poll": "poll",
         "sleep": "sleep", "other": "other"}


def _cut(s: str, n: int) -> str:
    s = visible(s, 4 * n)
    return s if len(s) <= n else s[: n - 1] + "…"


def _v(x: float, unit: str) -> str:
    if unit != "seconds":
        return f"{round(x)}"
    return f"{x:.3f}" if x < 1000 else f"{x:.0f}"


def _threads(s: dict[str, Any], out: IO[str]) -> None:
    unit = s["unit"]
    used = [c for c in WAIT_CLASSES if s["totals"]["wait"][c]]
    head = f"{'thread':<24} {'tid':>7} {'on-CPU':>9} {'off-CPU':>9}"
    head += "".join(f" {SHORT[c]:>8}" for c in used) + f" {'cover':>6}"
    out.write(head + "\n")
    for r in [*s["threads"], {**s["totals"], "name": "all", "tid": 0}]:
        cov = r.get("coverage")
        line = (f"{_cut(r['name'] or '?', 24):<24} {r['tid'] or '-':>7} "
                f"{_v(r['on_cpu_s'], unit):>9} {_v(r['off_cpu_s'], unit):>9}")
        line += "".join(f" {_v(r['wait'][c], unit):>8}" for c in used)
        line += f" {f'{100 * cov:.0f}%' if cov is not None else '-':>6}"
        out.write(line + "\n")


def _share(x: dict[str, Any]) -> str:
    if "share" in x:
        return f"{100 * x['share']:.0f}% ({x['count']} of {x['of']})"
    return f"{x['count']} of {x['of']} observations"


def _locks(s: dict[str, Any], out: IO[str]) -> None:
    unit = "s" if s["unit"] == "seconds" else " samples"
    for lock in s["locks"][:5]:
        out.write(f"lock {_cut(lock['lock'], 60)}: waited {_v(lock['wait_s'], s['unit'])}{unit} "
                  f"by {len(lock['waiters'])} threads\n")
        out.write(f"  confirmed holder {_v(lock['held_confirmed_s'], s['unit'])}{unit} "
                  f"[{_share(lock['held_confirmed'])}]\n")
        for h in lock["holders"][:3]:
            leaf = h["stack"].rsplit(";", 1)[-1] if h["stack"] else "?"
            out.write(f"  held by {_cut(h['name'], 20)} ({h['tid']}) {_share(h)} "
                      f"in {_cut(leaf, 40)}\n")
        for r in lock.get("released_from", {}).get("sites", [])[:2]:
            out.write(f"  released from {_cut(r['frame'], 50)} {_share(r)}\n")
    for u in s.get("unidentified_lock_waits", [])[:3]:
        out.write(f"lock not identified, waited at {_cut(u['call_site'], 50)}: "
                  f"{_v(u['s'], s['unit'])}{unit} by {len(u['waiters'])} threads\n")


def _top(profile: Profile, out: IO[str]) -> None:
    total = profile.total() or 1
    unit = profile.meta.unit
    for k, w in heapq.nlargest(TOP, profile.stacks.items(), key=lambda kv: kv[1]):
        state = k.wait if k.state == OFF else "on"
        amount = f"{w / 1e9:.3f}s" if unit == UNIT_NS else str(w)
        frames = " <- ".join(_cut(f, 40) for f in reversed(k.frames[-4:]))
        more = " <- …" if len(k.frames) > 4 else ""
        out.write(f"{100 * w / total:5.1f}% {amount:>10} {state:<7} "
                  f"{_cut(k.thread or '?', 14):<14} {frames}{more}\n")


def write_text(profile: Profile, out: IO[str]) -> None:
    s = build_summary(profile)
    window = f"window {s['window_s']:.3f}s, " if s["window_s"] else ""
    out.write(f"wallflame: {window}{len(s['threads'])} threads, unit {s['unit']}\n\n")
    _threads(s, out)
    if s["locks"] or s.get("unidentified_lock_waits"):
        out.write("\n")
        _locks(s, out)
    out.write(f"\ntop {TOP} stacks (leaf first):\n")
    _top(profile, out)
    q = s["quality"]
    notes = [f"{n} {k}" for k, n in q["losses"].items()] + list(q["warnings"])
    for n in notes:
        out.write(f"warning: {_cut(n, 96)}\n")
