"""The run directory: its two records, with its file names and magic lines (``runfiles``).

``collect`` writes ``raw/`` and ``raw/capture.json`` (a ``Capture``); ``wallflame finish``
reads them and writes the rest, with ``meta.json`` (a ``RunMeta``); ``report``, ``diff`` and
``check`` read the result.  Each record is written and read by the code below, with one set of
defaults (the dataclasses'), so a reader never guesses differently from the writer.  Both
carry ``version`` (``FORMAT``, ``META_VERSION``); a file without one was written before the
field existed and reads as version 0, ``meta.json`` through the reader kept for each version
(``META_READERS``).  The layout (docs/design.md, "The run directory"):

    RUN/meta.json       target, commands, tool versions, window, rates, losses, pauses, warnings
    RUN/summary.json    the machine-readable result (``wallflame.report.summary``)
    RUN/oncpu.folded    annotated folded (``# wallflame-folded 1``), on-CPU stacks
    RUN/offcpu.folded   annotated folded, off-CPU stacks (wait class, lock, holder)
    RUN/memory.json     RSS and thread count over the window, glibc arena mappings
    RUN/slices.json     per-slice totals for ``check``'s noise (``wallflame.fold.slices``)
    RUN/raw/            the raw captures, never deleted (perf.data chunks, snapshot log, ...)
    RUN/report.html     written by ``wallflame report``

The names (of the files, the magic lines) live in ``wallflame.runfiles``, which a report of
a plain file imports without this module, and are re-exported here.  This module imports
nothing from the stages: ``collect`` writes through it and must not depend on the folders.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, TypeGuard, cast

from wallflame.errors import InputError
from wallflame.folded import meta_from_json, read_annotated
from wallflame.metaextra import SavedExtra
from wallflame.profile import Loss, Meta, Profile, merge_all
from wallflame.records import plain, record_from_json
from wallflame.runfiles import (
    BACKENDS,
    BLAME,
    CAPTURE,
    FORMAT,
    MEMORY,
    META,
    META_VERSION,
    OFF_CPU_MODES,
    OFFCPU,
    ONCPU,
    OWNERS_LOG,
    PERF_DATA,
    PERF_SCRIPT,
    PERF_STEMS,
    PROC_LINE,
    RAW,
    READ_LINE,
    RECONSTRUCTED,
    RELEASES_DATA,
    RELEASES_SCRIPT,
    REPORT,
    RUNNING,
    SCHED_BINS,
    SCHED_DATA,
    SCHED_SCRIPT,
    SLICES,
    SLICES_VERSION,
    SNAPSHOT_LINE,
    SNAPSHOT_LOG,
    SNAPSHOTS_MAGIC,
    SUMMARY,
    TARGET_STDERR,
    TARGET_STDOUT,
    WAKE_STEM,
    OffCpu,
    SnapshotBackend,
    is_run_dir,
    script_name,
)
from wallflame.textio import iter_lines, json_objects

if TYPE_CHECKING:  # imported where a path is made: pathlib is not needed to read a profile
    from pathlib import Path

@dataclass
class CollectOptions:
    """The settings a collect ran with, every one decided (``wallflame.collect.plan``: the
    rules, and what the user asked; ``docs/collecting.md``: what each costs).

    The defaults are those of a collect nobody asked anything of, and what a capture that
    lacks a field is read with.
    """

    duration_s: float | None = 10.0
    """Collection window (s); ``None`` for a launched command: until it exits."""
    off_cpu: OffCpu = OffCpu.BOTH
    """Where off-CPU evidence comes from (``OffCpu``)."""
    pmp_backend: SnapshotBackend = SnapshotBackend.LIBDW
    """The snapshot tool (``SnapshotBackend``)."""
    pmp_rate_hz: float | None = None
    """Snapshots per second (``None``: no snapshots)."""
    owner_rate_hz: float = 20.0
    """Rounds per second of the owner sampler (0: none)."""
    holder_stacks: bool = True
    """Whether the owner sampler stops the owners it finds for their stacks."""
    release_sites: bool = False
    """Whether the target's futex wakes were recorded (``collect.locks.futexwakes``)."""
    freq_hz: int = 499
    """perf's on-CPU sampling frequency."""
    call_graph: str = "fp"
    """perf's unwinding of on-CPU samples, ``fp`` or ``dwarf``."""
    sched_call_graph: str = "dwarf"
    """Unwinding of scheduler stacks."""
    max_pause_ms: float = 50.0
    """A snapshot pausing the target longer than this halves the snapshot rate."""
    max_data_mb_per_s: float | None = None
    """The data-rate budget the scheduler stacks were sampled within (``collect.budget``);
    ``None``: none."""
    sched_stack_hz: float | None = None
    """Scheduler call chains per second per thread; 0: every switch; ``None``: no scheduler
    recording."""
    sched_stack_period: int | None = None
    """The scheduler recorded on every CPU: one switch in this many per CPU carries a stack
    (1: every switch); ``None``: recorded per thread."""
    inline_frames: bool | None = None
    """Inlined frames in perf's stacks (resolved by ``addr2line``); ``None`` in a capture that
    does not say (read with them)."""

    @property
    def inlined(self) -> bool:
        """Whether perf resolves inlined frames (``inline_frames``; a capture that does not
        say was read with them)."""
        return self.inline_frames is not False

    @property
    def snapshots(self) -> bool:
        return self.off_cpu in (OffCpu.PMP, OffCpu.BOTH)

    @property
    def sched(self) -> bool:
        return self.off_cpu in (OffCpu.SCHED, OffCpu.BOTH)

    @property
    def sampled_stacks(self) -> bool:
        """Whether only some scheduler switches carry a stack (a rate or a period)."""
        return self.sched and bool(self.sched_stack_hz or (self.sched_stack_period or 1) > 1)


