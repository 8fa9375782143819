"""Launch mode: the command to profile, started by wallflame (no shell).

The command is started *held* at its first instruction: a small Python stub forks as the
command's process, asks to be traced (``PTRACE_TRACEME``) and execs the command, which the
kernel then stops at the exec, before the dynamic loader runs.  The recorders attach to the
stopped process (perf reads its maps as the command's, not the stub's), and once every one is
ready wallflame lets it go (``PTRACE_DETACH``): the window opens there, so the profile holds
the command's whole run, as ``perf record -- COMMAND`` does.  Started at once, the command ran
for as long as the recorders took to start (up to seconds on a busy machine) before any
evidence was taken; held before its exec instead (a stub waiting on a pipe), perf kept the
stub's maps beside the command's and unwound through glibc wrongly in half of the runs.

The stub tells back through a pipe whether it could be traced and, if the exec failed, why
(the exec itself closes the pipe when it succeeds).  Where ptrace is not permitted the command
runs at once, as it did before, and the collect says how long it ran before the window.  If
wallflame dies while the command is held, the kernel kills it (``PTRACE_O_EXITKILL``): it never
runs unwatched.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from wallflame.collect.target import read_stat
from wallflame.errors import TargetError
from wallflame.rundir import TARGET_STDERR, TARGET_STDOUT

#: The stub: the signals Python ignores (SIGPIPE and SIGXFSZ, which the exec would pass on)
#: back to their defaults, as ``subprocess``'s ``restore_signals`` does (what the environment
#: ignores stays ignored, as through any exec), ``T`` (traced) or ``U`` (ptrace refused) into
#: the report pipe, then the exec; an exec that fails writes ``E`` and its reason.
_STUB = """import ctypes, os, signal, sys
report = int(sys.argv[1])
os.set_inheritable(report, False)
for name in ("SIGPIPE", "SIGXFSZ"):
    if hasattr(signal, name):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    traced = libc.ptrace(0, 0, None, None) == 0
except (OSError, AttributeError):
    traced = False
os.write(report, b"T" if traced else b"U")
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as e:
    os.write(report, b"E" + (e.strerror or str(e)).encode("utf-8", "replace"))
