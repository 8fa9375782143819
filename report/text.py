"""The report as plain text for a terminal or a CI log: the findings, the per-thread table, the
locks and the top stacks, in at most 100 columns.  Names are made visible (no escape sequence
from the target reaches the terminal) and cut to fit."""

from __future__ import annotations

import textwrap
from typing import IO, Any

from wallflame.amounts import SECONDS, column
from wallflame.classify import wait_label
from wallflame.profile import OFF, WAIT_CLASSES, Profile
from wallflame.report import blame
from wallflame.report.findings import Finding, idle_tids, summarize
from wallflame.report.topstacks import kernel_item, stack_runs, top_rows
from wallflame.report.tree import visible
from wallflame.threadgroups import display_name, display_names, group_label, merge_rows
from wallflame.waitclasses import FALLBACK, WAIT_TABLE

TOP = 10
#: How many labelled rules are listed, how wide the text is, a frame's name and a stack at most.
TOP_LABELS = 8
WIDTH = 100
NAME_WIDTH = 40
STACK_LINES = 4
#: The critical path section: at most this many waits, each with this many causes.
CRITICAL_WAITS = 3
CRITICAL_CAUSES = 3
#: Each wait class's column head (``waitclasses``).
SHORT = {c.name: c.short for c in WAIT_TABLE}


def _cut(s: str, n: int) -> str:
    s = visible(s, 4 * n)
    return s if len(s) <= n else s[: n - 1] + "…"


def _cut_group(name: str, n: int) -> str:
    """``_cut`` that keeps a group's count (``… ×32``) whole."""
    pattern, sep, count = name.rpartition(" ×")
    if sep and count.isdigit() and len(name) > n:
        return _cut(pattern, n - len(sep) - len(count)) + sep + count
    return _cut(name, n)


def _threads(s: dict[str, Any], out: IO[str]) -> None:
    unit = s["unit"]
    # runnable (waiting for a CPU) always has its column: a saturated machine shows there
    used = [c for c in WAIT_CLASSES if s["totals"]["wait"][c] or c == "runnable"]
    # the name takes what the columns leave of WIDTH (between 12 and 24)
    nw = max(13, min(32, WIDTH - 8 - 18 - 9 * len(used) - 7))
    head = f"{'thread':<{nw}} {'tid':>7} {'on-CPU':>8} {'blocked':>8}"
    head += "".join(f" {SHORT[c]:>8}" for c in used) + f" {'cover':>6}"
    out.write(head + "\n")
    for r in [*merge_rows(s["threads"]), {**s["totals"], "name": "all", "tid": 0}]:
        cov = r.get("coverage")
        line = (f"{_cut_group(r['name'] or '?', nw):<{nw}} {r['tid'] or '-':>7} "
                f"{column(r['on_cpu_s'], unit):>8} {column(r['off_cpu_s'], unit):>8}")
        line += "".join(f" {column(r['runnable_s'] if c == 'runnable' else r['wait'][c], unit):>8}"
                        for c in used)
        line += f" {f'{100 * cov:.0f}%' if cov is not None else '-':>6}"
        out.write(line + "\n")


def finding_lines(found: list[Finding], width: int = WIDTH) -> list[str]:
    """The findings, numbered, each wrapped to ``width`` with its evidence in brackets."""
    lines: list[str] = []
    for i, f in enumerate(found, 1):
        text = f"{f.heading}: {visible(f.text, 2000)} [{visible(f.evidence, 200)}]"
        lines += textwrap.wrap(text, width, initial_indent=f"{i}. ", subsequent_indent="   ",
                               break_on_hyphens=False)
    return lines


def _share(x: dict[str, Any]) -> str:
    if "share" in x:
        return f"{100 * x['share']:.0f}% ({x['count']} of {x['of']})"
    return f"{x['count']} of {x['of']} observations"


def _fit(line: str) -> str:
    """A line of already visible text cut to ``WIDTH`` columns."""
    return line if len(line) <= WIDTH else line[:WIDTH - 1] + "…"