@dataclass
class Window:
    """The collection window, wall-clock nanoseconds (0: not known), and its bounds on
    perf's clock when perf recorded with ``-k mono`` (``perf_clock``)."""

    start_ns: int = 0
    """When the window opened (wall clock, ns)."""
    end_ns: int = 0
    """When the window closed (wall clock, ns)."""
    window_ns: int = 0
    """The window's length (ns)."""
    mono_start_ns: int = 0
    """When the window opened on ``CLOCK_MONOTONIC`` (ns)."""
    mono_end_ns: int = 0
    """When the window closed on ``CLOCK_MONOTONIC`` (ns)."""
    perf_clock: str = ""
    """perf's clock: ``mono`` (``-k mono``), or empty for perf's own."""

    def on_perf_clock(self) -> tuple[int, int] | None:
        """The window's bounds in perf's timestamps (the collect's ``CLOCK_MONOTONIC``
        bounds); ``None`` for a run recorded before perf used that clock."""
        if self.perf_clock == "mono" and self.mono_end_ns > self.mono_start_ns:
            return self.mono_start_ns, self.mono_end_ns
        return None


@dataclass
class Running:
    """Who is writing a run still being collected (``capture.json``'s ``running``)."""

    pid: int = 0
    start_ticks: int = 0
    updated_ns: int = 0


@dataclass
class SnapshotStats:
    """What the snapshot loop did (``capture.json``'s ``pmp``)."""

    backend: str = ""
    """The snapshot tool used."""
    consistent: bool = False
    """Whether each snapshot stopped all threads at once."""
    snapshots: int = 0
    """Snapshots taken."""
    failed: int = 0
    """Snapshots that failed."""
    errors: list[str] = field(default_factory=list)
    """The first errors of the failed snapshots."""
    over_budget: int = 0
    """Snapshots whose pause went over ``max_pause_ms``."""
    resumed: int = 0
    """Snapshots after which the target had to be set running again."""
    rate_hz: float = 0.0
    """The snapshot rate asked for."""
    final_rate_hz: float = 0.0
    """The snapshot rate at the end."""
    attach_ms: float = 0.0
    """The backend's start before the window (ms)."""
    pause: dict[str, Any] | None = None
    """The target's pauses: count, median, max, total (ms)."""
    pause_measure: str = ""
    """What the pause figures measure."""


