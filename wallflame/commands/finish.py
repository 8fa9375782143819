"""``wallflame finish``: build (or rebuild) a run directory from what ``raw/`` holds.

``collect`` finishes its run itself; this is for a run whose collect was killed (SIGKILL, an
out-of-memory kill, a lost machine) or that should be folded again by a newer wallflame.
``raw/capture.json`` is written when the run starts and updated as it goes; a run directory
without one (written by an older collect that was killed) is finished from its files alone,
and the capture description rebuilt from them says what is unknown.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from wallflame.collect.perf import data_chunks
from wallflame.collect.target import read_stat
from wallflame.errors import InputError
from wallflame.output import print_losses
from wallflame.rundir import (
    BACKENDS,
    CAPTURE,
    OWNERS_LOG,
    RAW,
    RECONSTRUCTED,
    SNAPSHOT_LOG,
    SNAPSHOTS_MAGIC,
    Capture,
    CollectOptions,
    OffCpu,
    SnapshotBackend,
    read_capture,
    write_capture,
)

__all__ = ["RECONSTRUCTED", "command", "raw_captures", "reconstruct", "still_collecting",
           "writers"]


def raw_captures(raw: Path) -> list[Path]:
    """The evidence files in ``raw/`` a run directory is built from."""
    found = [*data_chunks(raw, "perf"), *data_chunks(raw, "sched")]
    for name in (SNAPSHOT_LOG, OWNERS_LOG):
        if (raw / name).is_file() and (raw / name).stat().st_size > 0:
            found.append(raw / name)
    return found


def writers(raw: Path) -> list[tuple[int, str]]:
    """Processes still working in ``raw/`` (the tools run there): (pid, name)."""
    try:
        here = raw.resolve()
    except OSError:
        return []
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if Path(os.readlink(f"/proc/{entry}/cwd")) != here:
                continue
            with open(f"/proc/{entry}/comm", encoding="utf-8", errors="replace") as f:
                out.append((int(entry), f.read().strip()))
        except OSError:
            continue
    return sorted(out)


def still_collecting(cap: Capture) -> int | None:
    """The PID of the collect still writing this run, if it is alive."""
    if cap.running is None or not cap.running.pid:
        return None
    pid, ticks = cap.running.pid, cap.running.start_ticks
    st = read_stat(pid)
    return pid if st is not None and st.start_ticks == ticks and st.state not in "ZX" else None


def _snapshot_backend(log: Path) -> str:
    """The backend named by a snapshot log's first line (``# wallflame-snapshots 1 {...}``)."""
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            first = f.readline()
    except OSError:
        return ""
    _, _, rest = first.partition(SNAPSHOTS_MAGIC + " ")
    try:
        head = json.loads(rest) if rest else {}
    except ValueError:
        return ""
    return str(head.get("backend", "")) if isinstance(head, dict) else ""


def reconstruct(raw: Path) -> Capture:
    """A capture description for a ``raw/`` without one, from the files it holds."""
    sched = bool(data_chunks(raw, "sched"))
    snaps = (raw / SNAPSHOT_LOG).is_file()
    off_cpu = (OffCpu.BOTH if sched and snaps else OffCpu.SCHED if sched else
               OffCpu.PMP if snaps else OffCpu.NONE)
    options = CollectOptions(off_cpu=off_cpu)
    backend = _snapshot_backend(raw / SNAPSHOT_LOG) if snaps else ""
    if backend in BACKENDS:
        options.pmp_backend = SnapshotBackend(backend)
    return Capture(options=options, reconstructed=True, ended_by="collect did not finish",
                   warnings=[f"raw/{CAPTURE} was missing (the collect was killed before "
                             "writing it): finished from the files in raw/; the window, the "
                             "options and the collectors' statistics are unknown"])


@click.command("finish")
@click.argument("run_dir", type=click.Path())
def command(run_dir: str) -> None:
    """Build a run directory's folded files, meta.json and summary.json from its raw/ files.

    \b
      wallflame finish RUN_DIR

    For a run whose collect was killed, or to fold a run again with a newer wallflame.
    Exit codes: 0 done; 3 not a run directory, no raw captures in it, or its collect (or
    one of its tools) is still running.
    """
    out = Path(run_dir)
    raw = out / RAW
    if not out.is_dir():
        raise InputError(f"{run_dir}: not a directory", "name a run directory from collect")
    if not raw.is_dir():
        raise InputError(f"{run_dir}: no {RAW}/ folder, so nothing to finish",
                         "name a run directory written by wallflame collect")
    cap: Capture | None = None
    if (raw / CAPTURE).exists():
        cap = read_capture(raw)
        pid = still_collecting(cap)
        if pid is not None:
            raise InputError(f"{run_dir}: still being collected by PID {pid}",
                             f"wait for it to end, or stop it early with kill -INT {pid}")
    busy = writers(raw)
    if busy:
        names = ", ".join(f"{name} (PID {pid})" for pid, name in busy[:3])
        raise InputError(f"{run_dir}: {RAW}/ is still being written by {names}",
                         "wait a few seconds for the tools to end, then finish again")
    if not raw_captures(raw):
        raise InputError(f"{run_dir}: no raw captures in {RAW}/ (no perf data, no snapshot "
                         "log)", "nothing was collected; collect again")
    if cap is None:
        write_capture(raw, reconstruct(raw))
    from wallflame.assemble.assembly import assemble

    profile = assemble(out)
    print_losses(profile.meta)
    threads = len({key.tid for key in profile.stacks})
    click.echo(f"wallflame: finished {run_dir} ({profile.meta.window_ns / 1e9:.1f} s, "
               f"{threads} threads); `wallflame report {run_dir}` draws it", err=True)