def _locks(s: dict[str, Any], out: IO[str]) -> None:
    unit = "s" if s["unit"] == SECONDS else " samples"
    lines = []
    for lock in s["locks"][:5]:
        lines.append(f"lock {_cut(lock['lock'], 60)}: waited "
                     f"{column(lock['wait_s'], s['unit'])}{unit} by {len(lock['waiters'])} "
                     "threads")
        held = lock["held_confirmed"]
        scaled = f"{column(lock['held_confirmed_s'], s['unit'])}{unit} " if "share" in held else ""
        lines.append(f"  confirmed holder {scaled}[{_share(held)}]")
        for h in lock["holders"][:3]:
            leaf = h["stack"].rsplit(";", 1)[-1] if h["stack"] else "?"
            names = [str(t["name"]) for t in h.get("threads") or []]
            who = _cut(group_label(names), 30) if len(names) > 1 else \
                f"{_cut(h['name'], 20)} ({h['tid']})"
            lines.append(f"  held by {who} {_share(h)} in {_cut(leaf, 40)}")
        for r in lock.get("released_from", {}).get("sites", [])[:2]:
            lines.append(f"  released from {_cut(r['frame'], 50)} {_share(r)}")
        path = blame.for_lock(s, lock)
        if path is not None:
            lines.append(f"  waits spent waiting for (critical path, {100 * path['explained']:.0f}%"
                         f" known): {_cut(blame.causes_text(path), 70)}")
    for u in s.get("unidentified_lock_waits", [])[:3]:
        lines.append(f"lock not identified, waited at {_cut(u['call_site'], 50)}: "
                     f"{column(u['s'], s['unit'])}{unit} by {len(u['waiters'])} threads")
    out.writelines(_fit(line) + "\n" for line in lines)


def _critical_path(rows: list[dict[str, Any]], out: IO[str]) -> None:
    """Who made them wait: each heavy wait's causes (``report.blame``)."""
    out.write("who made them wait (critical path of each wait; docs/critical-path.md):\n")
    for r in rows[:CRITICAL_WAITS]:
        out.write(_fit(f"  {_cut(r['waiters'], 30)} in {_cut(r['wait'], 40)}: "
                       f"{r['waited_s']:.3f}s, {100 * r['explained']:.0f}% with a known "
                       "waker") + "\n")
        for c in r["causes"][:CRITICAL_CAUSES]:
            who = f" ({_cut(c['who'], 30)})" if c["who"] else ""
            out.write(_fit(f"    {100 * c['share']:3.0f}%  {_cut(c['what'], 80)}{who}") + "\n")


def stack_lines(frames: tuple[str, ...], wait: str, width: int = WIDTH - 4,
                max_lines: int = STACK_LINES) -> list[str]:
    """A stack as a reader follows it: the user's frames from the thread's root, root first
    (a run of one frame written once, ``[postgres] ×3``), then the kernel's folded into one item
    with the wait (``[kernel 9: lock: ProcSleep]``), wrapped into at most ``max_lines`` lines of
    ``width`` columns.  When they do not fit, the frames nearest the root after the first two
    give way (``… 12 frames …``): what was waited on, and by whom, is at the other end."""
    runs, nk = stack_runs(frames)
    items = [(_cut(f, NAME_WIDTH) + (f" ×{n}" if n > 1 else ""), n) for f, n in runs]
    tail = kernel_item(nk, wait)
    texts = [t for t, _ in items] + tail
    lines = _wrap(texts, width)
    if len(lines) <= max_lines:
        return lines
    keep_root = min(2, len(items))
    best: list[str] = []
    lo, hi = 0, len(items) - keep_root  # how many leaf-side items to keep
    while lo <= hi:
        mid = (lo + hi) // 2
        cut = sum(n for _, n in items[keep_root:len(items) - mid])
        trial = _wrap([*texts[:keep_root], _elided(cut), *texts[len(items) - mid:]], width)
        if len(trial) <= max_lines:
            best, lo = trial, mid + 1
        else:
            hi = mid - 1
    shown = sum(n for _, n in runs)
    return best or _wrap([*texts[:keep_root], _elided(shown - keep_root), *tail],
                         width)[:max_lines]


def _elided(n: int) -> str:
    return f"… {n} frame{'s' if n != 1 else ''} …"


