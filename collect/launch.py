"""Launch mode: the command to profile, started by wallflame (no shell)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from wallflame.errors import TargetError


class Launched:
    """A launched command whose output passes through and is saved in ``raw/target.stdout``
    and ``raw/target.stderr`` (a sample's work counter is read from there).  If wallflame is
    killed, the command's next write to the closed pipe fails (SIGPIPE), as under ``tee``."""

    def __init__(self, command: Sequence[str], raw: Path) -> None:
        try:
            self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as e:
            raise TargetError(f"cannot run {command[0]!r}: {e.strerror}",
                              "check the command and its path") from None
        self.pid = self.proc.pid
        self.copiers = [
            threading.Thread(target=_tee, args=(src, dst, raw / name), daemon=True)
            for src, dst, name in ((self.proc.stdout, sys.stdout, "target.stdout"),
                                   (self.proc.stderr, sys.stderr, "target.stderr"))]
        for t in self.copiers:
            t.start()

    def poll(self) -> int | None:
        return self.proc.poll()

    def join(self) -> None:
        for t in self.copiers:
            t.join(5)


def _tee(src: IO[bytes] | None, dst: IO[str], path: Path) -> None:
    if src is None:
        return
    out = getattr(dst, "buffer", None)
    with open(path, "wb") as f:
        while block := src.read1(1 << 16) if hasattr(src, "read1") else src.read(1 << 16):
            f.write(block)
            f.flush()
            if out is not None:
                try:
                    out.write(block)
                    out.flush()
                except (OSError, ValueError):
                    out = None


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
