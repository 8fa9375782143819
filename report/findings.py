"""What a report found, in plain words: a short ranked list of statements, each with its
figure, the evidence behind it and the page view that shows it.

* Read from the summary (``report.summary.build_summary``) and, for hot code, the profile's
  on-CPU stacks; every output (the page, the text report, ``summary.json``, the collect's
  last lines) shows the same list.
* The rules are the rows of ``RULES``: a finding of a kind is made when its share of the
  threads' time reaches the row's threshold.  Idle threads (mostly waiting for work: an idle
  poll, or a wait the rules' ``idle`` rows name) are left out of every other finding and named
  once, last.
* A profile whose unit is samples of unknown length (plain folded input) gets only the hot
  code: its other figures are not time.
* A finding that names its cause by a pattern (``report.findingrules``: memory kept in malloc
  arenas, a busy-polling loop, a library call with a known faster path, the allocator, Go's
  collector) is of tier 0 and comes first: the thread time it accounts for understates it
  (memory is not time; a spinning poll is idle time; the remedy of a known costly call is
  local, and on CPUs its own threads fill, each of its seconds is also one others wait for a
  CPU).  The rest rank by the thread time
  each accounts for; at most ``MAX_FINDINGS``.
* On-CPU time in a call of ``report.findingrules.CALLS`` (the allocator, Go's collector, an
  idle poll, ICU) is that call's finding, and left out of the hot code.
* Threads are named by group (``consumer-* ×8``: ``wallflame.threadgroups``).
"""

from __future__ import annotations

import heapq
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import IO, Any
from urllib.parse import quote

from wallflame.locks.lockshare import lock_name
from wallflame.profile import ON, UNIT_NS, Profile
from wallflame.report import blame
from wallflame.report.findingrules import (
    CALL,
    CallTime,
    call_names,
    call_times,
    retained,
    top,
    which_call,
)
from wallflame.report.summary import build_summary, load_words, seconds, user_frames
from wallflame.threadgroups import display_name, display_names, group_label, name_pattern
from wallflame.waitclasses import LOCK_CLASSES

#: The classes of waits on a lock: glibc's (read by the lock sampler) and a server's own
#: (``lock``: a row, table or metadata lock, named by the wait rules).
WAIT_ON_LOCK = (*LOCK_CLASSES, "lock")
#: At most this many findings are listed.
MAX_FINDINGS = 7
#: Threads of a group waiting for work (``idle_s``) for at least this share of their time are
#: idle (a group's threads act alike: pooled, a thread's own split over a few snapshots does
#: not make it idle alone) ...
IDLE_SHARE = 0.5
#: ... and so is any thread that waited for work for at least this share of its own.
IDLE_ALONE = 0.9
#: At most this many functions are named as hot code.
HOT_FUNCTIONS = 3


@dataclass(frozen=True)
class Rule:
    """One kind of finding: its heading, the share of the (non-idle) threads' time from
    which it is reported (of their on-CPU time for a call; of their wall time for a busy poll)
    and its tier (0 first)."""

    kind: str
    heading: str
    min_share: float
    tier: int = 1


#: Every kind of finding, in the order they are tried; the list is ranked afterwards.
RULES = (
    Rule("memory", "Retained memory", 0.0, 0),
    Rule("busypoll", "Busy polling", 0.10, 0),
    Rule("library", "Costly library call", 0.01, 0),
    Rule("lock", "Lock contention", 0.05),
    Rule("waits", "Waiting for a lock", 0.05),
    Rule("cpu", "CPU saturation", 0.20),
    Rule("gc", "Garbage collection", 0.10, 0),
    Rule("alloc", "Allocator time in new/delete", 0.10, 0),
    Rule("hot", "Hot code", 0.10),
    Rule("io", "Waiting on I/O", 0.10),
    Rule("cost", "The profiler's own cost", 0.01),
    Rule("idle", "Idle threads", 0.0),
)
RULE = {r.kind: r for r in RULES}


