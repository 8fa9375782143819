"""Multi-process targets: which processes a collect covers, and what each is called.

A pre-fork server (PostgreSQL, nginx, Apache prefork) is many processes, each with its own
role, so a target may be several processes: ``--pid`` repeated, ``--pid-tree PID`` (the process
and its descendants, including those forked during the window) or ``--cgroup PATH`` (every
process of a cgroup v2 directory and of its sub-directories).  A launched command is followed as
the tree of its process.

Processes are named as ``ps`` shows them: the command line as the process rewrote it
(PostgreSQL's ``postgres: bench bench [local] UPDATE``), the arguments joined by spaces, control
characters shown as ``?``, cut to ``NAME_MAX`` characters.  The name is read at every round of
the watch, and a process keeps the name it showed most often (a backend's last word changes
with every statement).  A name is the target's text: hostile wherever it is shown.

``Watch`` lists the members four times a second without stopping anything, so that the
collectors can cover processes forked during the window; ``perf record -p`` follows those forks
on its own (its events are inherited).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wallflame.collect.target import list_pids, read_stat, read_text
from wallflame.errors import InputError, TargetError

#: Longest process name kept (``ps`` cuts to the terminal's width; a report needs a bound).
NAME_MAX = 200
#: Seconds between two rounds of the watch.
WATCH_S = 0.25
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def display_name(cmdline: bytes, comm: str = "") -> str:
    """A process's name as ``ps -o args`` shows it: the arguments (NUL-separated in
    ``/proc/PID/cmdline``, or one string a process wrote over its ``argv``) joined by spaces,
    trailing padding dropped, control characters as ``?``; ``[comm]`` when there is none (a
    zombie, or a process that cleared its arguments)."""
    text = cmdline.rstrip(b"\0 ").decode("utf-8", "replace").replace("\0", " ")
    text = _CONTROL.sub("?", text).strip()
    if not text:
        return f"[{_CONTROL.sub('?', comm)}]"
    return text if len(text) <= NAME_MAX else text[:NAME_MAX - 1] + "\u2026"


def read_name(pid: int) -> str | None:
    """``display_name`` of a live process, ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(4 * NAME_MAX)
    except OSError:
        return None
    st = read_stat(pid)
    if st is None:
        return None
    return display_name(raw, st.comm)


def _ppids() -> dict[int, int]:
    """pid -> parent pid of every process /proc lists now."""
    out: dict[int, int] = {}
    for pid in list_pids():
        st = read_stat(pid)
        if st is not None:
            out[pid] = st.ppid
    return out


def descendants(root: int, ppids: dict[int, int] | None = None) -> list[int]:
    """``root`` and every process below it (by parent pid), ``root`` first."""
    ppids = _ppids() if ppids is None else ppids
    children: dict[int, list[int]] = {}
    for pid, ppid in ppids.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.append(pid)
        todo.extend(sorted(children.get(pid, []), reverse=True))
    return out