@dataclass
class Capture:
    """``raw/capture.json``: what ``collect`` did, everything ``finish`` needs besides the
    captures themselves.  ``target``, ``commands``, ``tools``, ``perf``, ``memory``,
    ``launched``, ``owners`` and ``postprocess`` are the collectors' own reports, kept as
    they wrote them and copied to ``meta.json``."""

    options: CollectOptions = field(default_factory=CollectOptions)
    target: dict[str, Any] = field(default_factory=dict)
    commands: dict[str, Any] = field(default_factory=dict)
    tools: dict[str, str] = field(default_factory=dict)
    window: Window = field(default_factory=Window)
    pmp: SnapshotStats | None = None
    perf: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    ended_by: str = ""
    launched: dict[str, Any] = field(default_factory=dict)
    owners: dict[str, Any] = field(default_factory=dict)
    postprocess: dict[str, Any] = field(default_factory=dict)
    #: Every decision of the collect (``wallflame.collect.plan.CollectPlan.to_json``).
    plan: dict[str, Any] = field(default_factory=dict)
    #: How busy the rest of the machine was over the window (``collect.machine``).
    machine: dict[str, Any] = field(default_factory=dict)
    # the target's threads when the window opened and closed (``collect.threads.listing``)
    threads: dict[str, Any] = field(default_factory=dict)
    #: Multi-process targets: what was named (``collect.procs.Selection``: pids, trees,
    #: cgroups) and every process covered (``collect.procs.Seen``: pid, start time, name as
    #: ps shows it, how it joined, whether it exited).
    selection: dict[str, Any] = field(default_factory=dict)
    processes: list[dict[str, Any]] = field(default_factory=list)
    #: Set in a capture written while the run goes on.
    running: Running | None = None
    #: Set in a capture ``finish`` made up from the files in ``raw/``: only ``off_cpu`` and
    #: ``pmp_backend`` of its options are known.
    reconstructed: bool = False
    version: int = FORMAT
    #: What reading the file had to replace with a default (not written).
    problems: list[str] = field(default_factory=list, compare=False)

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def perf_recording(self, stem: str) -> dict[str, Any]:
        """perf's report on one recording (``perf``, ``sched``): chunks, lost chunks."""
        rec = self.perf.get(stem)
        return rec if isinstance(rec, dict) else {}

    def stopped_the_target(self) -> bool:
        """Whether the collect stopped the target's threads itself (snapshots, owner
        probes): their ptrace stops are wallflame's, not the target's waits."""
        pause = self.owners.get("pause")
        return bool(self.pmp and self.pmp.snapshots) or bool(
            isinstance(pause, dict) and pause.get("stops"))

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = plain(self)
        del d["problems"]
        d["pmp"] = d["pmp"] or {}  # no snapshots: an empty report, as collect always wrote
        if self.running is None:
            del d[RUNNING]
        if not self.reconstructed:
            del d[RECONSTRUCTED]
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any], name: str = CAPTURE) -> Capture:
        problems: list[str] = []
        cap = record_from_json(cls, data, name, problems)
        cap.problems = problems
        return cap


class SavedLoss(TypedDict):
    """A loss as ``meta.json`` keeps it (``wallflame.profile.Loss``)."""

    count: int
    """How many units of input could not be used."""
    first_line: int
    """The first input line concerned (0: none)."""
    detail: str
    """What went wrong, in words."""