os._exit(127)
"""

#: How long the launch waits for the stub to report (it takes tens of milliseconds).
EXEC_TIMEOUT_S = 30.0

_PTRACE_CONT = 7
_PTRACE_DETACH = 17
_PTRACE_SETOPTIONS = 0x4200
_PTRACE_O_EXITKILL = 0x100000
_WALL = 0x40000000


def _ptrace(request: int, pid: int, data: int = 0) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    return int(libc.ptrace(request, pid, None, ctypes.c_void_p(data)))


def runnable(command: Sequence[str]) -> None:
    """Raise ``TargetError`` unless ``command[0]`` names an executable file (a path, or a
    name found on ``PATH``): said before anything is started."""
    name = command[0]
    if "/" in name:
        ok = os.path.isfile(name) and os.access(name, os.X_OK)
        why = "no such executable file"
    else:
        ok = shutil.which(name) is not None
        why = "not found on PATH"
    if not ok:
        raise TargetError(f"cannot run {name!r}: {why}", "check the command and its path")


class Launched:
    """A launched command whose output goes straight into ``raw/target.stdout`` and
    ``raw/target.stderr`` (a sample's work counter is read from there) and is followed from
    those files onto wallflame's own output.  The command never writes into a pipe that
    wallflame holds: if wallflame is killed, the command carries on and its output is still
    saved (under ``tee`` its next write would fail with SIGPIPE)."""

    def __init__(self, command: Sequence[str], raw: Path) -> None:
        runnable(command)
        self.command = list(command)
        paths = (raw / TARGET_STDOUT, raw / TARGET_STDERR)
        report_r, report_w = os.pipe()
        try:
            with open(paths[0], "wb") as out, open(paths[1], "wb") as err:
                self.proc: subprocess.Popen[bytes] = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", _STUB, str(report_w), *command],
                    stdout=out, stderr=err, pass_fds=(report_w,))
        except OSError as e:
            os.close(report_r)
            os.close(report_w)
            raise TargetError(f"cannot run {command[0]!r}: {e.strerror}",
                              "check the command and its path") from None
        os.close(report_w)
        self.pid = self.proc.pid
        self.started_ns = time.monotonic_ns()
        #: CLOCK_MONOTONIC when the command was let run (``release``), or 0.
        self.released_ns = 0
        report = _read_all(report_r, EXEC_TIMEOUT_S)
        self.held = report[:1] == b"T"
        #: Whether it was held at all (not: ptrace refused, so it ran at once).
        self.traced = self.held
        if b"E" in report[:2]:
            self.proc.wait()
            why = report[report.index(b"E") + 1:].decode("utf-8", "replace")
            raise TargetError(f"cannot run {command[0]!r}: {why}",
                              "check the command and its path")
        if self.held:
            self._stopped_at_exec()
        else:
            self.released_ns = self.started_ns
            self._settle()
        self.done = threading.Event()
        self.followers = [
            threading.Thread(target=_follow, args=(path, dst, self.done), daemon=True)
            for path, dst in zip(paths, (sys.stdout, sys.stderr), strict=True)]
        for t in self.followers:
            t.start()

    def _stopped_at_exec(self) -> None:
        """Wait for the exec's stop; a signal that came first is passed on.  If the command
        ended instead, its status is kept for ``poll``."""
        while True:
            try:
                _, status = os.waitpid(self.pid, _WALL)
            except ChildProcessError:
                self.held = False
                return
            if not os.WIFSTOPPED(status):
                self.held = False
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                return
            sig = os.WSTOPSIG(status)
            if sig == signal.SIGTRAP:
                _ptrace(_PTRACE_SETOPTIONS, self.pid, _PTRACE_O_EXITKILL)
                return
            _ptrace(_PTRACE_CONT, self.pid, sig)

    def release(self) -> None:
        """Let the held command run (``released_ns``: ``CLOCK_MONOTONIC`` at the release).
        Must be called from the thread that created it (the tracer)."""
        if not self.held:
            return
        self.held = False
        self.released_ns = time.monotonic_ns()
        _ptrace(_PTRACE_DETACH, self.pid, 0)  # fails only if it is gone (killed)

    def _settle(self, timeout_s: float = 1.0) -> None:
        """Not held: the exec closes the report pipe before the kernel has set the process's
        new name and arguments; wait (briefly) until /proc shows them, so that the target is
        named after the command and not the stub."""
        comm = os.path.basename(self.command[0])[:15]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with open(f"/proc/{self.pid}/cmdline", "rb") as f:
                    args = [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
                with open(f"/proc/{self.pid}/comm", "rb") as f:
                    name = f.read().decode("utf-8", "replace").rstrip("\n")
            except OSError:
                return
            if args == self.command or (name == comm and args[:1] != [sys.executable]):
                return
            time.sleep(0.001)

    def close(self) -> None:
        """If the command was never let run (collection failed first), it is killed where it
        stopped, before its first instruction."""
        if self.held:
            self.held = False
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def poll(self) -> int | None:
        """The exit status, reaping the command: only once no thread of this process traces
        it any more (``ended`` before that)."""
        return self.proc.poll()

    def ended(self) -> bool:
        """Whether the command has exited, from /proc (a zombie, or gone): never from
        ``wait``, which in this process can take the ptrace stop a snapshot thread is waiting
        for (any thread's wait sees the stops of every thread's tracees).  Taken that way, a
        stop looked like an exit (``Popen`` reads a stopped status as a return code): the
        window ended after 1 s of a 10 s run and the snapshot thread was left waiting."""
        if self.proc.returncode is not None:
            return True
        st = read_stat(self.pid)
        return st is None or st.state in ("Z", "X")

    def join(self) -> None:
        self.done.set()
        for t in self.followers:
            t.join(5)


def _read_all(fd: int, timeout_s: float) -> bytes:
    """What is written into the pipe ``fd`` until its end (or ``timeout_s``); closes it."""
    out = b""
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.5)
            if not ready:
                continue
            block = os.read(fd, 4096)
            if not block:
                break
            out += block
    finally:
        os.close(fd)
    return out


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
    launched.close()
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
