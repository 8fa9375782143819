"""Never harm the target: how tools are started, stopped and cleaned up after.

Measured facts behind each rule (docs/reliability.md):

* SIGTERM to a gdb that is mid-backtrace left the target stopped in about half the trials;
  SIGINT and SIGKILL never did.  Tools are stopped with SIGINT, then SIGKILL, never SIGTERM;
  a tracer (gdb, eu-stack) straight with SIGKILL: gdb passes a SIGINT on to the target as an
  interrupt, and a gdb killed before it resumes the target leaves that SIGINT to be delivered,
  which ends a target that stops on SIGINT.
* A tracer that dies between PTRACE_ATTACH and reaping the attach-SIGSTOP leaves the threads
  stopped (state ``T``); SIGCONT recovers them.  After every capture every thread's state is
  checked, and a target that was not stopped before we came is resumed.  A target that was
  already stopped is never resumed.
* Every tool gets PR_SET_PDEATHSIG, and a small guard process (its own session, so a terminal's
  Ctrl-C does not reach it) outlives a SIGKILLed wallflame: when its pipe from wallflame closes
  without a clean ``done``, it stops the tools that are left and resumes the target if needed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

from wallflame.collect.target import STOPPED, read_stat, thread_states, tracer_of

_PR_SET_PDEATHSIG = 1

#: Environment for every tool: no debuginfod (it can stall for 90 s), C locale for parsing.
TOOL_ENV_OVERRIDES = {"DEBUGINFOD_URLS": "", "LC_ALL": "C", "LANG": "C"}


def tool_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(TOOL_ENV_OVERRIDES)
    return env


_CLONE_NEWNS = 0x00020000
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
#: Where the kernel's symbols are read (``spawn``'s ``kallsyms``).
PROC_KALLSYMS = b"/proc/kallsyms"


def _death_signal_preexec(sig: int, kallsyms: os.PathLike[str] | None = None
                          ) -> Callable[[], None]:
    parent = os.getpid()
    # Looked up here, in the parent: the child of a multi-threaded process must not dlopen
    # (another thread may have been inside the dynamic loader at fork; ld.so then aborts
    # with "Inconsistency detected by ld.so", exit 127, seen when perf was started while the
    # snapshot thread was loading libdw).
    libc = ctypes.CDLL(None, use_errno=True)
    prctl, unshare, mount, disposition = libc.prctl, libc.unshare, libc.mount, libc.signal
    disposition.argtypes = [ctypes.c_int, ctypes.c_void_p]
    source = os.fsencode(kallsyms) if kallsyms is not None and os.path.isfile(kallsyms) \
        else None

    def preexec() -> None:
        # The child runs wallflame's own handler of the signal until it execs (a SIGINT
        # handler that only writes to a pipe): a death signal arriving before the exec would
        # be swallowed and the tool run on, orphaned, for its whole duration.  The default
        # action ends the child instead.
        disposition(int(sig), None)  # SIG_DFL
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), sig)
        # A tool never gets the terminal's Ctrl-C directly: wallflame decides how to stop it.
        os.setpgid(0, 0)
        # The copy of the kernel's symbols in place of /proc/kallsyms, in a mount namespace
        # of the tool's own, made private first so that nothing reaches the machine's; any
        # step refused (not root, a container's seccomp) leaves the kernel's own file.
        if source is not None and unshare(_CLONE_NEWNS) == 0 and \
                mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) == 0:
            mount(source, PROC_KALLSYMS, None, _MS_BIND, None)

    return preexec


def spawn(args: Sequence[str], death_signal: int, kallsyms: os.PathLike[str] | None = None,
          **kwargs: Any) -> subprocess.Popen[bytes]:
    """Start a tool (no shell) that receives ``death_signal`` if the spawning thread dies.
    ``kallsyms``: a copy of ``/proc/kallsyms`` the tool reads in its place, if it is there
    (``perf record`` reads the kernel's file at its start and at every new chunk: 30 ms of
    the kernel's time a pass, see ``wallflame.collect.perf.PerfRecorder``)."""
    kwargs.setdefault("env", tool_env())
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.Popen(list(args), preexec_fn=_death_signal_preexec(death_signal, kallsyms),
                            **kwargs)


def reads_copy_of_kallsyms(pid: int, copy: os.PathLike[str]) -> bool:
    """Whether process ``pid`` reads ``copy`` as ``/proc/kallsyms`` (``spawn``): the same
    file, seen through the process's own root and mount namespace (a container may already
    have something mounted there)."""
    try:
        seen = os.stat(os.path.join(f"/proc/{pid}/root", PROC_KALLSYMS.decode()[1:]))
        ours = os.stat(copy)
    except OSError:
        return False
    return (seen.st_dev, seen.st_ino) == (ours.st_dev, ours.st_ino)


def stop_tool(proc: subprocess.Popen[Any], grace_s: float = 2.0,
              first: int | None = signal.SIGINT) -> int | None:
    """Stop a tool with ``first`` (SIGINT; SIGKILL for a tracer; ``None``: it has been asked
    already), then SIGKILL after ``grace_s``; never SIGTERM.  Returns its exit status."""
    if proc.poll() is not None:
        return proc.returncode
    if first is not None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(first)
    try:
        return proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    try:
        return proc.wait(5)
    except subprocess.TimeoutExpired:
        return None


def stopped_threads(pid: int) -> list[int]:
    return [tid for tid, s in thread_states(pid).items() if s == STOPPED]


def ensure_running(pid: int, start_ticks: int, stopped_before: bool) -> list[int]:
    """After a capture: if threads are left stopped and the target was running when we came,
    send SIGCONT.  Returns the tids found stopped (empty: nothing to do)."""
    st = read_stat(pid)
    if st is None or st.start_ticks != start_ticks:
        return []
    stopped = stopped_threads(pid)
    if stopped and not stopped_before:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            return []
    return stopped


class Guard:
    """The parent side of the guard process (see the module docstring)."""

    def __init__(self, pid: int, start_ticks: int, stopped_before: bool) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "wallflame.collect.safety", str(pid), str(start_ticks),
                 "1" if stopped_before else "0", str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True)
        except OSError:
            self.proc = None

    def _send(self, line: str) -> None:
        if self.proc is None or self.proc.stdin is None:
            return
        try:
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def watch(self, tool_pid: int, stop_signal: int = signal.SIGINT) -> None:
        """Tell the guard about a tool to stop if wallflame dies, and the signal to stop it
        with first (SIGINT lets perf keep its data; a tracer gets SIGKILL)."""
        st = read_stat(tool_pid)
        if st is not None:
            self._send(f"tool {tool_pid} {st.start_ticks} {int(stop_signal)}")

    def add_target(self, pid: int, start_ticks: int, stopped_before: bool) -> None:
        """Another process of a multi-process target: the guard resumes it too if wallflame
        dies while one of its threads is stopped."""
        self._send(f"target {pid} {start_ticks} {int(stopped_before)}")

    def close(self) -> None:
        """Clean end: the guard checks the target once more and exits."""
        if self.proc is None:
            return
        self._send("done")
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