class SavedProfile(TypedDict, total=False):
    """``meta.json`` ``profile``: the profile's metadata (``wallflame.profile.Meta``)."""

    unit: str
    """``ns`` (thread time) or ``samples``."""
    sources: list[dict[str, Any]]
    """One entry per input folded: path, format and what its folder adds."""
    window_ns: int
    """The collection window's length (0: unknown)."""
    rates: dict[str, float]
    """Sampling rates by collector (``perf_hz``, ``pmp_hz``)."""
    samples: dict[str, int]
    """Evidence counts by kind (``perf``, ``snapshots``, ``sched_switch``...)."""
    losses: dict[str, SavedLoss]
    """Input that could not be used, by kind."""
    warnings: list[str]
    """Warnings, in order of first appearance."""
    threads: dict[str, str]
    """Thread names by tid."""
    extra: SavedExtra
    """What the stages recorded besides (``wallflame.metaextra.SavedExtra``)."""


@dataclass(frozen=True)
class RunMeta:
    """``RUN/meta.json``: the run's facts (from its capture) and the profile's metadata
    (rates, losses, warnings) as ``finish`` wrote them; frozen.  Its JSON Schema is
    ``wallflame/schema/meta-1.schema.json`` (``wallflame.metaschema``); its versions and
    their readers are ``META_READERS``."""

    profile: SavedProfile = field(default_factory=SavedProfile)
    """The profile's metadata: unit, sources, rates, samples, losses, warnings, extra."""
    target: dict[str, Any] = field(default_factory=dict)
    """The target process as collect found it: pid, comm, exe, cmdline, start time."""
    launched: dict[str, Any] = field(default_factory=dict)
    """A launched command: its argv, pid and exit status (empty when attached)."""
    commands: dict[str, Any] = field(default_factory=dict)
    """The exact commands collect ran, by collector (``perf_record``, ``pmp``...)."""
    tools: dict[str, str] = field(default_factory=dict)
    """The version of each external tool used."""
    window: Window = field(default_factory=Window)
    """The collection window (wall clock and perf's clock)."""
    options: CollectOptions = field(default_factory=CollectOptions)
    """The settings the collect ran with."""
    rates: dict[str, float] = field(default_factory=dict)
    """Sampling rates by collector (the profile's ``rates``)."""
    losses: dict[str, int] = field(default_factory=dict)
    """Input that could not be used: count by kind (the profile's ``losses``)."""
    pause: dict[str, Any] | None = None
    """The snapshot loop's pauses of the target (``pmp.pause``); null without snapshots."""
    pmp: SnapshotStats | None = None
    """What the snapshot loop did; ``{}`` without snapshots."""
    perf: dict[str, Any] = field(default_factory=dict)
    """perf's report on each recording: chunks, lost chunks, exit status."""
    warnings: list[str] = field(default_factory=list)
    """The run's warnings (the profile's ``warnings``)."""
    ended_by: str = ""
    """How the collect ended: ``duration``, ``target exited``, ``interrupted``..."""
    owners: dict[str, Any] = field(default_factory=dict)
    """The lock-owner sampler's report: rate, rounds, pauses, probes."""
    postprocess: dict[str, Any] = field(default_factory=dict)
    """What folding cost and decided: budget, cost, CPU of the samplers."""
    machine: dict[str, Any] = field(default_factory=dict)
    """How busy the rest of the machine was over the window (``collect.machine``)."""
    plan: dict[str, Any] = field(default_factory=dict)
    """Every decision of the collect (``collect.plan.CollectPlan.to_json``)."""
    version: int = META_VERSION
    """The version of this record (``META_VERSION``); a file without it is version 0."""

    @classmethod
    def of(cls, cap: Capture, meta: Meta, postprocess: dict[str, Any]) -> RunMeta:
        return cls(profile=cast(SavedProfile, meta.to_json()), target=cap.target,
                   launched=cap.launched,
                   commands=cap.commands, tools=cap.tools, window=cap.window,
                   options=cap.options, rates=meta.rates,
                   losses={k: v.count for k, v in sorted(meta.losses.items())},
                   pause=cap.pmp.pause if cap.pmp else None, pmp=cap.pmp, perf=cap.perf,
                   warnings=meta.warnings, ended_by=cap.ended_by, owners=cap.owners,
                   postprocess=postprocess, machine=cap.machine, plan=cap.plan)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = plain(self)
        d["pmp"] = d["pmp"] or {}
        return d

    @classmethod
    def from_json(cls, data: dict[str, Any], name: str = META) -> RunMeta:
        return record_from_json(cls, data, name, [])

    def facts(self) -> dict[str, Any]:
        """The run-level facts a report shows (target, exact commands, tool versions):
        ``load_run_dir`` keeps only the profile's metadata."""
        return {"target": self.target, "commands": self.commands, "tools": self.tools,
                "options": asdict(self.options), "launched": self.launched,
                "ended_by": self.ended_by}