@dataclass(frozen=True)
class Finding:
    """One statement: ``text`` with its figure, ``evidence`` (what it rests on), ``seconds``
    (the thread time it accounts for: the rank) and ``view`` (the page's address fragment
    that shows it: ``q=`` a search, ``view=`` on- or off-CPU)."""

    kind: str
    heading: str
    text: str
    evidence: str
    seconds: float
    view: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _wall(row: dict[str, Any]) -> float:
    return float(row["on_cpu_s"]) + float(row.get("runnable_s", 0.0)) + float(row["off_cpu_s"])


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x >= 0.01 else f"{100 * x:.1f}%"


def _view(search: str = "", view: str = "both") -> str:
    q = quote(search, safe="", errors="backslashreplace")
    return f"view={view}&threads=group" + (f"&q={q}" if search else "")


def idle_s(row: dict[str, Any]) -> float:
    """A thread's time waiting for work: its idle poll and the waits the rules' ``idle`` rows
    name (``idle_s``: a pool worker waiting for a task)."""
    return float(row["wait"].get("poll", 0.0)) + float(row.get("idle_s", 0.0))


def idle_tids(rows: Iterable[dict[str, Any]]) -> set[int]:
    """The threads that mostly waited for work (``idle_s``): those of a group (one name
    pattern or role: threads that act alike) that did for ``IDLE_SHARE`` of the group's time,
    and any thread that did for ``IDLE_ALONE`` of its own."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[name_pattern(display_name(r))].append(r)
    out = set()
    for members in by.values():
        wall = sum(_wall(r) for r in members)
        pooled = wall > 0 and sum(idle_s(r) for r in members) >= IDLE_SHARE * wall
        out |= {int(r["tid"]) for r in members if _wall(r) > 0 and (
            pooled or idle_s(r) >= IDLE_ALONE * _wall(r))}
    return out


def _after_lock(row: dict[str, Any], kinds: Iterable[str] = WAIT_ON_LOCK) -> float:
    """A thread's time waiting for a CPU once woken from a lock wait: part of the lock's
    convoy (the lock call lasts until the thread runs again), ranked with the lock."""
    after = row.get("runnable_after") or {}
    return sum(float(after.get(k, 0.0)) for k in kinds)


def _lock_findings(summary: dict[str, Any], walls: dict[int, float],
                   names: dict[int, str]) -> list[Finding]:
    rows = {int(r["tid"]): r for r in summary.get("threads", []) if r.get("tid")}
    out = []
    for lk in summary.get("locks", []):
        waiters = lk.get("waiters") or []
        wall = sum(walls.get(int(w["tid"]), 0.0) for w in waiters)
        wait = float(lk.get("wait_s", 0.0))
        if not wall or wait < RULE["lock"].min_share * wall:
            continue
        who = group_label([names.get(int(w["tid"]), str(w["name"])) for w in waiters])
        sites = [s["frame"] for s in lk.get("call_sites", [])]
        text = (f"{who} spent {_pct(wait / wall)} of their time ({wait:.2f} s) waiting for "
                f"{lk.get('kind', 'lock')} {lock_name(str(lk['lock']))}")
        if sites:
            text += f", taken in {sites[0]}"
        held = lk.get("held_confirmed") or {}
        evidence = f"{lk.get('observations', 0)} observations of the lock"
        if lk.get("holders"):
            frames = str(lk["holders"][0]["stack"]).split(";")
            start = max((i for i, f in enumerate(frames) if f in set(sites)), default=0)
            text += "; held in " + " → ".join(frames[start:])
            evidence = (f"{held.get('count', 0)} of {held.get('of', 0)} observations caught "
                        "its holder")
        rel = (lk.get("released_from") or {}).get("sites") or []
        if rel:
            text += f"; released from {rel[0]['frame']}"
        path = blame.for_lock(summary, lk)
        if path is not None:
            text += "; " + blame.sentence(path)
            evidence += "; the wake-ups that ended the waits"
        kind = str(lk.get("kind", "mutex"))
        cls = sum(float(rows[int(w["tid"])]["wait"].get(kind, 0.0)) for w in waiters
                  if int(w["tid"]) in rows)
        after = sum(_after_lock(rows[int(w["tid"])], (kind,)) for w in waiters
                    if int(w["tid"]) in rows)
        rank = wait + (after * min(1.0, wait / cls) if cls else 0.0)
        out.append(Finding("lock", RULE["lock"].heading, text, evidence, rank,
                           _view(sites[0] if sites else "")))
    return out


def _labelled_lock_findings(summary: dict[str, Any], wall: float) -> list[Finding]:
    """Lock waits a server's rules name (``lock: ProcSleep``, ``rwlock: LWLock LockManager``,
    ``lock: InnoDB row lock``): a wait the lock sampler cannot read, by the rule that named it."""
    out = []
    for row in summary.get("wait_labels", []):
        s = float(row.get("s", 0.0))
        if row.get("class") not in WAIT_ON_LOCK or not row.get("label") or not wall or \
                s < RULE["waits"].min_share * wall:
            continue
        label = f"{row['class']}: {row['label']}"
        text = (f"threads waited {_pct(s / wall)} of their time ({s:.2f} s) in {label}")
        out.append(Finding("waits", RULE["waits"].heading, text,
                           "off-CPU stacks the wait rules name", s, _view(str(row["label"]))))
    return out


def _cpu_finding(busy: list[dict[str, Any]], machine: dict[str, float]) -> list[Finding]:
    wall = sum(_wall(r) for r in busy)
    waiting = [r for r in busy if float(r.get("runnable_s", 0.0)) > 0]
    runnable = sum(float(r.get("runnable_s", 0.0)) for r in waiting)
    if not wall or runnable < RULE["cpu"].min_share * wall:
        return []
    on = sum(float(r["on_cpu_s"]) for r in busy)
    most = sorted(waiting, key=lambda r: -float(r["runnable_s"]))
    top = [r for r in most if float(r["runnable_s"]) >= 0.1 * float(most[0]["runnable_s"])]
    text = (f"{group_label([display_name(r) for r in top])} waited for a CPU "
            f"{_pct(runnable / wall)} of their time ({runnable:.2f} s, against {on:.2f} s "
            f"on a CPU): {load_words(machine)}")
    return [Finding("cpu", RULE["cpu"].heading, text,
                    "the scheduler's run-queue time of each thread",
                    cpu_rank(runnable - sum(_after_lock(r) for r in busy), machine),
                    _view("runnable"))]


def cpu_rank(runnable: float, machine: dict[str, float]) -> float:
    """The rank of CPU saturation: the time waiting for a CPU that no lock's convoy accounts
    for (``_after_lock``), in the share of the CPUs' use that was the target's own (the rest
    is its neighbours': a fact of the machine, said in the finding, ranked after what the
    program itself does); all of it without the machine's figures."""
    target, other = machine.get("target_cpus", 0.0), machine.get("other_cpus", 0.0)
    return runnable * target / (target + other) if target + other > 0 else runnable