def _alive(pid: int, start_ticks: int) -> bool:
    st = read_stat(pid)
    return st is not None and st.start_ticks == start_ticks and st.state not in "ZX"


def _guard_main(argv: list[str], stdin: IO[bytes]) -> int:
    targets = [(int(argv[0]), int(argv[1]), argv[2] == "1")]
    tools: list[tuple[int, int]] = []
    first: dict[int, int] = {}
    clean = False
    for raw in stdin:
        parts = raw.decode("ascii", "replace").split()
        if parts[:1] == ["tool"] and len(parts) in (3, 4):
            tools.append((int(parts[1]), int(parts[2])))
            first[int(parts[1])] = int(parts[3]) if len(parts) == 4 else signal.SIGINT
        elif parts[:1] == ["target"] and len(parts) == 4:
            targets.append((int(parts[1]), int(parts[2]), parts[3] == "1"))
        elif parts[:1] == ["done"]:
            clean = True
    # wallflame ended (cleanly or killed).  Stop any tool it left: its first signal (SIGINT,
    # or SIGKILL for a tracer), then SIGKILL.
    live = [(p, s) for p, s in tools if _alive(p, s)]
    if live and not clean:
        for p, _ in live:
            _signal(p, first[p])
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and any(_alive(p, s) for p, s in live):
            time.sleep(0.05)
        for p, s in live:
            if _alive(p, s):
                _signal(p, signal.SIGKILL)
    # Wait until no tracer of ours is attached, then resume the targets if we left them
    # stopped.
    deadline = time.monotonic() + 5.0
    for pid, _, _ in targets:
        while time.monotonic() < deadline:
            tracer = tracer_of(pid)
            if not tracer or not any(p == tracer for p, _ in tools):
                break
            time.sleep(0.05)
    for _ in range(3):
        for pid, start_ticks, stopped_before in targets:
            ensure_running(pid, start_ticks, stopped_before)
        time.sleep(0.05)
    return 0


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def pause_summary(pauses_ms: list[float], count_key: str) -> dict[str, float | int]:
    """How many pauses (under ``count_key``), their median, maximum and total in ms."""
    p = sorted(pauses_ms)
    if not p:
        return {count_key: 0, "median_ms": 0.0, "max_ms": 0.0, "total_ms": 0.0}
    mid = len(p) // 2
    median = p[mid] if len(p) % 2 else (p[mid - 1] + p[mid]) / 2
    return {count_key: len(p), "median_ms": round(median, 3), "max_ms": round(p[-1], 3),
            "total_ms": round(sum(p), 3)}


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    sys.exit(_guard_main(sys.argv[1:], sys.stdin.buffer))

