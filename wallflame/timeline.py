"""The run's time-ordered evidence: what each thread was doing at each moment of the window.

The folded files and ``summary.json`` keep totals; ``RUN/timeline.json.gz`` keeps the events
behind them, in time order, per thread, so that a report can show *when* (a stall at second
3 of 8, a lock convoy that comes and goes) and restrict itself to a range of the window
(``wallflame report RUN --from 3.0 --to 4.5``, the page's timeline, the Perfetto export):

* **samples**: the on-CPU samples (time, period, stack), read from ``raw/perf.script``;
* **spans**: the scheduler's intervals (start, duration, stack, period) of each thread's time
  off a CPU: blocked (with its wait class and the locks observed at its call site), runnable
  (preempted, waiting for a CPU) or stopped by the collect's own tracer, logged by
  ``wallflame.fold.perf.sampled_switches`` as it pairs switches (``IntervalLog``);
* **wakes**: each wake-up of the thread (``sched_waking``) with the task that woke it, when
  the wake-ups were recorded: the waits' wakers (``wallflame.critpath``).

Stacks are interned (a trie of ``(parent, frame)`` nodes, frame names in one table) and times
are deltas, so the file stays small (measured by benchmarks/lab/timeline_size.py).  The format, its
version and its fields: ``docs/formats.md``.  Times are perf's clock; a collect records with
``-k mono`` so they are ``CLOCK_MONOTONIC``, the clock a program reads with
``clock_gettime``, and the window's bounds in that clock are in ``meta.json``
(``window.mono_start_ns``/``mono_end_ns``).
"""

from __future__ import annotations

import gzip
import json
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import le, sub
from pathlib import Path
from typing import Any

from wallflame.errors import InputError
from wallflame.profile import BLOCKED_CLASSES as WAIT_CLASSES  # runnable has its kind below
from wallflame.speedups import native

TIMELINE = "timeline.json.gz"
FORMAT = "wallflame-timeline"
VERSION = 1

#: Span kinds after the wait classes (a blocked span's kind is its class's index).
UNSAMPLED = len(WAIT_CLASSES)      # blocked, no stack sampled for it (a data budget)
RUNNABLE = UNSAMPLED + 1           # preempted or woken, waiting for a CPU
STOPPED = UNSAMPLED + 2            # stopped by the collect's own tracer (ptrace)
KINDS = (*WAIT_CLASSES, "unsampled", "runnable", "stopped")


#: A wake-up's waker (``ThreadLine.w_waker``) when it is no task: a timer's expiry, an
#: interrupt or softirq (read from the waking's kernel call chain); 0 is the idle task.
WAKER_TIMER = -1
WAKER_IRQ = -2
#: The kernel functions in a waking's call chain that make its waker ``WAKER_TIMER`` or
#: ``WAKER_IRQ`` (a part of the name; a timer wins).  The native ``wake_run`` holds the same
#: lists (``wk_frame``).
WAKER_MARKS = ((WAKER_TIMER, ("hrtimer_wakeup", "process_timeout")),
               (WAKER_IRQ, ("asm_sysvec_", "asm_common_interrupt", "handle_softirqs",
                            "__do_softirq")))

#: What an ``IntervalLog`` entry is: blocked, runnable, or blocked since before the thread's
#: first record in the capture (its stack unknown).
LOG_BLOCKED, LOG_RUNNABLE, LOG_LEADING = 0, 1, 2


class IntervalLog:
    """The scheduler's intervals as they are closed, in compact columns (a few tens of bytes
    each: a busy server's minute is a few hundred thousand of them).  A sampled interval
    refers to its ``(frames, kernel state)`` by index in ``samples``."""

    def __init__(self) -> None:
        self.tid = array("q")
        self.start = array("q")
        self.dur = array("q")
        self.kind = array("b")  # LOG_BLOCKED, LOG_RUNNABLE or LOG_LEADING
        self.sample = array("q")
        self.period = array("q")
        self.samples: list[tuple[tuple[str, ...], str]] = []
        self._index: dict[tuple[tuple[str, ...], str], int] = {}

    def add(self, tid: int, start: int, dur: int, kind: int,
            sample: tuple[tuple[str, ...], str, int] | None) -> None:
        """One closed interval; ``sample``: its ``(frames, kernel state, period)``."""
        self.tid.append(tid)
        self.start.append(start)
        self.dur.append(dur)
        self.kind.append(kind)
        if sample is None:
            self.sample.append(-1)
            self.period.append(0)
            return
        self.sample.append(self.intern((sample[0], sample[1][:1])))
        self.period.append(sample[2])

    def intern(self, key: tuple[tuple[str, ...], str]) -> int:
        """The index of ``(frames, kernel state)`` in ``samples`` (added if new)."""
        i = self._index.get(key)
        if i is None:
            i = self._index[key] = len(self.samples)
            self.samples.append(key)
        return i

    def __len__(self) -> int:
        return len(self.tid)


