"""One gdb kept attached for the whole run, driven through GDB/MI over pipes.

gdb runs in non-stop mode so that stopping the target never sends SIGINT to its process group
(all-stop ``interrupt`` does, which would reach unrelated processes of the same job): each
snapshot is ``-exec-interrupt --all``, a wait until every thread reported ``*stopped``,
``thread apply all bt``, then ``-exec-continue --all``.  The pause is measured from the
interrupt to the ``^running`` of the continue.  Only these fixed commands are ever sent.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass, field

from wallflame.collect.safety import spawn, stop_tool

GDB_HARDENING = ["-nx", "-q", "-iex", "set auto-load off", "-iex", "set debuginfod enabled off"]

SETUP = [
    "-gdb-set non-stop on",
    "-gdb-set mi-async on",
    "-gdb-set pagination off",
    "-gdb-set confirm off",
    "-gdb-set width 0",
    "-gdb-set print thread-events off",
    # Never swallow a signal meant for the target.  "all" leaves out SIGINT and SIGTRAP,
    # which stay gdb's own: gdb interrupts the target with a SIGINT when it gets one itself,
    # and that SIGINT must not be passed on (which is also why gdb is stopped with SIGKILL,
    # never SIGINT: see collect.safety).  A SIGINT sent to the target while this gdb is
    # attached is therefore not delivered (documented in the --pmp-backend help); eu-stack
    # and gdb-batch hold the target only briefly.
    '-interpreter-exec console "handle all nostop noprint pass"',
]

_ESC = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "r": "\r", "a": "\a", "b": "\b",
        "f": "\f", "v": "\v", "e": "\x1b"}
_THREAD_ID = re.compile(r'thread-id="(\w+)"')
_STOPPED_ALL = re.compile(r'stopped-threads="all"')


def mi_cstring(body: str) -> str:
    """Decode an MI C string (without its quotes): ``\\n``, ``\\"``, octal bytes."""
    out = bytearray()
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c != "\\" or i + 1 >= n:
            out += c.encode("utf-8", "surrogateescape")
            i += 1
            continue
        d = body[i + 1]
        if d in "01234567":
            j = i + 1
            while j < n and j < i + 4 and body[j] in "01234567":
                j += 1
            out.append(int(body[i + 1:j], 8) & 0xFF)
            i = j
            continue
        out += _ESC.get(d, d).encode("utf-8", "surrogateescape")
        i += 2
    return out.decode("utf-8", "replace")


def stream_text(line: str) -> str | None:
    """The text of a ``~"..."`` console record, else ``None``."""
    if line.startswith('~"') and line.endswith('"'):
        return mi_cstring(line[2:-1])
    return None


class GdbGone(Exception):
    """gdb exited or stopped answering."""


@dataclass
class GdbMI:
    """The persistent gdb backend's process and protocol state."""

    gdb: str
    pid: int
    proc: subprocess.Popen[bytes] | None = None
    threads: set[str] = field(default_factory=set)
    stopped: set[str] = field(default_factory=set)
    exited: bool = False
    token: int = 100
    _buf: bytes = b""
    stderr_lines: list[str] = field(default_factory=list)

    def command(self) -> list[str]:
        return [self.gdb, *GDB_HARDENING, "--interpreter=mi2"]

    def start(self, timeout_s: float = 60.0) -> float:
        """Start gdb, attach and resume; returns the attach pause in ms."""
        self.proc = spawn(self.command(), signal.SIGKILL, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert self.proc.stdout is not None
        os.set_blocking(self.proc.stdout.fileno(), False)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)
        for c in SETUP:
            self.request(c, timeout_s)
        t0 = time.monotonic()
        rec, lines = self.request(f"-target-attach {self.pid}", timeout_s)
        if not rec.startswith("^done"):
            raise GdbGone(_error_text(rec, lines))
        self.wait_all_stopped(timeout_s)
        self.request("-exec-continue --all", timeout_s)
        return (time.monotonic() - t0) * 1000

    def _readline(self, deadline: float) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if not self._sel.select(left):
                continue
            try:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                raise GdbGone("gdb exited")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        text = line.decode("utf-8", "replace").rstrip("\r")
        self._note(text)
        return text

    def _note(self, line: str) -> None:
        """Track thread lifetime and target exit from async records."""
        if line.startswith("=thread-created"):
            m = re.search(r'id="(\d+)"', line)
            if m:
                self.threads.add(m.group(1))
        elif line.startswith("=thread-exited"):
            m = re.search(r'id="(\d+)"', line)
            if m:
                self.threads.discard(m.group(1))
        elif line.startswith("=thread-group-exited") or 'reason="exited' in line:
            self.exited = True
        elif line.startswith("*stopped"):
            if _STOPPED_ALL.search(line):
                self.stopped |= self.threads
            else:
                m = _THREAD_ID.search(line)
                if m:
                    self.stopped.add(m.group(1))
        elif line.startswith("*running"):
            m = _THREAD_ID.search(line)
            if m is None or m.group(1) == "all" or 'thread-id="all"' in line:
                self.stopped.clear()
            else:
                self.stopped.discard(m.group(1))
        elif line.startswith("&\""):
            self.stderr_lines.append(mi_cstring(line[2:-1]).rstrip())
            del self.stderr_lines[:-50]

    def send(self, cmd: str) -> str:
        assert self.proc is not None and self.proc.stdin is not None
        self.token += 1
        tok = str(self.token)
        try:
            self.proc.stdin.write(f"{tok}{cmd}\n".encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise GdbGone("gdb exited") from None
        return tok

    def request(self, cmd: str, timeout_s: float) -> tuple[str, list[str]]:
        """Send ``cmd`` and read until its result record; returns it and the lines before."""
        tok = self.send(cmd)
        deadline = time.monotonic() + timeout_s
        lines: list[str] = []
        while True:
            line = self._readline(deadline)
            if line.startswith(tok + "^"):
                return line[len(tok):], lines
            lines.append(line)

    def wait_all_stopped(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.threads or not self.threads <= self.stopped:
            if self.exited:
                return
            self._readline(deadline)

    def snapshot(self, timeout_s: float) -> tuple[str, float]:
        """Stop every thread, dump all stacks, resume; returns (dump, pause ms)."""
        t0 = time.monotonic()
        self.request("-exec-interrupt --all", timeout_s)
        self.wait_all_stopped(timeout_s)
        rec, lines = self.request('-interpreter-exec console "thread apply all bt"', timeout_s)
        self.request("-exec-continue --all", timeout_s)
        pause = (time.monotonic() - t0) * 1000
        text = "".join(t for t in (stream_text(x) for x in lines) if t is not None)
        if not rec.startswith("^done") and not text:
            raise GdbGone(_error_text(rec, lines))
        return text, pause

    def close(self) -> int | None:
        """Detach and quit; on any trouble SIGKILL (never SIGTERM, nor SIGINT, which gdb
        would pass on to the target as an interrupt)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.request("-target-detach", 5.0)
                self.send("-gdb-exit")
                return self.proc.wait(5.0)
            except (GdbGone, TimeoutError, subprocess.TimeoutExpired):
                pass
        return stop_tool(self.proc, grace_s=2.0, first=signal.SIGKILL)


def _error_text(rec: str, lines: list[str]) -> str:
    m = re.search(r'msg="((?:[^"\\]|\\.)*)"', rec)
    if m:
        return mi_cstring(m.group(1))
    return rec or "no answer"