def _kb(kb: int) -> str:
    return f"{kb / 1024:,.0f} MB" if kb >= 10 * 1024 else f"{kb / 1024:.1f} MB"


def _memory_finding(profile: Profile) -> list[Finding]:
    r = retained(profile.meta.extra.get("memory"))
    if r is None:
        return []
    text = (f"{r.arenas} glibc malloc arenas held {_kb(r.kb)} resident at the end of the "
            f"window, {_pct(r.kb / r.rss_kb)} of the process's {_kb(r.rss_kb)}: memory malloc "
            "keeps for its threads once freed, which looks like a leak; malloc_trim(0) returns "
            "it and MALLOC_ARENA_MAX caps the arenas")
    return [Finding("memory", RULE["memory"].heading, text,
                    "the arena mappings in /proc/PID/smaps at the end of the window", 0.0,
                    _view())]


def _call_finding(kind: str, t: CallTime, s: float, base: float, total_on: float,
                  names: dict[int, str]) -> Finding:
    call = CALL[kind]
    who = group_label(sorted({names.get(tid, str(tid)) for tid in t.tids}))
    entries = ", ".join(top(t.entries))
    callers = f", called from {' and '.join(top(t.callers))}" if t.callers else ""
    if kind == "busypoll":
        text = (f"{who} spent {s:.2f} s on a CPU inside {entries}, {_pct(s / base)} of the "
                f"time they were not waiting for a CPU{callers}: {call.remedy}")
    else:
        text = (f"{call.what} ({entries}) took {_pct(s / total_on)} of the on-CPU time "
                f"({s:.2f} s) of {who}{callers}; {call.remedy}")
    return Finding(kind, RULE[kind].heading, text,
                   f"perf's on-CPU samples in {call.what}'s frames", s,
                   _view(top(t.entries, 1)[0], "on"))


