"""Where a lock was released: the thread that woke a lock's waiter, and its user stack.

A contended glibc unlock ends in ``futex(FUTEX_WAKE, &lock)`` (``__lll_lock_wake`` for a
mutex, ``futex_wake`` for an rwlock): the thread that makes that call is the one releasing the
lock, and the waiter it wakes is the one whose wait ends.  Its own perf recording (kept apart
from the on-CPU and scheduler recordings) takes ``syscalls:sys_enter_futex`` with a kernel
filter on the wake operations, in the target's threads only (``-p``: the waker is the running
task), with DWARF call chains (glibc has no frame pointers: with them the function that called
``pthread_mutex_unlock`` is lost).  The futex address names the lock exactly, so no timing
match with the waits is needed; ``wallflame.locks.releasesites`` keeps the wakes of the locks
that were observed and finds the frame that released each (``MutexQueue::pop`` for
``pop -> ~lock_guard -> pthread_mutex_unlock -> __lll_lock_wake``).

Only contended releases make the call (an uncontended unlock is one atomic instruction), so
the cost grows with the number of wakes, not of unlocks; ``--release-sites`` turns it on
(its cost measured by benchmarks/lab/locks_overhead.py).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO

from wallflame.collect.perf import KALLSYMS
from wallflame.collect.safety import spawn, stop_tool
from wallflame.rundir import RELEASES_DATA, RELEASES_SCRIPT

EVENT = "syscalls:sys_enter_futex"
#: FUTEX_WAKE, private (129) or shared (1).
FILTER = "op == 129 || op == 1"
#: User stack bytes copied per wake: the unlock path and a few callers.
STACK_BYTES = 4096
DATA = RELEASES_DATA
SCRIPT = RELEASES_SCRIPT
FIELDS = "comm,tid,time,event,trace,ip,sym"


def record_command(perf: str, pid: int, out: Path) -> list[str]:
    return [perf, "record", "-q", "-e", EVENT, "--filter", FILTER,
            "--call-graph", f"dwarf,{STACK_BYTES}", "-m", "1M", "-p", str(pid), "-o", str(out)]


def script_command(perf: str, data: Path) -> list[str]:
    # --no-inline: one frame per function address (the inline expansion is slow and repeats
    # the caller around inlined unlock wrappers).
    return [perf, "script", "-i", str(data), "--show-lost-events", "--no-inline", "-F", FIELDS]


class ReleaseRecorder:
    """``perf record`` of the target's futex wakes for the collection window."""

    def __init__(self, perf: str, pid: int, raw: Path) -> None:
        self.raw = raw
        self.command = record_command(perf, pid, raw / DATA)
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr: IO[bytes] | None = None
        self.returncode: int | None = None

    def start(self) -> None:
        self.stderr = open(self.raw / "releases-record.stderr", "wb")  # noqa: SIM115
        self.proc = spawn(self.command, signal.SIGINT, kallsyms=self.raw / KALLSYMS,
                          stdout=subprocess.DEVNULL, stderr=self.stderr, cwd=str(self.raw))

    def stop(self) -> None:
        if self.proc is not None:
            self.returncode = stop_tool(self.proc, grace_s=10.0)
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None


def write_script(perf: str, raw: Path) -> Path | None:
    """``perf script`` of ``raw/releases.data`` into ``raw/releases.script`` (None: no data)."""
    from wallflame.collect.safety import tool_env

    data = raw / DATA
    if not data.exists():
        return None
    out = raw / SCRIPT
    with open(out, "wb") as f, open(raw / "releases-script.stderr", "wb") as err:
        try:
            subprocess.run(script_command(perf, data), stdout=f, stderr=err,
                           stdin=subprocess.DEVNULL, env=tool_env(), timeout=600, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
    return out


def start(perf: str, pid: int, raw: Path, commands: dict[str, object],
          watch: Callable[[int], None]) -> ReleaseRecorder:
    """Start the recording (the guard watches it: ``watch(tool_pid)``)."""
    rec = ReleaseRecorder(perf, pid, raw)
    commands["releases_record"] = rec.command
    commands["releases_script"] = script_command(perf, Path(f"raw/{DATA}"))
    rec.start()
    if rec.proc is not None:
        watch(rec.proc.pid)
    return rec


def finish(rec: ReleaseRecorder, warn: Callable[[str], None]) -> dict[str, object]:
    """Stop the recording; what ``capture.json`` keeps of it."""
    rec.stop()
    text = ""
    with contextlib.suppress(OSError):
        text = (rec.raw / "releases-record.stderr").read_text(errors="replace").strip()
    if rec.returncode not in (0, None, -signal.SIGINT, 130) or not (rec.raw / DATA).exists():
        warn("the release-site recording failed (perf record -e syscalls:sys_enter_futex): "
             + (text.splitlines()[-1][:200] if text else f"exit {rec.returncode}"))
    return {"returncode": rec.returncode, "event": EVENT, "filter": FILTER,
            "stack_bytes": STACK_BYTES}