def cgroup2_root() -> Path:
    """Where the cgroup v2 hierarchy is mounted (``/sys/fs/cgroup``, or ``.../unified`` on a
    hybrid system)."""
    for line in (read_text("/proc/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[:1] == ["cgroup2"] and len(left.split()) > 4:
            return Path(left.split()[4])
    raise InputError("no cgroup v2 hierarchy is mounted here",
                     "mount -t cgroup2 none /sys/fs/cgroup, or give --pid-tree or --pid")


def cgroup_dir(path: str) -> Path:
    """The directory of a cgroup given as a path in the hierarchy (``/system.slice/x.service``,
    as /proc/PID/cgroup shows it) or as its directory under the mount point.  A path in the
    hierarchy stays in it (``..`` cannot leave it for a v1 hierarchy beside it); an empty path
    is refused (``--cgroup "$UNSET"`` would otherwise be the root: every process of the
    machine, which ``/`` still names on purpose)."""
    if not path.strip():
        raise InputError("--cgroup: empty path", "give the cgroup's path, or / for every "
                         "process of the machine")
    p = Path(path)
    if p.is_absolute() and (p / "cgroup.procs").is_file():
        return p
    root = cgroup2_root()
    d = root / path.lstrip("/")
    try:
        inside = d.resolve().is_relative_to(root.resolve())
    except OSError:
        inside = False
    if not inside or not (d / "cgroup.procs").is_file():
        raise InputError(f"--cgroup {path}: no such cgroup v2 directory ({d})",
                         "give the path /proc/PID/cgroup shows after '0::', or a directory "
                         f"under {root}")
    return d


def cgroup_pids(directory: Path) -> list[int]:
    """Every process of the cgroup and of the cgroups below it."""
    out: set[int] = set()
    for d, _, _ in os.walk(directory):
        for line in (read_text(os.path.join(d, "cgroup.procs")) or "").split():
            if line.isdigit():
                out.add(int(line))
    return sorted(out)


@dataclass(frozen=True)
class Selection:
    """What the command line named: pids, trees' roots, cgroup directories."""

    pids: tuple[int, ...] = ()
    trees: tuple[int, ...] = ()
    cgroups: tuple[Path, ...] = ()

    @property
    def multi(self) -> bool:
        return bool(self.trees or self.cgroups) or len(self.pids) > 1

    def members(self) -> list[int]:
        """The processes selected now, in the order named (a tree's root before its
        descendants)."""
        out: list[int] = list(self.pids)
        ppids = _ppids() if self.trees else {}
        for root in self.trees:
            out += descendants(root, ppids)
        for d in self.cgroups:
            out += cgroup_pids(d)
        seen: set[int] = set()
        return [p for p in out if not (p in seen or seen.add(p))]  # type: ignore[func-returns-value]

    def to_json(self) -> dict[str, Any]:
        return {"pids": list(self.pids), "trees": list(self.trees),
                "cgroups": [str(c) for c in self.cgroups]}


def selection(pids: Iterable[int], trees: Iterable[int], cgroups: Iterable[str]) -> Selection:
    """Check what the command line named; a cgroup that holds no process is an error."""
    sel = Selection(tuple(pids), tuple(trees), tuple(cgroup_dir(c) for c in cgroups))
    for d in sel.cgroups:
        if not cgroup_pids(d):
            raise TargetError(f"cgroup {d} holds no process", "name a cgroup with processes "
                              "in it (cat its cgroup.procs)")
    return sel


@dataclass
class Seen:
    """One process as the watch saw it (identified by pid and start time)."""

    pid: int
    start_ticks: int
    ppid: int
    comm: str
    names: Counter[str] = field(default_factory=Counter)
    first_ns: int = 0
    last_ns: int = 0
    exited: bool = False
    joined: str = "start"  # "start", "fork" (born during the window) or "moved" (cgroup)

    @property
    def name(self) -> str:
        """The name it showed most often (the latest of equals)."""
        if not self.names:
            return f"[{self.comm}]"
        best = max(self.names.values())
        return [n for n, c in self.names.items() if c == best][-1]

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_ticks": self.start_ticks, "ppid": self.ppid,
                "comm": self.comm, "name": self.name,
                "names": dict(self.names.most_common(5)), "first_ns": self.first_ns,
                "last_ns": self.last_ns, "exited": self.exited, "joined": self.joined}


class Watch(threading.Thread):
    """The members of a selection, listed every ``WATCH_S`` until ``stop``; each new member
    is passed to ``on_new`` (from the watch's thread), and the members alive to
    ``each_round`` after each listing.  ``named``: the PIDs named on the
    command line (``--pid``, a tree's root): once such a process has ended, a process that
    takes its PID is a stranger, never a member."""

    def __init__(self, members: Callable[[], list[int]], stop: threading.Event,
                 on_new: Callable[[Seen], None] | None = None,
                 named: Iterable[int] = (),
                 each_round: Callable[[list[int]], None] | None = None) -> None:
        super().__init__(name="wallflame-procs", daemon=True)
        self.members = members
        self.named = set(named)
        self.stop_event = stop
        self.on_new = on_new
        self.each_round = each_round  # given the members found alive, after each round
        self.seen: dict[int, Seen] = {}
        self.lock = threading.Lock()
        self.started_ns = 0
        self.cpu_s = 0.0  # this thread's CPU time, once it has ended

    def poll(self) -> list[Seen]:
        """One round: every member's name now; returns the processes not seen before."""
        now = time.time_ns()
        new: list[Seen] = []
        current = set()
        for pid in self.members():
            st = read_stat(pid)
            if st is None or st.state in "ZX":
                continue
            with self.lock:
                old = self.seen.get(pid)
            if old is not None and old.start_ticks != st.start_ticks and pid in self.named:
                continue  # the named process ended and its PID was reused
            current.add(pid)
            name = read_name(pid)
            with self.lock:
                s = self.seen.get(pid)
                if s is None or s.start_ticks != st.start_ticks:
                    joined = "start" if not self.started_ns else (
                        "fork" if st.ppid in self.seen else "moved")
                    s = Seen(pid, st.start_ticks, st.ppid, st.comm, first_ns=now,
                             joined=joined)
                    self.seen[pid] = s
                    new.append(s)
                s.comm = st.comm
                if name is not None:
                    s.names[name] += 1
                s.last_ns = now
        with self.lock:
            for pid, s in self.seen.items():
                if pid not in current:
                    s.exited = True
        self.started_ns = self.started_ns or now
        if self.each_round is not None:
            self.each_round(sorted(current))
        return new

    def run(self) -> None:
        try:
            while not self.stop_event.wait(WATCH_S):
                for s in self.poll():
                    if self.on_new is not None:
                        self.on_new(s)
        finally:
            self.cpu_s = time.thread_time()

    def pids(self) -> list[int]:
        with self.lock:
            return sorted(self.seen)

    def to_json(self) -> list[dict[str, Any]]:
        with self.lock:
            return [s.to_json() for _, s in sorted(self.seen.items())]