def _call_findings(profile: Profile, busy: set[int], total_on: float,
                   rows: list[dict[str, Any]], names: dict[int, str]) -> list[Finding]:
    """On-CPU time in the calls of ``CALLS``, against the on-CPU time; but for a busy poll,
    the threads on a CPU inside an idle poll for longer than they were blocked in one, and
    for ``min_share`` of the time they were not waiting for a CPU (a spinning thread never
    blocks, and on a loaded machine waits for a CPU more than it runs)."""
    if total_on <= 0:
        return []
    unit = profile.meta.unit

    def times(tids: set[int]) -> dict[str, CallTime]:
        return call_times((k.frames, k.tid, w) for k, w in profile.stacks.items()
                          if k.state == ON and not (k.tid and k.tid not in tids))

    out = []
    for kind, t in times(busy).items():
        s, base = seconds(t.weight, unit), total_on
        if kind == "busypoll":
            spin = {int(r["tid"]) for r in rows if _spins(r, seconds(t.tids[int(r["tid"])], unit))}
            if not spin:
                continue
            t = times(spin)[kind]
            s = seconds(t.weight, unit)
            base = sum(_wall(r) - float(r.get("runnable_s", 0.0)) for r in rows
                       if int(r["tid"]) in spin)
        if base and s >= RULE[kind].min_share * base:
            out.append(_call_finding(kind, t, s, base, total_on, names))
    return out


def _spins(row: dict[str, Any], polling: float) -> bool:
    """A thread on a CPU inside an idle poll for ``polling`` seconds spins in it."""
    ran = _wall(row) - float(row.get("runnable_s", 0.0))
    return polling > 0 and polling >= float(row["wait"].get("poll", 0.0)) and \
        polling >= RULE["busypoll"].min_share * ran


def _hot_findings(profile: Profile, busy: set[int], total_on: float,
                  names: dict[int, str], claimed: frozenset[str] = frozenset()) -> list[Finding]:
    """The user functions on-CPU samples were taken in, but for the calls found apart
    (``claimed``: their kinds)."""
    if total_on <= 0:
        return []
    by_fn: dict[str, float] = defaultdict(float)
    threads: dict[str, set[str]] = defaultdict(set)
    names_claimed = (call_names(set().union(*(k.frames for k in profile.stacks)), claimed)
                     if claimed else frozenset())
    for k, w in profile.stacks.items():
        if k.state != ON or (k.tid and k.tid not in busy):
            continue
        if not names_claimed.isdisjoint(k.frames) and (hit := which_call(k.frames)) and \
                hit[0].kind in claimed:
            continue
        user = user_frames(k.frames)
        if not user:
            continue
        s = seconds(w, profile.meta.unit)
        by_fn[user[-1]] += s
        threads[user[-1]].add(names.get(k.tid) or k.thread or "?")
    out = []
    for fn, s in heapq.nlargest(HOT_FUNCTIONS, by_fn.items(), key=lambda kv: kv[1]):
        if s < RULE["hot"].min_share * total_on:
            break
        amount = f"{s:.2f} s" if profile.meta.unit == UNIT_NS else f"{s:,.0f} samples"
        text = (f"{fn} ran {_pct(s / total_on)} of the on-CPU time ({amount}), in "
                f"{group_label(sorted(threads[fn]))}")
        out.append(Finding("hot", RULE["hot"].heading, text,
                           "perf's on-CPU samples, by the function they were taken in", s,
                           _view(fn, "on")))
    return out


def _io_finding(busy: list[dict[str, Any]]) -> list[Finding]:
    wall = sum(_wall(r) for r in busy)
    io = sum(float(r["wait"].get("io", 0.0)) for r in busy)
    if not wall or io < RULE["io"].min_share * wall:
        return []
    who = [r for r in busy if float(r["wait"].get("io", 0.0)) > 0.1 * io]
    text = (f"{group_label([display_name(r) for r in who])} waited on I/O "
            f"{_pct(io / wall)} of their time ({io:.2f} s)")
    return [Finding("io", RULE["io"].heading, text, "off-CPU stacks classified as I/O", io,
                    _view("", "off"))]