class StackTable:
    """Interned stacks: id 0 is the empty stack; id ``n`` is node ``n``, whose parent and
    frame are ``nodes[2n-2]`` and ``frames[nodes[2n-1]]``."""

    def __init__(self) -> None:
        self.frames: list[str] = []
        self.nodes: list[int] = []
        self._frame: dict[str, int] = {}
        self._node: dict[tuple[int, int], int] = {}
        self._stack: dict[tuple[str, ...], int] = {(): 0}
        self._frames_of: list[tuple[str, ...]] = [()]

    def intern(self, frames: tuple[str, ...]) -> int:
        sid = self._stack.get(frames)
        if sid is not None:
            return sid
        node = 0
        for name in frames:
            fi = self._frame.get(name)
            if fi is None:
                fi = self._frame[name] = len(self.frames)
                self.frames.append(name)
            nxt = self._node.get((node, fi))
            if nxt is None:
                self.nodes += [node, fi]
                nxt = self._node[(node, fi)] = len(self.nodes) // 2
                self._frames_of.append((*self._frames_of[node], name))
            node = nxt
        self._stack[frames] = node
        return node

    def frames_of(self, sid: int) -> tuple[str, ...]:
        return self._frames_of[sid]

    @classmethod
    def from_json(cls, frames: list[str], nodes: list[int]) -> StackTable:
        t = cls()
        t.frames = frames
        t.nodes = nodes
        for n in range(len(nodes) // 2):
            parent, fi = nodes[2 * n], nodes[2 * n + 1]
            if not (0 <= parent <= n and 0 <= fi < len(frames)):
                raise ValueError(f"stack node {n + 1} refers outside the tables")
            t._frames_of.append((*t._frames_of[parent], frames[fi]))
        return t


@dataclass
class ThreadLine:
    """One thread's events, each column in time order (times absolute, in ns)."""

    tid: int
    pid: int = 0
    name: str = ""
    s_time: list[int] = field(default_factory=list)    # on-CPU samples
    s_weight: list[int] = field(default_factory=list)
    s_stack: list[int] = field(default_factory=list)
    p_start: list[int] = field(default_factory=list)   # spans off a CPU
    p_dur: list[int] = field(default_factory=list)
    p_kind: list[int] = field(default_factory=list)
    p_stack: list[int] = field(default_factory=list)
    p_period: list[int] = field(default_factory=list)
    p_locks: list[int] = field(default_factory=list)   # index in Timeline.lock_sets + 1
    w_time: list[int] = field(default_factory=list)    # wake-ups (sched_waking)
    w_waker: list[int] = field(default_factory=list)   # its waker's tid, or WAKER_TIMER/IRQ

    def span(self, start: int, dur: int, kind: int, stack: int = 0, period: int = 1,
             locks: int = 0) -> None:
        """Add a span off a CPU (``sort`` puts the spans in order)."""
        self.p_start.append(start)
        self.p_dur.append(dur)
        self.p_kind.append(kind)
        self.p_stack.append(stack)
        self.p_period.append(period)
        self.p_locks.append(locks)

    def sort(self) -> None:
        if not all(map(le, self.s_time[:-1], self.s_time[1:])):
            order = sorted(range(len(self.s_time)), key=self.s_time.__getitem__)
            for name in ("s_time", "s_weight", "s_stack"):
                col = getattr(self, name)
                setattr(self, name, [col[i] for i in order])
        if not all(map(le, self.w_time[:-1], self.w_time[1:])):
            order = sorted(range(len(self.w_time)), key=self.w_time.__getitem__)
            self.w_time = [self.w_time[i] for i in order]
            self.w_waker = [self.w_waker[i] for i in order]
        if not all(map(le, self.p_start[:-1], self.p_start[1:])):
            order = sorted(range(len(self.p_start)), key=self.p_start.__getitem__)
            for name in ("p_start", "p_dur", "p_kind", "p_stack", "p_period", "p_locks"):
                col = getattr(self, name)
                setattr(self, name, [col[i] for i in order])


@dataclass
class Timeline:
    """The time-ordered evidence of one run (see the module docstring)."""

    t0: int = 0
    t1: int = 0
    clock: str = "perf"
    off_source: str = ""
    stacks: StackTable = field(default_factory=StackTable)
    locks: list[str] = field(default_factory=list)
    #: Each entry: the locks a thread was observed waiting on at one call site, with their
    #: observation counts, as ``[(lock index, count), ...]``, most observed first.
    lock_sets: list[list[tuple[int, int]]] = field(default_factory=list)
    threads: dict[int, ThreadLine] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Whether the wake-ups' wakers were recorded (``ThreadLine.w_time``), and the name of
    #: each waker outside the target (tid -> ``comm (pid N)``, as ``/proc`` showed it when
    #: the run was finished).
    wakes: bool = False
    waker_names: dict[int, str] = field(default_factory=dict)
    _lock_index: dict[str, int] = field(default_factory=dict, repr=False)
    _set_index: dict[tuple[tuple[int, int], ...], int] = field(default_factory=dict,
                                                                repr=False)

    def thread(self, tid: int, pid: int = 0, name: str = "") -> ThreadLine:
        th = self.threads.get(tid)
        if th is None:
            th = self.threads[tid] = ThreadLine(tid, pid, name)
        else:
            th.pid = th.pid or pid
            th.name = name or th.name
        return th

    def lock_set(self, locks: dict[str, int]) -> int:
        """The index (+1; 0: none) of a set of observed locks with their counts."""
        if not locks:
            return 0
        items = []
        for lock, n in sorted(locks.items(), key=lambda kv: (-kv[1], kv[0])):
            li = self._lock_index.get(lock)
            if li is None:
                li = self._lock_index[lock] = len(self.locks)
                self.locks.append(lock)
            items.append((li, n))
        key = tuple(items)
        si = self._set_index.get(key)
        if si is None:
            si = self._set_index[key] = len(self.lock_sets)
            self.lock_sets.append(items)
        return si + 1

    def lock_of(self, ref: int) -> str:
        """The most observed lock of a span's lock set (``""``: none)."""
        return self.locks[self.lock_sets[ref - 1][0][0]] if ref else ""

    def sorted_threads(self) -> Iterator[ThreadLine]:
        for tid in sorted(self.threads):
            yield self.threads[tid]

    # -- the file ------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        threads = []
        for th in self.sorted_threads():
            th.sort()
            threads.append({
                "tid": th.tid, "pid": th.pid, "name": th.name,
                "samples": {"t": _deltas(th.s_time, self.t0), "w": th.s_weight,
                            "s": th.s_stack},
                "spans": {"t": _deltas(th.p_start, self.t0), "d": th.p_dur, "k": th.p_kind,
                          "s": th.p_stack, "p": th.p_period, "l": th.p_locks},
            })
            if self.wakes:
                threads[-1]["wakes"] = {"t": _deltas(th.w_time, self.t0), "w": th.w_waker}
        wakes = {"wakers": {str(k): v for k, v in sorted(self.waker_names.items())}} \
            if self.wakes else {}
        return {"format": FORMAT, "version": VERSION, "clock": self.clock,
                "t0_ns": self.t0, "t1_ns": self.t1, "off_source": self.off_source,
                "kinds": list(KINDS), "frames": self.stacks.frames,
                "nodes": self.stacks.nodes, "locks": self.locks,
                "lock_sets": [[list(p) for p in s] for s in self.lock_sets],
                "notes": self.notes, **wakes, "threads": threads}

    @classmethod
    def from_json(cls, d: Any) -> Timeline:
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError("not a wallflame timeline")
        if d.get("version") != VERSION:
            raise ValueError(f"timeline format version {d.get('version')!r}, this wallflame "
                             f"reads {VERSION}")
        if list(d.get("kinds", [])) != list(KINDS):
            raise ValueError("unknown span kinds")
        tl = cls(t0=int(d["t0_ns"]), t1=int(d["t1_ns"]), clock=str(d.get("clock", "")),
                 off_source=str(d.get("off_source", "")),
                 stacks=StackTable.from_json([str(f) for f in d["frames"]],
                                             [int(n) for n in d["nodes"]]),
                 locks=[str(x) for x in d["locks"]],
                 lock_sets=[[(int(a), int(b)) for a, b in s] for s in d["lock_sets"]],
                 notes=[str(n) for n in d.get("notes", [])], wakes="wakers" in d,
                 waker_names={int(k): str(v) for k, v in d.get("wakers", {}).items()})
        n_stacks = len(tl.stacks.nodes) // 2 + 1
        for t in d["threads"]:
            th = tl.thread(int(t["tid"]), int(t["pid"]), str(t["name"]))
            s, p = t["samples"], t["spans"]
            th.s_time = _undelta(s["t"], tl.t0)
            th.s_weight, th.s_stack = _ints(s["w"]), _ints(s["s"])
            th.p_start = _undelta(p["t"], tl.t0)
            th.p_dur, th.p_kind, th.p_stack = _ints(p["d"]), _ints(p["k"]), _ints(p["s"])
            th.p_period, th.p_locks = _ints(p["p"]), _ints(p["l"])
            if "wakes" in t:
                th.w_time = _undelta(t["wakes"]["t"], tl.t0)
                th.w_waker = _ints(t["wakes"]["w"])
                if len(th.w_time) != len(th.w_waker):
                    raise ValueError(f"thread {th.tid}: columns of different lengths")
            if len({len(th.s_time), len(th.s_weight), len(th.s_stack)}) != 1 or len(
                    {len(th.p_start), len(th.p_dur), len(th.p_kind), len(th.p_stack),
                     len(th.p_period), len(th.p_locks)}) != 1:
                raise ValueError(f"thread {th.tid}: columns of different lengths")
            if any(not 0 <= x < n_stacks for x in (*th.s_stack, *th.p_stack)) or any(
                    not 0 <= k < len(KINDS) for k in th.p_kind) or any(
                    not 0 <= x <= len(tl.lock_sets) for x in th.p_locks):
                raise ValueError(f"thread {th.tid}: a reference outside the tables")
            if min(th.p_dur, default=0) < 0 or min(th.p_period, default=0) < 0 or \
                    min(th.s_weight, default=0) < 0:
                raise ValueError(f"thread {th.tid}: a negative duration, period or weight")
        return tl


def _ints(column: Any) -> list[int]:
    """A column of the file as integers (anything else is a damaged file: ``ValueError``)."""
    if not isinstance(column, list) or not all(type(x) is int for x in column):
        raise ValueError("a column that is not a list of integers")
    return column


def _deltas(times: list[int], base: int) -> list[int]:
    """Each time less the one before it (the first less ``base``), by ``map`` (a minute of a
    busy server is millions of spans)."""
    if not times:
        return []
    return [times[0] - base, *map(sub, times[1:], times[:-1])]


def _undelta(deltas: list[Any], base: int) -> list[int]:
    out = []
    t = base
    for d in deltas:
        t += int(d)
        out.append(t)
    return out


def write(run_dir: str | os.PathLike[str], tl: Timeline) -> Path:
    """``RUN/timeline.json.gz`` (compact JSON, gzip level 1, no timestamp in the header so the
    same run gives the same bytes).  Level 1: a busy server's timeline is tens of MB of JSON,
    which level 1 packs in a seventh of level 6's CPU, for a file 9% larger."""
    from wallflame.output import open_output

    path = Path(run_dir) / TIMELINE
    blob = gzip.compress(json_text(tl).encode("utf-8"), compresslevel=1, mtime=0)
    with open_output(str(path)) as f:
        f.flush()
        f.buffer.write(blob)  # type: ignore[attr-defined]  # a file opened by open_output
    return path


def json_text(tl: Timeline) -> str:
    """``json.dumps(tl.to_json(), separators=(",", ":"), ensure_ascii=False)``, with the
    threads' integer columns (nearly all of the text, about 2 MB a second of a busy server)
    written by the native ``ints_json``: the JSON module would take most of ``finish``'s CPU
    for them."""
    d = tl.to_json()

    def dumps(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)

    def ints(column: Any) -> str:
        try:
            return native.ints_json(column)
        except (TypeError, OverflowError):  # not all 64-bit ints: the JSON module writes any
            return dumps(column)

    threads = d.pop("threads")
    parts = [dumps(d)[:-1], ',"threads":[']
    for i, th in enumerate(threads):  # each thread's columns (its dicts) natively
        parts.append(("," if i else "") + "{" + ",".join(
            f"{dumps(k)}:" + ("{" + ",".join(f"{dumps(ck)}:{ints(col)}" for ck, col in v.items())
                              + "}" if type(v) is dict else dumps(v))
            for k, v in th.items()) + "}")
    parts.append("]}")
    return "".join(parts)


def load(run_dir: str | os.PathLike[str]) -> Timeline:
    """The timeline of a run directory; an ``InputError`` (exit 3) with the fix when it has
    none or it cannot be read."""
    path = Path(run_dir) / TIMELINE
    if not path.exists():
        raise InputError(f"{run_dir}: no {TIMELINE} (finished by an older wallflame, or not a "
                         "run directory)",
                         f"run `wallflame finish {run_dir}` to build it from raw/")
    try:
        with gzip.open(path, "rb") as f:
            d = json.loads(f.read().decode("utf-8"))
        return Timeline.from_json(d)
    except (OSError, EOFError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"{path}: unreadable timeline ({e})",
                         f"run `wallflame finish {run_dir}` to build it again from raw/"
                         ) from None


__all__ = ["KINDS", "LOG_BLOCKED", "LOG_LEADING", "LOG_RUNNABLE", "RUNNABLE", "STOPPED",
           "TIMELINE", "UNSAMPLED", "WAKER_IRQ", "WAKER_MARKS", "WAKER_TIMER", "IntervalLog",
           "StackTable", "ThreadLine", "Timeline", "json_text", "load", "write"]