def read_capture(raw: Path) -> Capture:
    """``raw/capture.json`` (one-line error when it is unreadable or from a newer
    wallflame)."""
    data = _read_dict(raw / CAPTURE, f"move it aside and run wallflame finish {raw.parent} "
                                     "again")
    cap = Capture.from_json(data, f"raw/{CAPTURE}")
    _check_version(raw / CAPTURE, cap.version)
    return cap


def write_capture(raw: Path, cap: Capture, compact: bool = False) -> None:
    """``raw/capture.json``, replaced atomically: a reader (or a finish after a SIGKILL)
    never sees half a file.  ``compact``: on one line, by the JSON module's C encoder (which
    an indented dump does not use: 0.4 ms against 2.4 ms for a 51 KB capture), for the
    updates made four times a second while collecting."""
    tmp = raw / f".{CAPTURE}.tmp"
    tmp.write_text(json.dumps(cap.to_json(), sort_keys=True, indent=None if compact else 1)
                   + "\n", encoding="utf-8")
    os.replace(tmp, raw / CAPTURE)


def read_meta(run_dir: str | os.PathLike[str]) -> RunMeta:
    """``RUN/meta.json`` through the reader of its version (``META_READERS``); one-line error
    when it is unreadable, or of a version this wallflame does not know."""
    from pathlib import Path

    path = Path(run_dir) / META
    data = _read_dict(path, "re-run wallflame finish on the run directory")
    version = data.get("version", 0)
    reader = META_READERS.get(version) if type(version) is int else None
    if reader is None:
        newer = type(version) is int and version > META_VERSION
        raise InputError(f"{path}: format version {version!r}, this wallflame reads up to "
                         f"{META_VERSION}", "upgrade wallflame" if newer else
                         "re-run wallflame finish on the run directory")
    return reader(data, str(path))


def _meta_v0(data: dict[str, Any], where: str) -> RunMeta:
    """A ``meta.json`` without ``version``: version 1's keys without ``machine``, ``plan``
    and ``version``, each with version 1's meaning, so version 1's record reads it (the keys
    it lacks at their defaults)."""
    return dataclasses.replace(RunMeta.from_json(data, where), version=0)


def _meta_v1(data: dict[str, Any], where: str) -> RunMeta:
    return RunMeta.from_json(data, where)


#: The reader of each ``meta.json`` version: a version whose keys changed keeps its reader,
#: which maps it to the current record.
META_READERS: dict[int, Callable[[dict[str, Any], str], RunMeta]] = {0: _meta_v0, 1: _meta_v1}


def meta_json(meta: RunMeta) -> str:
    return json.dumps(meta.to_json(), indent=1, sort_keys=True) + "\n"


def _read_dict(path: Path, fix: str) -> dict[str, Any]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a JSON object", fix)
    return data


def _check_version(path: Path, version: int) -> None:
    """Refuse a capture written by a newer wallflame, in one line (exit 3)."""
    if version > FORMAT:
        raise InputError(f"{path}: format version {version}, this wallflame reads up to "
                         f"{FORMAT}", "upgrade wallflame")


def read_json(path: str | os.PathLike[str]) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.loads(f.read())
    except FileNotFoundError:
        raise InputError(f"{path}: missing", "is this a complete run directory?") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise InputError(f"{path}: unreadable JSON: {e}", "re-run wallflame collect") from None


