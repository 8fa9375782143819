"""The data-rate budget (``--max-data-mb-per-s``): how many scheduler stacks a run can afford.

Before the window opens, the target's threads' context-switch counters
(``/proc/PID/task/TID/status``) are read twice, ``MEASURE_S`` apart: that gives each
thread's switch rate without any tracing.  The run's data rate is then, per second:

* every switch as two ``PERF_RECORD_SWITCH`` records (``SWITCH_BYTES`` per switch): the exact
  blocked and runnable intervals, kept whatever the budget;
* every wake-up of a target thread (``WAKE_BYTES``, counted once per switch);
* on-CPU samples: at most ``-F`` per CPU (``ONCPU_SAMPLE_BYTES`` each, frame pointers);
* scheduler stacks: ``STACK_OVERHEAD_BYTES`` plus the DWARF stack copy each.

The stack rate per thread (perf's frequency mode on ``sched:sched_switch``) is the largest
``hz`` with ``sum over threads of min(rate_i, hz)`` stacks per second within what the budget
leaves (a thread that switches less often than ``hz`` has every switch sampled).  An attached
collect records the scheduler on every CPU (``collect.perf.PerfOptions.switch_filter``): the
switch records are then every task's (the machine's rate, from ``/proc/stat``), and the same
number of stacks a second is taken as one switch out of the target's in N per CPU
(``stack_period``).  The bytes per record are perf 6.1's, measured by
``benchmarks/lab/sched_stack_bytes.py`` on a busy server.  The estimate is recorded next to what
the run actually wrote (``meta.json`` ``postprocess.budget``); a run over budget says so in
its warnings.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MEASURE_S = 0.5
#: Bytes a switch: two ``PERF_RECORD_SWITCH`` records (``benchmarks/lab/sched_stack_bytes.py``).
SWITCH_BYTES = 64
#: Bytes of the wake-up recorder's ``sched:sched_wakeup`` record, counted once a switch of the
#: target (about one wake-up a voluntary switch; ``benchmarks/lab/sched_stack_bytes.py``).
WAKE_BYTES = 50
#: With the scheduler recorded on every CPU: the two ``PERF_RECORD_SWITCH_CPU_WIDE`` records
#: of one switch of any task on the machine (48 bytes each with perf 6.1, ``perf script -D``;
#: perf cannot filter them), counted from ``/proc/stat``'s ``ctxt``.
WIDE_SWITCH_BYTES = 96
ONCPU_SAMPLE_BYTES = 200
STACK_OVERHEAD_BYTES = 600
#: The automatic budget (``automatic``; applied by ``collect.plan``): an attached collect given
#: neither a budget nor a stack rate whose stacks at every switch would write more than
#: ``AUTO_ABOVE_MB_PER_S`` (about 2,600 switches a second) samples them within
#: ``AUTO_MB_PER_S`` (a minute then stays within about 480 MB).  The threshold leaves room for
#: a rate during the collect twice the rate read before it (``benchmarks/server_collect.py``).
AUTO_ABOVE_MB_PER_S = 24.0
AUTO_MB_PER_S = 8.0
#: Recording every switch costs a target about this much CPU time a switch of its own, in its
#: own switches (``benchmarks/lab/sched_recorders.py``).
RECORD_S_PER_SWITCH = 5e-6
#: The light collect (``too_costly``; applied by ``collect.plan``): a target whose every switch
#: would cost more than ``LIGHT_ABOVE_LOSS`` of the machine's CPUs to record (2 CPUs: above
#: 12,000 switches a second) has no scheduler recording: each thread's on-CPU, runnable and
#: blocked totals come from the kernel's counters (``/proc/PID/task/TID/schedstat``),
#: snapshots at ``LIGHT_PMP_HZ`` split the blocked time over stacks, and no owner sampler runs
#: (``LIGHT_OWNER_HZ``: lock owners are named from the snapshots' ``/proc`` records).  3%, not
#: the 5% the whole collect may cost, leaves room for the snapshots and the owner sampler of a
#: collect that records the scheduler.  Its cost on a busy server:
#: ``benchmarks/server_collect.py``.
LIGHT_ABOVE_LOSS = 0.03
LIGHT_PMP_HZ = 1.0
LIGHT_OWNER_HZ = 0.0
#: A light collect's on-CPU rate when ``-F`` was left to its default: its on-CPU totals are the
#: kernel's counters, the samples only split them over stacks (``benchmarks/lab/sched_recorders.py``
#: measures what 99 Hz saves a busy server against 499).
LIGHT_FREQ_HZ = 99
#: Bounds of the planned stack rate per thread (perf's frequency mode; the kernel throttles
#: sampling beyond its perf_event_max_sample_rate).
MIN_HZ = 1.0
MAX_HZ = 10_000.0


def switch_counts(pid: int) -> dict[int, int]:
    """Each thread's voluntary + involuntary context switches so far."""
    out: dict[int, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        n = 0
        try:
            with open(f"/proc/{pid}/task/{tid}/status", encoding="utf-8",
                      errors="replace") as f:
                for line in f:
                    if "ctxt_switches:" in line:
                        n += int(line.split()[-1])
        except (OSError, ValueError):
            continue
        out[int(tid)] = n
    return out


def machine_switches() -> int | None:
    """Context switches of the whole machine since boot (``/proc/stat`` ``ctxt``)."""
    try:
        with open("/proc/stat", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("ctxt "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpu_times() -> tuple[int, int] | None:
    """The machine's CPU time since boot, in clock ticks summed over its CPUs: (idle and
    waiting for I/O, all), from ``/proc/stat``'s ``cpu`` line."""
    try:
        with open("/proc/stat", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("cpu "):
                    ticks = [int(x) for x in line.split()[1:]]
                    # user nice system idle iowait irq softirq steal (guest time is in user)
                    return ticks[3] + ticks[4], sum(ticks[:8])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _all_counts(pids: Sequence[int]) -> dict[int, int]:
    return {tid: n for pid in pids for tid, n in switch_counts(pid).items()}


def switch_rates(pids: int | Sequence[int], seconds: float = MEASURE_S,
                 machine: dict[str, float] | None = None) -> dict[int, float]:
    """Switches per second of each thread of the processes ``pids`` (every process of the
    target: a pid tree's children, a cgroup's members) over ``seconds``; with ``machine``,
    the whole machine's over the same time is put in it (``switches_per_s``), and the share
    of its CPU time that was idle (``idle``)."""
    pids = [pids] if isinstance(pids, int) else list(pids)
    a, ma, ca = _all_counts(pids), machine_switches(), cpu_times()
    t0 = time.monotonic()
    time.sleep(seconds)
    b, mb, cb = _all_counts(pids), machine_switches(), cpu_times()
    dt = max(time.monotonic() - t0, 1e-3)
    if machine is not None and ma is not None and mb is not None:
        machine["switches_per_s"] = max(0, mb - ma) / dt
    if machine is not None and ca is not None and cb is not None and cb[1] > ca[1]:
        machine["idle"] = max(0, cb[0] - ca[0]) / (cb[1] - ca[1])
    return {tid: (n - a[tid]) / dt for tid, n in b.items() if tid in a}


def recording_cost(switches_per_s: float, cpus: int | None = None) -> float:
    """The share of the machine's CPUs that recording every switch of a target switching
    this often would take (``RECORD_S_PER_SWITCH``)."""
    return switches_per_s * RECORD_S_PER_SWITCH / (cpus or os.cpu_count() or 1)


def too_costly(rates: dict[int, float], cpus: int | None = None) -> bool:
    """Whether recording every switch of a target (its threads' ``rates``, measured by
    ``switch_rates``) would cost more than ``LIGHT_ABOVE_LOSS`` of the machine's CPUs."""
    return recording_cost(sum(rates.values()), cpus) > LIGHT_ABOVE_LOSS


@dataclass
class Plan:
    budget_mb_per_s: float
    stack_hz: float
    switches_per_s: float
    threads: int
    expected_mb_per_s: float
    stacks_per_s: float
    over_budget: bool
    #: on every CPU: one switch in this many, per CPU, carries a stack (``None``: per thread)
    stack_period: int | None = None
    machine_switches_per_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"budget_mb_per_s": self.budget_mb_per_s, "stack_hz": round(self.stack_hz, 2),
                "stack_period": self.stack_period,
                "machine_switches_per_s": (None if self.machine_switches_per_s is None
                                           else round(self.machine_switches_per_s)),
                "switches_per_s": round(self.switches_per_s), "threads": self.threads,
                "expected_mb_per_s": round(self.expected_mb_per_s, 3),
                "expected_stacks_per_s": round(self.stacks_per_s, 1),
                "over_budget": self.over_budget}


def _fixed_bytes(switches: float, freq_hz: float, cpus: int | None,
                 machine: float | None = None) -> float:
    """Bytes a second written whatever the stacks: switch and wake-up records, on-CPU
    samples.  ``machine``: the scheduler is recorded on every CPU, and every task's switches
    with it (that many a second)."""
    cpus = cpus or os.cpu_count() or 1
    switch_records = (switches * SWITCH_BYTES if machine is None
                      else max(machine, switches) * WIDE_SWITCH_BYTES)
    return switch_records + switches * WAKE_BYTES + freq_hz * cpus * ONCPU_SAMPLE_BYTES


def every_switch_mb_per_s(rates: dict[int, float], freq_hz: float, stack_bytes: int,
                          cpus: int | None = None) -> float:
    """The data rate of a stack at every switch (the default without a budget)."""
    switches = sum(rates.values())
    per_stack = stack_bytes + STACK_OVERHEAD_BYTES
    return (_fixed_bytes(switches, freq_hz, cpus) + switches * per_stack) / 1e6


def automatic(rates: dict[int, float], freq_hz: float, stack_bytes: int,
              cpus: int | None = None) -> float | None:
    """The budget an attached collect takes when given none: ``AUTO_MB_PER_S`` when a stack
    at every switch would write more than ``AUTO_ABOVE_MB_PER_S``, else ``None`` (every
    switch keeps its stack)."""
    every = every_switch_mb_per_s(rates, freq_hz, stack_bytes, cpus)
    return AUTO_MB_PER_S if every > AUTO_ABOVE_MB_PER_S else None


def plan(rates: dict[int, float], budget_mb_per_s: float, freq_hz: float, stack_bytes: int,
         cpus: int | None = None, machine: float | None = None) -> Plan:
    """The stack rate per thread that keeps the run within ``budget_mb_per_s``; with
    ``machine`` (the whole machine's switches a second: the scheduler recorded on every
    CPU), the stack period that does."""
    switches = sum(rates.values())
    fixed = _fixed_bytes(switches, freq_hz, cpus, machine)
    per_stack = stack_bytes + STACK_OVERHEAD_BYTES
    room = budget_mb_per_s * 1e6 - fixed
    hz = _water_fill(sorted(rates.values()), room / per_stack) if room > 0 else MIN_HZ
    hz = min(max(hz, MIN_HZ), MAX_HZ)
    stacks = sum(min(r, hz) for r in rates.values())
    period = None
    if machine is not None:
        period = stack_period(rates, hz)
        stacks = switches / period if switches > 0 else 0.0
    expected = (fixed + stacks * per_stack) / 1e6
    return Plan(budget_mb_per_s, hz, switches, len(rates), expected, stacks,
                expected > budget_mb_per_s * 1.001, period, machine)


def stack_period(rates: dict[int, float], stack_hz: float) -> int:
    """With the scheduler recorded on every CPU, the period of its stack event (one switch in
    N, per CPU) that takes about as many stacks a second as ``stack_hz`` per thread would
    (``sum(min(rate, stack_hz))``); 1 (every switch) for ``stack_hz`` 0 or a target that did
    not switch while it was measured."""
    switches = sum(rates.values())
    stacks = sum(min(r, stack_hz) for r in rates.values())
    if stack_hz <= 0 or switches <= 0 or stacks <= 0:
        return 1
    return max(1, math.ceil(switches / stacks))


def _water_fill(rates: list[float], stacks_per_s: float) -> float:
    """The largest ``hz`` with ``sum(min(r, hz)) <= stacks_per_s`` (``rates`` ascending);
    ``MAX_HZ`` when every switch fits."""
    left = stacks_per_s
    for i, r in enumerate(rates):
        rest = len(rates) - i
        if r * rest > left:
            return left / rest
        left -= r
    return MAX_HZ


__all__ = ["AUTO_ABOVE_MB_PER_S", "AUTO_MB_PER_S", "LIGHT_ABOVE_LOSS",
           "LIGHT_FREQ_HZ", "LIGHT_OWNER_HZ", "LIGHT_PMP_HZ", "RECORD_S_PER_SWITCH", "Plan",
           "automatic", "cpu_times", "every_switch_mb_per_s", "machine_switches", "plan",
           "recording_cost", "stack_period", "switch_counts", "switch_rates", "too_costly"]
