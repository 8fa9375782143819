"""Threads named after their process, for targets of several processes.

A collect of several processes (``--pid`` repeated, ``--pid-tree``, ``--cgroup``, or a launched
command that starts others) records each process it covered in ``capture.json``
``processes``: pid, start time and name as ``ps`` shows it (``collect.procs``).  Here each
thread is named after its process (``postgres: checkpointer``; a thread other than the main
one of a multi-threaded process: ``NAME: COMM``), so that the report's thread grouping, which
merges names that differ only in digits, groups the processes by name; the summary lists the
processes by name.  A process only perf saw (it lived less than one round of the watch) keeps
its thread's comm, and is counted in a warning.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from wallflame.profile import Profile

if TYPE_CHECKING:  # the reports import this module, and need no record of a capture
    from wallflame.rundir import Capture

#: ``meta.extra`` keys: the processes (``collect.procs.Seen`` records) and tid -> pid.
PROCESSES: Final = "processes"
THREAD_PIDS: Final = "thread_pids"


def processes(cap: Capture) -> list[dict[str, Any]]:
    """The well-formed process records of a capture."""
    out = []
    for p in cap.processes:
        if isinstance(p, dict) and isinstance(p.get("pid"), int) and isinstance(
                p.get("name"), str):
            out.append(p)
    return out


def thread_pids(profile: Profile) -> dict[int, int]:
    """tid -> pid of every thread with a stack."""
    out: dict[int, int] = {}
    for k in profile.stacks:
        if k.tid and k.pid:
            out.setdefault(k.tid, k.pid)
    return out


def fill_pids(profile: Profile, pids: dict[int, int]) -> None:
    """Give the stacks recorded without a pid (perf's on-CPU samples name the thread only)
    their thread's pid, as the other evidence of that thread names it."""
    for k in [k for k in profile.stacks if not k.pid and pids.get(k.tid)]:
        w = profile.stacks.pop(k)
        profile.add(k._replace(pid=pids[k.tid]), w)


def apply(profile: Profile, cap: Capture) -> None:
    """Name the threads of a multi-process capture after their processes and keep the
    processes in ``meta.extra`` (a single process keeps its threads' own names); every stack
    gets its thread's pid where any evidence names it (a single process: the target's)."""
    procs = processes(cap)
    pids = thread_pids(profile)
    # a process's main thread has its pid for tid, whatever evidence its stacks lack (a
    # process started within the window, seen by the scheduler on every CPU)
    tids = {k.tid for k in profile.stacks}
    pids.update({p["pid"]: p["pid"] for p in procs if p["pid"] not in pids and p["pid"] in tids})
    if len(procs) == 1:
        only = procs[0]["pid"]
        pids.update({k.tid: only for k in profile.stacks if k.tid and k.tid not in pids})
    fill_pids(profile, pids)
    if len(procs) <= 1 and len(set(pids.values())) <= 1:
        return
    by_pid = {p["pid"]: p for p in procs}
    names = profile.meta.threads
    comm = {k.tid: k.thread for k in profile.stacks}
    unseen: set[int] = set()
    for tid, pid in pids.items():
        p = by_pid.get(pid)
        if p is None:
            unseen.add(pid)
            continue
        own = names.get(tid) or comm.get(tid, "")
        names[tid] = p["name"] if tid == pid or not own else f"{p['name']}: {own}"
    profile.meta.extra[PROCESSES] = procs
    profile.meta.extra[THREAD_PIDS] = {str(t): p for t, p in sorted(pids.items())}
    if unseen:
        profile.meta.warn(f"{len(unseen)} processes were seen only by perf (they lived less "
                          "than a round of the process watch, 0.25 s): their threads keep "
                          "their own names")


def summary(profile: Profile, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The processes by name: how many, their PIDs, threads and times (from the summary's
    thread ``rows``).  A process with no thread in the rows (idle and never seen switching
    or snapshotted) is listed with zero threads: it was there."""
    procs = profile.meta.extra.get(PROCESSES)
    if not isinstance(procs, list) or not procs:
        return []
    tp = profile.meta.extra.get(THREAD_PIDS) or {}
    by_name: dict[str, dict[str, Any]] = {}
    name_of: dict[int, str] = {}
    for p in procs:
        if not isinstance(p, dict) or not isinstance(p.get("pid"), int):
            continue
        name = str(p.get("name", ""))
        name_of[p["pid"]] = name
        g = by_name.setdefault(name, {"name": name, "pids": [], "threads": 0,
                                      "on_cpu_s": 0.0, "off_cpu_s": 0.0, "exited": 0,
                                      "joined": 0})
        g["pids"].append(p["pid"])
        g["exited"] += bool(p.get("exited"))
        g["joined"] += p.get("joined") not in (None, "start")
    for r in rows:
        pid = tp.get(str(r["tid"])) if isinstance(tp, dict) else None
        found = by_name.get(name_of.get(pid, "")) if isinstance(pid, int) else None
        if found is None:
            continue
        found["threads"] += 1
        found["on_cpu_s"] = round(found["on_cpu_s"] + r["on_cpu_s"], 6)
        found["off_cpu_s"] = round(found["off_cpu_s"] + r["off_cpu_s"], 6)
    return sorted(by_name.values(), key=lambda g: (-(g["on_cpu_s"] + g["off_cpu_s"]),
                                                   g["name"]))


def row_pid(profile: Profile, tid: int) -> int:
    """The pid of a summary row's thread (0: unknown, or a single-process target)."""
    tp = profile.meta.extra.get(THREAD_PIDS) or {}
    pid = tp.get(str(tid)) if isinstance(tp, dict) else None
    return pid if isinstance(pid, int) else 0