def target_json(path: Path, key: str) -> Iterator[dict[str, Any]]:
    """The JSON objects that a launched target printed one a line on its stdout
    (``raw/target.stdout``, at ``path``) and that mention ``key`` (``textio.json_objects``), in
    order: the samples' work counters (``fold.target_output``) and progress lines
    (``wallflame.progress``).  A missing file has none."""
    if path.exists():
        yield from json_objects((line for _, line in iter_lines(str(path))), key)


def is_number(value: Any) -> TypeGuard[int | float]:
    """A JSON number (``true`` and ``false`` are not)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _read_folded(path: str) -> Profile:
    """One of the run's annotated folded files (the codec of ``wallflame.folded``)."""
    profile = Profile()
    read_annotated(iter_lines(path), profile)
    profile.meta.sources.append({"path": path, "format": "wallflame"})
    return profile


def load_run_dir(path: str | os.PathLike[str]) -> Profile:
    p = os.fspath(path)
    parts = [_read_folded(os.path.join(p, name))
             for name in (ONCPU, OFFCPU) if os.path.exists(os.path.join(p, name))]
    profile = merge_all(parts) if parts else Profile()
    meta = read_meta(p)
    metas = [part.meta for part in parts]
    if meta.profile:
        saved = meta_from_json(meta.profile)
        profile.meta.window_ns = saved.window_ns or profile.meta.window_ns
        profile.meta.merge(saved)
        metas.append(saved)
    _count_once(profile.meta, metas)
    if os.path.exists(os.path.join(p, MEMORY)):
        profile.meta.extra["memory"] = read_json(os.path.join(p, MEMORY))
    profile.meta.extra.setdefault("run_dir", os.path.normpath(p))
    if meta.window.start_ns:  # when it was collected (the gate: were two sides interleaved?)
        profile.meta.extra.setdefault("window_start_ns", meta.window.start_ns)
    if meta.machine:  # and under which load (the gate: were they collected alike?)
        profile.meta.extra.setdefault("machine", meta.machine)
    return profile


def _count_once(meta: Meta, copies: list[Meta]) -> None:
    """Both folded files and meta.json carry the run's metadata: a count seen in several
    copies is the same count (the largest copy), not their sum."""
    for attr in ("samples", "losses"):
        keys = {k for m in copies for k in getattr(m, attr)}
        merged = getattr(meta, attr)
        for k in keys:
            best = max((getattr(m, attr)[k] for m in copies if k in getattr(m, attr)),
                       key=lambda v: v.count if isinstance(v, Loss) else v)
            merged[k] = dataclasses.replace(best) if isinstance(best, Loss) else best


__all__ = [
    "BACKENDS",
    "BLAME",
    "CAPTURE",
    "FORMAT",
    "MEMORY",
    "META",
    "META_READERS",
    "META_VERSION",
    "OFFCPU",
    "OFF_CPU_MODES",
    "ONCPU",
    "OWNERS_LOG",
    "PERF_DATA",
    "PERF_SCRIPT",
    "PERF_STEMS",
    "PROC_LINE",
    "RAW",
    "READ_LINE",
    "RECONSTRUCTED",
    "RELEASES_DATA",
    "RELEASES_SCRIPT",
    "REPORT",
    "RUNNING",
    "SCHED_BINS",
    "SCHED_DATA",
    "SCHED_SCRIPT",
    "SLICES",
    "SLICES_VERSION",
    "SNAPSHOTS_MAGIC",
    "SNAPSHOT_LINE",
    "SNAPSHOT_LOG",
    "SUMMARY",
    "TARGET_STDERR",
    "TARGET_STDOUT",
    "WAKE_STEM",
    "Capture",
    "CollectOptions",
    "OffCpu",
    "RunMeta",
    "Running",
    "SavedLoss",
    "SavedProfile",
    "SnapshotBackend",
    "SnapshotStats",
    "Window",
    "is_number",
    "is_run_dir",
    "load_run_dir",
    "plain",
    "read_capture",
    "read_json",
    "read_meta",
    "script_name",
    "target_json",
    "write_capture",
]