def _cost_finding(summary: dict[str, Any], wall: float) -> list[Finding]:
    stopped = float((summary.get("tracer_stops") or {}).get("total_s", 0.0))
    if not wall or stopped < RULE["cost"].min_share * wall:
        return []
    text = (f"the collect stopped the target's threads for {stopped:.2f} s "
            f"({_pct(stopped / wall)} of their time) to read their stacks")
    return [Finding("cost", RULE["cost"].heading, text, "the tracer's own timing of its stops",
                    stopped, _view())]


def _idle_finding(idle: list[dict[str, Any]]) -> list[Finding]:
    if not idle:
        return []
    s = sum(idle_s(r) for r in idle)
    text = (f"{group_label([display_name(r) for r in idle])} mostly waited for work "
            f"({s:.2f} s): not a problem, and left out of the findings above")
    return [Finding("idle", RULE["idle"].heading, text,
                    "off-CPU stacks in an idle poll or a wait the idle rules name", s,
                    _view("", "off"))]


def findings(summary: dict[str, Any], profile: Profile) -> list[Finding]:
    """The ranked findings of ``profile`` (``summary``: its ``build_summary``)."""
    rows = [r for r in summary.get("threads", []) if r.get("tid")]
    idle = idle_tids(rows)
    busy = [r for r in rows if int(r["tid"]) not in idle]
    walls = {int(r["tid"]): _wall(r) for r in rows}
    total_on = sum(float(r["on_cpu_s"]) for r in busy)
    names = display_names(rows)
    if profile.meta.unit != UNIT_NS:  # samples of unknown length: only where CPU time went
        return _hot_findings(profile, {int(r["tid"]) for r in busy}, total_on, names)
    machine = (summary.get("quality") or {}).get("machine") or {}
    busy_tids = {int(r["tid"]) for r in busy}
    calls = _call_findings(profile, busy_tids, total_on, busy, names)
    found = [*_memory_finding(profile), *calls, *_lock_findings(summary, walls, names),
             *_cpu_finding(busy, machine),
             *_hot_findings(profile, busy_tids, total_on, names,
                            frozenset(f.kind for f in calls)),
             *_labelled_lock_findings(summary, sum(_wall(r) for r in busy)),
             *_io_finding(busy), *_cost_finding(summary, sum(walls.values()))]
    found.sort(key=lambda f: (RULE[f.kind].tier, -f.seconds))
    last = _idle_finding([r for r in rows if int(r["tid"]) in idle])
    return [*found[:MAX_FINDINGS - len(last)], *last]


def summarize(profile: Profile, groups: dict[Any, int] | None = None,
              run_dir: str | None = None) -> dict[str, Any]:
    """``build_summary`` with the critical path of the waits (``critical_path``, from the run
    directory's ``blame.folded``: ``report.blame``; the whole window's, so not for a range)
    and the findings under ``findings``: what ``summary.json``, the ``json`` format, the text
    report and the page hold."""
    s = build_summary(profile, groups)
    where = run_dir or profile.meta.extra.get("run_dir")
    if isinstance(where, str) and "range" not in profile.meta.extra:
        rows = [r for r in s.get("threads", []) if r.get("tid")]
        idle = idle_tids(rows)
        path = blame.summary(blame.of_run(where), frozenset(
            name_pattern(str(r["name"])) for r in rows if int(r["tid"]) in idle))
        if path is not None:
            s["critical_path"] = path
        elif profile.meta.unit == UNIT_NS:
            s["critical_path_missing"] = f"{blame.NOT_RECORDED}; {blame.HOW_TO_RECORD}"
    s["findings"] = [f.as_dict() for f in findings(s, profile)]
    return s


def write(profile: Profile, out: IO[str], title: str | None) -> None:
    """The ``json`` format's writer (``report/writers.py``): ``summary.json``'s content."""
    json.dump(summarize(profile), out, indent=2, sort_keys=True)
    out.write("\n")
