"""Launch mode holds the command at its exec until the recorders are ready
(``collect.launch``): nothing of it runs before ``release``, it runs in the held process (same
PID), with the signal dispositions of a plain exec; an exec that fails is a clean error before
anything starts, and a command never let run (the collect failed, or wallflame died) never
runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wallflame.collect.launch import Launched, end_child, runnable
from wallflame.errors import TargetError


def _wait_exit(child: Launched, timeout_s: float = 10.0) -> int | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        rc = child.poll()
        if rc is not None:
            return rc
        time.sleep(0.01)
    return None


def test_nothing_runs_before_release(tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    child = Launched(["sh", "-c", f'echo $$ > "{mark}"'], tmp_path)
    try:
        assert child.held
        time.sleep(0.3)
        assert not mark.exists()
        # Stopped by its tracer (state t) at the exec: already the command's program.
        state = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state == "t"
        assert os.readlink(f"/proc/{child.pid}/exe").endswith("sh")
        child.release()
        assert _wait_exit(child) == 0
        assert mark.read_text().strip() == str(child.pid)  # the held process itself
        assert child.released_ns > 0
    finally:
        end_child(child)


def _sigmask(text: str, field: str) -> int:
    return int(next(ln.split(":\t")[1] for ln in text.splitlines()
                    if ln.startswith(field + ":")), 16)


def test_signals_as_a_plain_exec(tmp_path: Path) -> None:
    """Python ignores SIGPIPE and SIGXFSZ: the command does not inherit that through the stub
    (as ``subprocess``'s ``restore_signals`` gives), and what this process's environment
    ignores (a job started in the background ignores SIGINT and SIGQUIT) it does, as through
    any exec."""
    child = Launched(["sh", "-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status"], tmp_path)
    child.release()
    assert _wait_exit(child) == 0
    end_child(child)
    got = (tmp_path / "target.stdout").read_text()
    ours = Path("/proc/self/status").read_text()
    python_ignores = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))
    assert _sigmask(got, "SigIgn") == _sigmask(ours, "SigIgn") & ~python_ignores, got
    assert _sigmask(got, "SigBlk") == 0, got


def test_never_released_never_runs(tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    child = Launched(["touch", str(mark)], tmp_path)
    rc, _ = end_child(child)  # collection failed before the release
    assert rc == -9  # killed where the exec stopped it
    assert not mark.exists()


def test_exec_failure_is_a_clean_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x00\x01\x02 not a program\n")
    bad.chmod(0o755)
    with pytest.raises(TargetError, match=r"cannot run .*Exec format error"):
        Launched([str(bad)], tmp_path)


def test_wallflame_gone_before_release_command_never_runs(tmp_path: Path) -> None:
    """The tracer exits while holding the command: the kernel kills it (PTRACE_O_EXITKILL)
    instead of letting it run unwatched."""
    mark = tmp_path / "ran"
    code = ("import os, sys, pathlib\n"
            "from wallflame.collect.launch import Launched\n"
            f"c = Launched(['touch', {str(mark)!r}], pathlib.Path({str(tmp_path)!r}))\n"
            "print(c.pid, c.held, flush=True)\n"
            "os._exit(0)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60, check=True)
    pid, held = r.stdout.split()
    assert held == "True"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        time.sleep(0.01)
    time.sleep(0.2)
    assert not mark.exists()


@pytest.mark.parametrize("command", [["/nonexistent/prog"], ["no-such-command-here-xyz"],
                                     [os.devnull]])
def test_not_runnable_before_anything_starts(command: list[str], tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="cannot run"):
        runnable(command)
    with pytest.raises(TargetError, match="cannot run"):
        Launched(command, tmp_path)
    assert not (tmp_path / "target.stdout").exists()


def test_a_stop_by_another_thread_is_not_an_exit(tmp_path: Path) -> None:
    """A snapshot thread's ptrace stop of the command is visible to every thread's wait in
    this process (the kernel shows it below); ``ended`` reads /proc instead, so the stop is
    neither taken for an exit nor taken from the thread that waits for it."""
    import ctypes
    import threading

    child = Launched(["sleep", "5"], tmp_path)
    child.release()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.restype = ctypes.c_long
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    interrupted, seen = threading.Event(), threading.Event()

    def tracer() -> None:
        assert libc.ptrace(0x4206, child.pid, None, None) == 0  # PTRACE_SEIZE
        assert libc.ptrace(0x4207, child.pid, None, None) == 0  # PTRACE_INTERRUPT
        interrupted.set()
        seen.wait(10)
        os.waitpid(child.pid, 0x40000000)  # its stop (__WALL), as a snapshot thread waits
        libc.ptrace(17, child.pid, None, None)  # PTRACE_DETACH

    t = threading.Thread(target=tracer)
    try:
        t.start()
        assert interrupted.wait(10)
        info = None
        deadline = time.monotonic() + 5
        while info is None and time.monotonic() < deadline:
            # stopped by a sibling thread, yet waitable from this one: what Popen.poll took
            info = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            time.sleep(0.01)
        assert info is not None and info.si_code == os.CLD_TRAPPED, info
        assert not child.ended()
        assert child.proc.returncode is None
    finally:
        seen.set()
        t.join(10)
    os.kill(child.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while not child.ended() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert child.ended()
    rc, _ = end_child(child)
    assert rc == -signal.SIGKILL
