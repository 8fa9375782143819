"""Launch mode: the command to profile, started by wallflame (no shell)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from wallflame.errors import TargetError
from wallflame.rundir import TARGET_STDERR, TARGET_STDOUT


class Launched:
    """A launched command whose output goes straight into ``raw/target.stdout`` and
    ``raw/target.stderr`` (a sample's work counter is read from there) and is followed from
    those files onto wallflame's own output.  The command never writes into a pipe that
    wallflame holds: if wallflame is killed, the command carries on and its output is still
    saved (under ``tee`` its next write would fail with SIGPIPE)."""

    def __init__(self, command: Sequence[str], raw: Path) -> None:
        paths = (raw / TARGET_STDOUT, raw / TARGET_STDERR)
        with open(paths[0], "wb") as out, open(paths[1], "wb") as err:
            try:
                self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                    list(command), stdout=out, stderr=err)
            except OSError as e:
                raise TargetError(f"cannot run {command[0]!r}: {e.strerror}",
                                  "check the command and its path") from None
        self.pid = self.proc.pid
        self.done = threading.Event()
        self.followers = [
            threading.Thread(target=_follow, args=(path, dst, self.done), daemon=True)
            for path, dst in zip(paths, (sys.stdout, sys.stderr), strict=True)]
        for t in self.followers:
            t.start()

    def poll(self) -> int | None:
        return self.proc.poll()

    def join(self) -> None:
        self.done.set()
        for t in self.followers:
            t.join(5)


def _follow(path: Path, dst: IO[str], done: threading.Event) -> None:
    """Copy what is appended to ``path`` onto ``dst`` until ``done`` and the end of the file."""
    out = getattr(dst, "buffer", None)
    with open(path, "rb") as f:
        while True:
            finished = done.is_set()
            block = f.read(1 << 16)
            if block:
                if out is not None:
                    try:
                        out.write(block)
                        out.flush()
                    except (OSError, ValueError):
                        out = None
                continue
            if finished:
                return
            time.sleep(0.05)


def end_child(launched: Launched) -> tuple[int | None, str]:
    """Launch mode: when collection ended first, the command is asked to end (SIGTERM)."""
    child = launched.proc
    note = ""
    if child.poll() is None:
        try:
            child.send_signal(signal.SIGTERM)
            child.wait(10)
        except subprocess.TimeoutExpired:
            note = (f"the command (PID {child.pid}) did not end within 10 s of SIGTERM; "
                    "left running")
        except ProcessLookupError:
            pass
    else:
        child.wait()
    launched.join()
    return child.returncode, note
