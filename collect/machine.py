"""How busy the rest of the machine was while the target was collected.

A program's profile moves with its machine's load: threads preempted inside a critical
section, caches shared with other work, timer samples landing elsewhere.  Two runs of the
same program collected while other processes kept the CPUs busy, and while they did not,
can differ more than any change to the code (``wallflame check`` says so instead of judging
them: ``same_load``).  So each run records, over its window, from the kernel's own counters:

* the machine's busy CPU time (``/proc/stat``: user, nice, system, irq and softirq) and the
  time the hypervisor gave the machine's CPUs to others (steal);
* the target's CPU time (``/proc/PID/stat`` of each of its processes);
* the collect's own: this process, the children it has waited for, and those still running
  (perf, gdb), found by their parent;
* the rest: the machine's busy time less the target's and the collect's, in CPUs (CPU
  seconds a second), never below zero.

It also records the machine itself (``identity``: CPU model, CPU count, kernel, frequency
governor, whether it is a virtual machine): CPU per unit of work and every share move with
the machine, so ``wallflame check`` does not judge runs from different machines as alike
(``same_machine``).

Counters are in clock ticks (``USER_HZ``, usually 100 a second): over a window of seconds the
figures are good to a few hundredths of a CPU.  Processes that both started and ended within
the window count in the machine's busy time, and so in the rest.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") or 100)
#: ``/proc/stat``'s ``cpu`` fields counted as busy: user, nice, system, irq, softirq
#: (guest time is already in user); iowait and idle are not busy; steal is kept apart.
BUSY_FIELDS = (0, 1, 2, 5, 6)
STEAL_FIELD = 7
#: Above this share of the machine's CPUs taken by the hypervisor over the window, the collect
#: warns: the kernel's run time of a thread (``schedstat``) leaves out the time its CPU was
#: taken while it ran, the scheduler's switches do not, so the two part by about that share.
STEAL_NOTE_ABOVE = 0.02


def identity(proc: str = "/proc", cpu_dir: str = "/sys/devices/system/cpu") -> dict[str, Any]:
    """The machine (``wallflame.runfiles.IDENTITY_FIELDS``): ``cpu_model`` (``/proc/cpuinfo``'s
    model name), ``cpus``, ``kernel`` (its release), ``governor`` (cpu0's frequency governor,
    ``none`` without cpufreq) and ``vm`` (the CPU flags name a hypervisor)."""
    model, vm = "unknown", False
    try:
        with open(f"{proc}/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown":
                    model = " ".join(value.split()) or "unknown"
                elif key.strip() == "flags":
                    vm = vm or "hypervisor" in value.split()
    except OSError:
        pass
    try:
        with open(f"{cpu_dir}/cpu0/cpufreq/scaling_governor", encoding="utf-8") as f:
            governor = f.read().strip() or "none"
    except OSError:
        governor = "none"
    return {"cpu_model": model, "cpus": os.cpu_count() or 1, "kernel": os.uname().release,
            "governor": governor, "vm": vm}


def steal_note(machine: dict[str, Any]) -> str | None:
    """The warning for a window in which the hypervisor took more than ``STEAL_NOTE_ABOVE``
    of the machine's CPUs (``machine`` of meta.json), or None."""
    try:
        share = float(machine["steal_cpus"]) / float(machine["cpus"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    if not share > STEAL_NOTE_ABOVE:
        return None
    return (f"the hypervisor took {share:.0%} of the machine's CPUs over the window (steal): a "
            "thread's on-CPU time includes the time its CPU was taken while it ran, which the "
            "kernel's own run time leaves out")


def machine_ticks(path: str = "/proc/stat") -> tuple[int, int] | None:
    """The machine's busy and stolen ticks since boot, summed over its CPUs."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            first = f.readline().split()
    except (OSError, UnicodeError):
        return None
    if not first or first[0] != "cpu":
        return None
    try:
        values = [int(x) for x in first[1:]]
    except ValueError:
        return None
    if len(values) <= STEAL_FIELD:
        return None
    return sum(values[i] for i in BUSY_FIELDS), values[STEAL_FIELD]


def _stat(pid: int) -> tuple[int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return parse_stat(f.read())
    except OSError:
        return None


def parse_stat(text: str) -> tuple[int, int] | None:
    """A process's parent and its CPU ticks (user and system, all of its threads), from
    its ``/proc/PID/stat``."""
    rest = text[text.rfind(")") + 2:].split()  # the name may hold spaces and parentheses
    try:
        return int(rest[1]), int(rest[11]) + int(rest[12])
    except (IndexError, ValueError):
        return None


def _processes() -> dict[int, tuple[int, int]]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = _stat(int(name))
            if s is not None:
                out[int(name)] = s
    return out


def _descendants(root: int, procs: dict[int, tuple[int, int]]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out: set[int] = set()
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _own_ticks() -> float:
    """This process's CPU and that of the children it has waited for, in ticks."""
    t = os.times()
    return (t.user + t.system + t.children_user + t.children_system) / TICK_S


class LoadMeter:
    """The machine's load over a window: ``start`` when it opens, ``stop`` when it closes
    (``targets``: the target's processes, read at both ends)."""

    def __init__(self, targets: Callable[[], Iterable[int]]) -> None:
        self.targets = targets
        self._start: dict[str, Any] | None = None

    def _read(self) -> dict[str, Any] | None:
        m = machine_ticks()
        if m is None:
            return None
        procs = _processes()
        target = set(self.targets())
        for t in list(target):  # the target's own children are the target's
            target |= _descendants(t, procs)
        ours = _descendants(os.getpid(), procs) - target
        return {"t": time.monotonic(), "busy": m[0], "steal": m[1], "own": _own_ticks(),
                "ticks": {p: v[1] for p, v in procs.items()},
                "target": sorted(p for p in target if p in procs), "ours": sorted(ours)}

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> dict[str, Any] | None:
        """``machine`` of meta.json (see the module docstring): the load's figures (none when
        the counters could not be read) and the machine's ``identity``."""
        a, b = self._start, self._read()
        figures = None if a is None or b is None else load_figures(a, b, os.cpu_count() or 1)
        return {**(figures or {}), "identity": identity()}


def _grown(a: dict[str, Any], b: dict[str, Any], pids: list[int]) -> float:
    """Ticks the processes ``pids`` (as the second reading classed them) gained between the
    readings: a process that did not exist at the first counts all of its own (it started
    within the window)."""
    return float(sum(max(0, b["ticks"][p] - a["ticks"].get(p, 0)) for p in pids
                     if p in b["ticks"]))


def load_figures(a: dict[str, Any], b: dict[str, Any], cpus: int) -> dict[str, Any] | None:
    """The figures between two readings (``LoadMeter._read``), in CPUs."""
    seconds = b["t"] - a["t"]
    if seconds <= 0:
        return None
    per_s = TICK_S / seconds
    busy = (b["busy"] - a["busy"]) * per_s
    target = _grown(a, b, b["target"]) * per_s
    collect = (_grown(a, b, b["ours"]) + b["own"] - a["own"]) * per_s
    out: dict[str, Any] = {
        "cpus": cpus, "seconds": round(seconds, 3), "busy_cpus": round(busy, 3),
        "target_cpus": round(target, 3), "collect_cpus": round(collect, 3),
        "other_cpus": round(max(0.0, busy - target - collect), 3),
        "steal_cpus": round(max(0.0, (b["steal"] - a["steal"]) * per_s), 3)}
    gone = [p for p in a["target"] if p not in b["ticks"]]
    if gone:
        # A target process that ended within the window cannot be read at its end: what it
        # used after the first reading is missing from target_cpus (a launched command,
        # reaped by the collect, counts in collect_cpus instead).  The rest of the machine
        # (other_cpus) is unaffected: it is the busy time less both.
        out["target_exited"] = len(gone)
    return out

