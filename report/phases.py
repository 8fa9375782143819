"""Each thread's time by phase, as a program that clocks its own phases counts it.

A program that times each phase of its threads (``samples/bin/mix``: on-CPU, mutex, sleep,
condition variable) counts the time a thread was runnable but not yet running inside the
phase it fell in.  From ``summary.json`` that is each wait class's seconds plus the runnable
time after a stack of that class (``runnable_after``), and the on-CPU seconds plus the
runnable time of a preempted running stack (``other``).  tests/live/test_accuracy_live.py and
benchmarks/lab/sched_split.py compare these with mix's own measurement.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wallflame.profile import OFF, Profile


@dataclass(frozen=True)
class Phases:
    """One thread's seconds by phase (``on`` and each wait class), the total they are shares
    of (on-CPU, runnable and off-CPU seconds), and the mutex seconds counted in the condvar
    phase instead (``moved``)."""

    seconds: dict[str, float]
    total: float
    moved: float

    def share(self, phase: str) -> float:
        """The phase's share of the thread's time, in percent."""
        return 100 * self.seconds[phase] / self.total


def mutex_seconds_under(offcpu: Profile, frame: str) -> dict[int, float]:
    """Seconds of mutex waits per thread id whose stack holds ``frame`` (nanosecond
    profiles)."""
    out: dict[int, float] = {}
    for k, w in offcpu.stacks.items():
        if k.state == OFF and k.wait == "mutex" and frame in k.frames:
            out[k.tid] = out.get(k.tid, 0.0) + w / 1e9
    return out


def thread_phases(summary: Mapping[str, Any], offcpu: Profile,
                  condvar_frame: str) -> dict[int, Phases]:
    """Each thread of a run's ``summary.json`` by phase, by thread id.  Mutex waits under
    ``condvar_frame`` in the run's off-CPU profile ``offcpu`` count in the condvar phase: a
    condition variable's wait takes its mutex again, inside the call the program clocks."""
    moved = mutex_seconds_under(offcpu, condvar_frame)
    out: dict[int, Phases] = {}
    for row in summary["threads"]:
        after = row.get("runnable_after") or {}
        total = row["on_cpu_s"] + row["runnable_s"] + row["off_cpu_s"]
        seconds = {"on": row["on_cpu_s"] + after.get("other", 0.0),
                   **{c: s + after.get(c, 0.0) for c, s in row["wait"].items()}}
        m = moved.get(row["tid"], 0.0)
        seconds["mutex"] -= m
        seconds["condvar"] += m
        out[row["tid"]] = Phases(seconds, total, m)
    return out