def _wrap(items: list[str], width: int) -> list[str]:
    lines: list[str] = []
    line = ""
    for i, item in enumerate(items):
        piece = item + (" >" if i < len(items) - 1 else "")
        if line and len(line) + 1 + len(piece) > width:
            lines.append(line)
            line = piece
        else:
            line = f"{line} {piece}" if line else piece
    if line:
        lines.append(line)
    return lines


def _top(profile: Profile, idle: set[int], names: dict[int, str], out: IO[str]) -> None:
    total = profile.total() or 1
    unit = profile.meta.unit
    for row in top_rows(profile, TOP, idle, names):
        k = row.key
        if k.state == OFF:
            cls = k.wait if k.wait in WAIT_CLASSES else FALLBACK
            sub = wait_label(k.frames, k.wait)
            state = f"{cls}: {sub}" if sub else cls
        else:
            state = "on-CPU"
        amount = column(row.weight, unit, "s")
        out.write(f"{100 * row.weight / total:5.1f}% {amount:>10}  {_cut(state, 40)}  "
                  f"{_cut(row.threads, 30)}\n")
        wait = state if k.state == OFF else ""
        for line in stack_lines(k.frames, wait):
            out.write(f"    {line}\n")


def _labels(s: dict[str, Any], out: IO[str]) -> None:
    off = s["totals"]["off_cpu_s"] or 1
    for row in s["wait_labels"][:TOP_LABELS]:
        name = _cut(f"{row['class']}: {row['label']}", 40)
        out.write(f"  {name:<40} {column(row['s'], s['unit']):>10} {100 * row['s'] / off:5.1f}% "
                  "of off-CPU\n")


def write_text(profile: Profile, out: IO[str]) -> None:
    s = summarize(profile)
    window = f"window {s['window_s']:.3f}s, " if s["window_s"] else ""
    out.write(f"wallflame: {window}{len(s['threads'])} threads, unit {s['unit']}\n\n")
    found = [Finding(**f) for f in s["findings"]]
    if found:
        out.write("findings:\n")
        out.writelines(line + "\n" for line in finding_lines(found))
        out.write("\n")
    _threads(s, out)
    if s["locks"] or s.get("unidentified_lock_waits"):
        out.write("\n")
        _locks(s, out)
    if s.get("critical_path"):
        out.write("\n")
        _critical_path(s["critical_path"], out)
    elif s.get("critical_path_missing"):
        out.write("\n")
        out.writelines(f"{line}\n" for line in textwrap.wrap(
            f"who made them wait: {s['critical_path_missing']}", WIDTH))
    ts = s["tracer_stops"]
    if ts["threads"]:
        timed = ""
        if ts.get("runnable_s"):
            timed += f"; {ts['runnable_s']:.3f}s of it waiting for a CPU after the release"
        if ts.get("timed_s"):
            lo, hi = ts["timed_s"]
            timed += (f"; the tracer timed its {ts['timed_stops']} stops of single threads at "
                      f"{lo:.3f}-{hi:.3f}s, between which the rest lies")
        out.write(f"\nstopped by {_cut(ts['cause'], 20)} (ptrace): {ts['total_s']:.3f}s over "
                  f"{len(ts['threads'])} threads, in no wait class\n")
        detail = f"(the snapshot loop measured {ts['measured_pause_s']:.6f}s of pauses{timed})"
        out.writelines(f"{line}\n" for line in textwrap.wrap(
            detail, WIDTH, initial_indent="  ", subsequent_indent="  "))
    if s["wait_labels"]:
        out.write("\noff-CPU time by rule:\n")
        _labels(s, out)
    idle = idle_tids(s["threads"])
    idle_names = [display_name(r) for r in s["threads"] if r["tid"] in idle]
    left = f"; idle threads left out: {group_label(idle_names)}" if idle else ""
    out.write(f"\ntop {TOP} stacks (root first, kernel frames folded into the wait{left}):\n")
    _top(profile, idle, display_names(s["threads"]), out)
    q = s["quality"]
    notes = [f"{n} {k}" for k, n in q["losses"].items()] + list(q["warnings"])
    for n in notes:
        out.write(f"warning: {_cut(n, 96)}\n")


def write(profile: Profile, out: IO[str], title: str | None) -> None:
    """The ``txt`` format's writer (``report/writers.py``): the title is not shown."""
    write_text(profile, out)
