"""The keys of a profile's ``Meta.extra``, each with its type: those ``wallflame finish``
saves in ``meta.json`` (``profile.extra``, and in the folded files' ``#meta`` line), and
those the stages pass on in memory only.

``SavedExtra`` is part of ``meta.json``'s record (``wallflame.rundir.RunMeta``) and of its
JSON Schema (``wallflame/schema/meta-1.schema.json``, made by ``wallflame.metaschema``).
``PassedExtra`` holds what a reader adds after loading (the run directory's own facts, copies
of other files) and what a fold hands to ``finish``, which removes it before saving.  A key
that ``summary.json`` shows says where.  Every key is optional: a stage sets its keys only
when it has something to say, and a reader treats a missing key as "not known".  A value
read from a file is not checked against its type: readers test what they take
(``isinstance``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict, cast


class SavedExtra(TypedDict, total=False):
    """The keys of ``Meta.extra`` that ``finish`` saves in ``meta.json`` ``profile.extra``."""

    attach_ms: float
    """The snapshot backend's start before the window (ms): module index, CFI, first unwind."""
    blocked_from_schedstat: list[int]
    """Threads whose blocked time came from the kernel's counters (``wallflame.window``)."""
    collect: dict[str, Any]
    """How the collect ran: ``target``, ``ended_by``, ``off_cpu`` (``wallflame.assemble``)."""
    lock_evidence: dict[str, dict[str, Any]]
    """Per lock: observations, kind, confirmed holders, holders not caught (``fold.locks``);
    summary.json ``locks``."""
    lock_min_observations: int
    """Observations below which a lock's shares are shown as counts; summary.json ``locks``."""
    lock_releases: dict[str, dict[str, Any]]
    """Per lock: release count and top release sites with a stack; summary.json ``locks``."""
    missing_frames: dict[str, str]
    """Per folded file (``oncpu``, ``offcpu``): why its stacks may lack callers."""
    offcpu_source: str
    """Where off-CPU time came from: ``sched`` (scheduler events) or ``pmp`` (snapshots)."""
    notes: list[str]
    """How the evidence was estimated where it could not be read directly: for the quality
    panel; unlike the warnings, nothing to act on (``Meta.note``)."""
    oncpu_samples_ns: dict[str, int]
    """Per thread (tid): on-CPU ns the samples alone gave, before the exact totals."""
    oncpu_source: str
    """Where the on-CPU totals came from: ``switches`` or ``schedstat``."""
    outside_window: dict[str, int]
    """Evidence left out for falling outside the window: samples and their ns."""
    pause: dict[str, Any] | None
    """The snapshots' pauses of the target: count, median, max, total (ms), backend;
    summary.json ``pause``."""
    perf_quality: dict[str, int]
    """perf's on-CPU samples: total, shallow, mostly unknown, at the maximum depth."""
    perf_records: dict[str, int]
    """perf's records by event name, as read from its text."""
    pmp_asleep_on_runqueue: int
    """Snapshot records asleep in /proc but found on the run queue."""
    pmp_consistent: bool
    """Whether each snapshot stopped all threads at once (gdb non-stop)."""
    pmp_ran_before_stop: int
    """Snapshot records of threads that ran again before they were stopped for the stack."""
    pmp_running_ns: dict[str, int]
    """Per thread (tid): ns the snapshots saw it running (for the coverage check)."""
    pmp_state_mismatch: int
    """Snapshot records blocked in /proc with no wait on the stack."""
    pmp_window: dict[str, int]
    """The first and last snapshot's time (``first_ns``, ``last_ns``)."""
    processes: list[dict[str, Any]]
    """Every process of a multi-process target (``collect.procs.Seen`` records);
    summary.json ``processes``."""
    runqueue_ns: dict[str, int]
    """Per thread (tid): ns runnable, waiting for a CPU; summary.json ``runnable_s``."""
    runqueue_source: str
    """Where ``runqueue_ns`` came from when not from the scheduler: ``schedstat``."""
    sched: dict[str, Any]
    """What folding the scheduler's events found: switches, lags, sampling, split."""
    sched_threads: dict[str, dict[str, Any]]
    """Per thread (tid): exact on-CPU, runnable and blocked ns from the switches, and the
    part of the window it lived; summary.json ``alive_s``."""
    schedstat_alive_ns: dict[str, int]
    """Per thread (tid): the part of the window it lived, from the kernel's counters;
    summary.json ``alive_s``."""
    schedstat_threads: dict[str, dict[str, Any]]
    """Per thread (tid): on-CPU ns from the kernel's counters (``on_ns``)."""
    snapshot_sources: list[dict[str, Any]]
    """Per snapshot log: lines, snapshots, first snapshot's time."""
    thread_pids: dict[str, int]
    """Per thread (tid): its process (pid), in a multi-process target; summary.json ``pid``."""
    tracer_stops: dict[str, Any]
    """The time the collect's own tracer held threads stopped: cause, total, per thread;
    summary.json ``tracer_stops``, ``stopped_s``."""
    whole_window_threads: list[int]
    """Threads that did not run or switch in the window, counted blocked throughout."""
    work: dict[str, Any]
    """A launched command's work counter (``count``, ``unit``); summary.json ``work``."""


class PassedExtra(TypedDict, total=False):
    """The keys of ``Meta.extra`` that live in memory only: never in ``meta.json``."""

    commands: dict[str, Any]
    """The exact commands run (a report's copy of ``meta.json`` ``commands``)."""
    diff_before: dict[str, int]
    """A two-column folded file's first column: folded stack -> count."""
    ended_by: str
    """How the collect ended (a report's copy of ``meta.json`` ``ended_by``)."""
    folded_sources: list[dict[str, Any]]
    """Per plain folded input: its flavour (``bcc``, ``diff``)."""
    launched: dict[str, Any]
    """The launched command (a report's copy of ``meta.json`` ``launched``)."""
    machine: dict[str, Any]
    """The machine's load over the window (a reader's copy of ``meta.json`` ``machine``);
    summary.json ``machine``."""
    measured_stops: dict[str, list[int]]
    """A snapshot fold's own timing of its stops; ``finish`` removes it before saving."""
    memory: Any
    """The run directory's ``memory.json``, as read."""
    options: dict[str, Any]
    """The collect's options (a report's copy of ``meta.json`` ``options``)."""
    range: dict[str, float]
    """A profile cut to a time range: ``from_s``, ``to_s``, ``window_s``."""
    run_dir: str
    """The run directory the profile was loaded from."""
    stop_marks: list[Any]
    """Where the snapshots found threads blocked; ``finish`` removes it before saving."""
    target: dict[str, Any]
    """The target's identity (a report's copy of ``meta.json`` ``target``)."""
    tools: dict[str, str]
    """Tool versions (a report's copy of ``meta.json`` ``tools``)."""
    window_start_ns: int
    """When the window opened (a reader's copy of ``meta.json`` ``window.start_ns``)."""


class Extra(SavedExtra, PassedExtra, total=False):
    """``Meta.extra``: every key a stage sets, saved or passed in memory."""


def add_missing(extra: Extra, more: Mapping[str, Any]) -> None:
    """Set each key of ``more`` that ``extra`` lacks (the first value of a key wins), for
    keys known only at run time: another profile's metadata, a run directory's facts."""
    plain = cast("dict[str, Any]", extra)
    for key, value in more.items():
        plain.setdefault(key, value)


__all__ = ["Extra", "PassedExtra", "SavedExtra", "add_missing"]
