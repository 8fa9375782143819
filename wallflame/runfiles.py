"""The run directory's names: its files, the magic lines of its snapshot log, and how one
is recognised.

Names only, and ``is_run_dir``: what ``wallflame report`` of a plain file needs to tell it
from a run directory, without ``wallflame.rundir``'s records (six dataclasses, 4 ms of every
report's start-up).  ``wallflame.rundir`` re-exports every name here.
"""

from __future__ import annotations

import os
from enum import StrEnum

#: The version of ``capture.json`` this wallflame writes.
FORMAT = 1
#: The version of ``meta.json`` this wallflame writes (``rundir.RunMeta``; docs/formats.md,
#: "The run's record": a new key keeps it, a changed or removed key raises it).
META_VERSION = 1

# The finished run directory.
META = "meta.json"
SUMMARY = "summary.json"
ONCPU = "oncpu.folded"
OFFCPU = "offcpu.folded"
MEMORY = "memory.json"
SLICES = "slices.json"
#: The critical path of every wait (``wallflame.critpath``): folded stacks, ns of waiting.
BLAME = "blame.folded"
#: The form of ``slices.json`` (``fold.slices`` writes it, ``report.gate.slicefile`` reads it).
SLICES_VERSION = 1
REPORT = "report.html"
RAW = "raw"

# Inside raw/.
CAPTURE = "capture.json"
SNAPSHOT_LOG = "snapshots.log"
OWNERS_LOG = "owners.log"
TARGET_STDOUT = "target.stdout"
TARGET_STDERR = "target.stderr"
RELEASES_DATA = "releases.data"
RELEASES_SCRIPT = "releases.script"
#: Blocked time per wait class in bins of the perf clock (the scheduler's text is not kept).
SCHED_BINS = "sched.bins.json"
#: The perf recordings, by stem: ``STEM.data`` (chunks ``STEM.data.<time>``), their text
#: ``STEM.script``.
PERF_STEMS = ("perf", "sched")
#: The on-CPU recording and its text (kept: ``fold.slices`` and ``timebuild`` read it again).
PERF_DATA = "perf.data"
PERF_SCRIPT = "perf.script"
#: The scheduler's recording and its text (the text is not kept by a collect; an older run
#: may have it).
SCHED_DATA = "sched.data"
SCHED_SCRIPT = "sched.script"
#: The wake-up recording's stem (``wake.data``; its text is not kept either).
WAKE_STEM = "wake"

# The magic lines of the snapshot log (``collect.snapshots`` writes them, ``fold`` reads them).
#: The first line of a snapshot log, followed by a JSON header.
SNAPSHOTS_MAGIC = "# wallflame-snapshots 1"
#: A thread's /proc record in a snapshot log (kernel state, wchan, lock and owner), as JSON.
PROC_LINE = "# wallflame-proc "
#: A snapshot's own record in the log (its time and pause), as JSON.
SNAPSHOT_LINE = "# wallflame-snapshot "
#: One thread's /proc record read alone, at a moment of its own between two snapshots, as
#: JSON (``PROC_LINE``'s fields and ``t_ns``): what each thread was doing, unmoved by the
#: reading of the others (``collect.snapshots.SnapshotLoop``).
READ_LINE = "# wallflame-read "

#: In a ``capture.json`` written while the run goes on: who writes it (``pid``,
#: ``start_ticks``) and when it last did (``updated_ns``).  The final one has no such key.
RUNNING = "running"
#: In a ``capture.json`` that ``wallflame finish`` made up from the files in ``raw/``.
RECONSTRUCTED = "reconstructed"

class OffCpu(StrEnum):
    """Where off-CPU evidence comes from (``--off-cpu``)."""

    PMP = "pmp"  # stack snapshots
    SCHED = "sched"  # scheduler events
    BOTH = "both"  # scheduler events for the times, snapshots for the locks
    NONE = "none"


class SnapshotBackend(StrEnum):
    """The tool that takes stack snapshots (``--pmp-backend``)."""

    LIBDW = "libdw"
    EU_STACK = "eu-stack"
    GDB = "gdb"
    GDB_BATCH = "gdb-batch"


OFF_CPU_MODES = tuple(m.value for m in OffCpu)
BACKENDS = tuple(b.value for b in SnapshotBackend)


def script_name(stem: str) -> str:
    """The ``perf script`` text of a recording (``perf.script``, ``sched.script``)."""
    return f"{stem}.script"


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    return os.path.isdir(path) and os.path.exists(os.path.join(path, META))


__all__ = [
    "BACKENDS",
    "CAPTURE",
    "FORMAT",
    "IDENTITY_FIELDS",
    "MEMORY",
    "META",
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
    "OffCpu",
    "SnapshotBackend",
    "is_run_dir",
    "script_name",
]

#: The fields of ``machine.identity`` in meta.json (``collect.machine.identity``): what makes
#: two runs' figures comparable; ``wallflame check`` compares them (``same_machine``).
IDENTITY_FIELDS = ("cpu_model", "cpus", "kernel", "governor", "vm")
