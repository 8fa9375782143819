"""One thread of the scheduler capture: what its switches left and what ``finish`` makes of
them.

The switch records are applied to each thread natively (``_speedups.SwitchTracker``), which
hands its threads over as ``SchedThread`` rows when ``finish`` (or a test) first reads them
(``wallflame.fold.perf.sched_reader.SchedReader.threads``)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any

from wallflame.strata import Donors

#: A wait's key: (frames, kernel state).
Key = tuple[tuple[str, ...], str]


@dataclass
class SchedThread:
    comm: str = ""
    pid: int = 0
    tid: int = 0
    blocked: int = 0
    runnable: int = 0
    leading: int = 0
    switches: int = 0
    samples: int = 0
    # (frames, kernel state) -> sum of period x duration of sampled blocked intervals
    stacks: dict[Key, int] = field(default_factory=dict)
    sampled_weight: int = 0
    # (frames, kernel state) -> period x duration of the runnable time behind that stack
    rstacks: dict[Key, int] = field(default_factory=dict)
    # on-CPU intervals (each IN to the next OUT) as start, end pairs; running since on_since
    on_cpu: array[int] = field(default_factory=lambda: array("q"))
    # every IN's time, in order (``sched_passes.switch_in_lag``)
    ins: array[int] = field(default_factory=lambda: array("q"))
    on_since: int | None = None
    seen: bool = False
    # (wait class, bin index) -> sum of period x the part of the interval in that bin
    bins: dict[tuple[str, int], int] = field(default_factory=dict)
    # sampled stacks only: blocked ns of unsampled intervals a snapshot's stop ended or
    # restarted (``sched_stops``), by the snapshot's (frames, kernel state)
    known: dict[Key, int] = field(default_factory=dict)
    known_ns: int = 0
    # sampled stacks only (``sched_split.split_strata``): the blocked intervals by stratum
    # of their whole durations, and those of known stack in each (``wallflame.strata``)
    strata: Donors | None = None
    # how the blocked time was split: (ns with the stack of a stop, ns split by the known
    # waits of their own stratum, ns split over all the thread's sampled stacks or left
    # unsampled)
    split_by: tuple[int, int, int] = (0, 0, 0)
    lead_start: int = 0  # where ``leading`` began (the capture's first record)
    # an OUT without its IN yet: (time, runnable, sample or None)
    open: tuple[int, bool, tuple[tuple[str, ...], str, int] | None] | None = None
    # a sample waiting for its OUT: (time, frames, state, period)
    pending: tuple[int, tuple[str, ...], str, int] | None = None
    # exited (``PERF_RECORD_EXIT``): its final switch-out opens no interval
    gone: bool = False


def from_export(rows: Any) -> dict[int, SchedThread]:
    """The threads of ``SwitchTracker.export()`` (its rows: see ``_speedups``)."""
    threads: dict[int, SchedThread] = {}
    for (tid, pid, comm, switches, samples, leading, lead_start, on_since, seen, open_,
         pending, on_cpu, ins, gone) in rows:
        th = threads[tid] = SchedThread(comm, pid, tid)
        th.switches, th.samples, th.leading, th.lead_start = (
            switches, samples, leading, lead_start)
        th.on_since, th.seen, th.open, th.pending = (
            on_since, seen, open_, pending)
        th.gone = gone
        th.on_cpu.frombytes(on_cpu)
        th.ins.frombytes(ins)
    return threads
