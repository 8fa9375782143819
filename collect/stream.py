"""Post-processing that keeps up with recording and stays out of the target's way.

``perf record --switch-output`` closes a chunk every few seconds.  While recording goes on, the
collect's folding process (``StreamProcess``, running ``wallflame.assemble.streaming``) turns
every finished chunk into folded evidence at once: ``perf script`` piped straight into the
folder (``wallflame.fold.perf.chunks.ChunkFolder``, which keeps the scheduler's open intervals
from chunk to chunk), one chunk at a time, so memory never holds more than the chunk being read
(as a stream) and the folded totals (``Folded``).  The on-CPU text is also kept in
``raw/perf.script``; the scheduler's is not (tens of MB a second on a busy server;
``raw/sched.data.*`` are kept and can be read again).

The folding process lowers its own priority before it starts any child, and the children
inherit it: ``SCHED_IDLE`` during the window (it runs only on a CPU nothing else wants), nice
19, and the idle I/O class (``ioprio_set``).  Once the window has closed the collect gives it
and its children the normal policy and nice 0 back (the I/O class stays idle): against a
target that keeps every CPU busy, nice 19 would stretch a second or two of folding over
minutes.  The target, the recorders and the collect's
own threads keep their priority; the folding is a process of its own so that its priority
delays nothing but itself (``StreamProcess``).

What it cost (CPU of the folding and of every ``perf script``, from ``wait4``; wall time; how
much was left when the window closed and how long that took) goes to ``raw/capture.json`` and
``meta.json`` under ``postprocess``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from wallflame.collect import packed, perf
from wallflame.collect.safety import spawn, tool_env
from wallflame.rundir import PERF_SCRIPT

_SYS_IOPRIO_SET = 251  # x86_64; other architectures: the call fails and is skipped
_IOPRIO_WHO_PROCESS = 1
_IOPRIO_CLASS_IDLE = 3


def lower_priority(idle: bool = True) -> list[str]:
    """Make the calling thread (and what it starts) yield to everything else; returns what
    was applied (``sched_idle``, ``nice19``, ``ionice_idle``).  ``idle=False``: the normal
    policy at nice 0 again (``normal``), the I/O class kept idle."""
    done = []
    tid = threading.get_native_id()
    try:
        if idle:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
            done.append("sched_idle")
        else:
            os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
    except (OSError, AttributeError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, tid, 19 if idle else 0)
        done.append("nice19" if idle else "normal")
    except OSError:
        pass
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prio = _IOPRIO_CLASS_IDLE << 13
        if os.uname().machine == "x86_64" and \
                libc.syscall(_SYS_IOPRIO_SET, _IOPRIO_WHO_PROCESS, tid, prio) == 0:
            done.append("ionice_idle")
    except (OSError, AttributeError):
        pass
    return done


@dataclass
class Cost:
    cpu_s: float = 0.0          # the streaming thread's own CPU time
    children_cpu_s: float = 0.0  # every perf script's user + system time
    wall_s: float = 0.0          # time spent processing chunks
    chunks: int = 0
    during_window: int = 0      # chunks whose processing started before the window closed
    after_window_s: float = 0.0  # from the window's end to the last chunk processed
    bytes_in: int = 0            # perf.data bytes processed
    priority: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"cpu_s": round(self.cpu_s + self.children_cpu_s, 3),
                "thread_cpu_s": round(self.cpu_s, 3),
                "perf_script_cpu_s": round(self.children_cpu_s, 3),
                "busy_wall_s": round(self.wall_s, 3), "chunks": self.chunks,
                "chunks_during_window": self.during_window,
                "after_window_s": round(self.after_window_s, 3),
                "perf_data_mb": round(self.bytes_in / 1e6, 3), "priority": self.priority}


class ChunkSink(Protocol):
    """What the text of the chunks is fed to (``wallflame.fold.perf.chunks.ChunkFolder``)."""

    def feed(self, stem: str, stream: IO[bytes], switches: Any = None) -> None: ...

    def read_switches(self, chunk: Path) -> Any: ...

    def expect_wakes(self) -> None: ...

    def set_window(self, start: int, end: int | None = None,
                   at_start: Iterable[int] | None = None) -> None: ...


class Folded:
    """The chunks processed so far (``done``, in chunk order per stem) and the folder they
    were fed to."""

    def __init__(self, raw: Path, folder: ChunkSink,
                 pid: int | str | Callable[[], list[int]] | None = None,
                 inline: bool = True, pack: bool = True) -> None:
        """``pid``: keep only the on-CPU samples of that process, or of the processes the
        callable lists when a chunk is read (a multi-process target's members so far).
        ``inline``: perf resolves inlined frames (``CollectOptions.inline_frames``)."""
        self.raw = raw
        self.pid = pid
        self.inline = inline
        self.folder = folder
        self.done: dict[str, list[str]] = {"perf": [], "sched": [], perf.WAKE: []}
        #: Whether each chunk read is then kept compressed (``collect.packed``), and its cost.
        self.pack = pack
        self.packed = packed.PackCost()
        self.bad: list[tuple[str, int]] = []
        self.cost = Cost()
        self._script: IO[bytes] | None = None
        self._err: IO[bytes] | None = None

    def process(self, stem: str, chunk: Path) -> None:
        """``perf script`` of one chunk into its folder (chunks of a stem in order)."""
        t0 = time.monotonic()
        c0 = time.thread_time()
        if self._err is None:
            self._err = open(self.raw / "script.stderr", "ab")  # noqa: SIM115 - close()
        who = self.pid
        pids = (",".join(str(p) for p in who()) or None) if callable(who) else who
        # The scheduler's switch records are read from the chunk itself where they can be
        # (perf script then prints only the stack samples and task events: a third of its
        # CPU), during the window as after it.
        try:
            with packed.unpacked(chunk) as readable:
                code = self._run_script(stem, readable, pids)
        except packed.UNREADABLE:  # a compressed chunk cut short or damaged: counted as bad
            code = -2
        self.cost.cpu_s += time.thread_time() - c0
        self.cost.wall_s += time.monotonic() - t0
        self.cost.chunks += 1
        with contextlib.suppress(OSError):
            self.cost.bytes_in += max(0, packed.size_unpacked(chunk))
        self.done[stem].append(packed.chunk_name(chunk))
        if code != 0:
            self.bad.append((chunk.name, code))
        elif self.pack:  # read: kept compressed (not an unreadable one: left as perf wrote it)
            packed.pack(chunk, self.packed)

    def _run_script(self, stem: str, chunk: Path, pids: int | str | None) -> int:
        """``perf script`` of the (unpacked) ``chunk`` into the folder; its exit code."""
        switches = self.folder.read_switches(chunk) if stem == "sched" else None
        cmd = perf.script_command(chunk, stem == "sched", pids, inline=self.inline,
                                  switches=switches is None)
        try:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._err,
                                    stdin=subprocess.DEVNULL, env=tool_env())
        except OSError:
            return -1
        assert proc.stdout is not None
        try:
            if stem == "sched" and switches is not None:
                self.folder.feed(stem, proc.stdout, switches)
            elif stem in ("sched", perf.WAKE):
                self.folder.feed(stem, proc.stdout)
            else:  # the on-CPU text is kept in raw/perf.script as it is folded
                if self._script is None:
                    self._script = open(self.raw / PERF_SCRIPT, "wb")  # noqa: SIM115 - close()
                self.folder.feed(stem, _Tee(proc.stdout, self._script))  # type: ignore[arg-type]
        finally:
            proc.stdout.close()
            code, usage = _wait4(proc)
        self.cost.children_cpu_s += usage
        return code

    def costs(self) -> dict[str, Any]:
        """What processing the chunks cost, as ``meta.json`` ``postprocess`` holds it."""
        return {"cost": self.cost.to_json(), "packed": self.packed.to_json()}

    def close(self) -> None:
        for f in (self._script, self._err):
            if f is not None:
                f.close()
        self._script = self._err = None


class _Tee:
    """A readable stream that copies what is read from it into ``copy``."""

    def __init__(self, src: IO[bytes], copy: IO[bytes]) -> None:
        self.src = src
        self.copy = copy

    def read(self, n: int = -1) -> bytes:
        data = self.src.read(n)
        if data:
            self.copy.write(data)
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def fileno(self) -> int:
        return self.src.fileno()


def _wait4(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    """Reap ``proc`` and return its exit code and CPU seconds (user + system)."""
    try:
        _, status, ru = os.wait4(proc.pid, 0)
    except ChildProcessError:
        return proc.wait(), 0.0
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    return code, ru.ru_utime + ru.ru_stime


def ready_chunks(raw: Path, stem: str, final: bool, done: list[str]) -> list[Path]:
    """The chunks of ``stem`` not yet processed: while perf records, only the ones it has
    renamed ``STEM.data.<timestamp>`` when it switched to the next (complete); once it has
    stopped (``final``), the rest too."""
    chunks = perf.data_chunks(raw, stem)
    if not final:
        chunks = [c for c in chunks if c.name != f"{stem}.data"]
    return [c for c in chunks if packed.chunk_name(c) not in done]


class StreamProcess:
    """The collect's side of its folding process (``wallflame.assemble.streaming``).

    Every finished chunk is folded while recording goes on, by a process of its own at
    ``SCHED_IDLE``, nice 19 and the idle I/O class, which its ``perf script`` children
    inherit.  A thread of the collect's own process at that priority would hold the
    interpreter's lock whenever the target preempted it, and every other thread of the
    collect would wait for it: the window's end, the samplers' rounds, the recorders' stop.
    In a process of its own the window keeps its length against a target that keeps every
    CPU busy (``tests/live/test_stream_process_live.py``).

    The messages (JSON lines on the process's standard input) are listed in
    ``wallflame.assemble.streaming``.  When the window closes (``close_window``) the process and its
    children get the normal policy at nice 0 back (the I/O class stays idle) and fold what is
    left; ``finish`` has it write the run directory once ``raw/capture.json`` is final.  If
    the process ends early, nothing is lost: the chunks it did not fold are still in raw/,
    and ``wallflame.assemble`` folds them all (``failed``)."""

    def __init__(self, command: list[str], out: Path, raw: Path, stems: list[str],
                 pids: list[int] | None, inline: bool, wakes: bool) -> None:
        """``command``: the process's command line, to which the specification (JSON) is
        added.  ``pids``: keep only these processes' on-CPU samples (``None``: a launched
        command, whose perf recorded only its own); ``update_pids`` changes it."""
        self.pids = None if pids is None else sorted(pids)
        spec = {"out": str(out), "raw": str(raw), "stems": stems, "pids": self.pids,
                "inline": inline, "wakes": wakes}
        self.error = ""
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            self.proc = spawn([*command, json.dumps(spec)], signal.SIGTERM,
                              stdin=subprocess.PIPE, env=dict(os.environ))
        except OSError as e:
            self.error = f"the folding process could not start: {e}"

    def _send(self, msg: dict[str, Any]) -> None:
        proc = self.proc
        if proc is None or proc.stdin is None or self.error:
            return
        try:
            proc.stdin.write(json.dumps(msg).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            self.error = f"the folding process ended early (exit {proc.poll()})"

    def set_window(self, start: int, end: int | None = None,
                   at_start: Iterable[int] | None = None) -> None:
        """As ``ChunkSink.set_window``, in the folding process."""
        self._send({"window": [start, end, None if at_start is None else list(at_start)]})

    def update_pids(self, pids: list[int]) -> None:
        """The processes whose on-CPU samples are kept, when they have changed."""
        if self.pids is not None and sorted(pids) != self.pids:
            self.pids = sorted(pids)
            self._send({"pids": self.pids})

    def close_window(self) -> list[str]:
        """The recorders have stopped: the normal priority back for the process and what it
        runs, then every chunk left is folded.  Returns what was applied."""
        done = []
        if self.proc is not None:
            for tid in process_tree(self.proc.pid):
                try:
                    os.sched_setscheduler(tid, os.SCHED_OTHER, os.sched_param(0))
                    os.setpriority(os.PRIO_PROCESS, tid, 0)
                    done.append("normal")
                except OSError:
                    pass
        self._send({"final": True})
        return done[:1]

    def finish(self) -> int | None:
        """Have the process write the run directory (``raw/capture.json`` is final) and wait
        for it: its exit status, 0 once the run directory is written (``None``: it never
        started)."""
        proc = self.proc
        self._send({"finish": True})
        if proc is None:
            return None
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        return proc.wait()

    def abort(self) -> None:
        """End the process without a finish (its chunks stay in raw/)."""
        proc = self.proc
        if proc is None:
            return
        with contextlib.suppress(OSError):
            if proc.stdin is not None:
                proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def process_tree(pid: int) -> list[int]:
    """Every thread of process ``pid`` and of the processes it started, and theirs (the
    folding process's ``perf script`` and the ``addr2line`` that one keeps running)."""
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < 256:
        p = todo.pop()
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{p}/task")]
        except (OSError, ValueError):
            continue
        out.extend(tids)
        for t in tids:
            try:
                with open(f"/proc/{p}/task/{t}/children", encoding="ascii") as f:
                    todo.extend(int(x) for x in f.read().split())
            except (OSError, ValueError):
                continue
    return out


__all__ = [
    "ChunkSink",
    "Cost",
    "Folded",
    "StreamProcess",
    "lower_priority",
    "process_tree",
    "ready_chunks",
]
