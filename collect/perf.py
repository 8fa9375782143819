"""On-CPU (and scheduler) recording with ``perf record``; the raw data stays in ``raw/``.

perf's exit code misleads (0 with zero samples, 143 with good data when the target exits
during ``-- sleep N``, 137 and all data lost on SIGKILL), so success is judged from the data.
Recording is split into chunks (``--switch-output=10s``) so that a killed perf loses at most
one chunk, bounded by ``-- sleep N``, and perf gets PR_SET_PDEATHSIG=SIGINT so that it ends
(and writes its data) when wallflame dies.  Each new chunk costs perf about 40 ms of CPU (it
synthesizes the kernel's and the target's maps again, reading /proc/kallsyms), and each
chunk's ``perf script`` about 50 ms more whatever its size (the kernel's symbols read from
``raw/``, below), so chunks last ``CHUNK_S`` or more (``benchmarks/lab/script_chunk.py``).

The on-CPU recorder's chunks are longer when its samples are few (``oncpu_chunk_s``): each
chunk's ``perf script`` costs a busy target a dip whatever the chunk holds, even at
``SCHED_IDLE`` (``benchmarks/lab/event_dips.py``), so a light collect's minute is one chunk
instead of six.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from wallflame.collect import packed
from wallflame.collect.safety import reads_copy_of_kallsyms, spawn, stop_tool, tool_env
from wallflame.collect.target import read_text
from wallflame.errors import PermissionDenied, ToolError
from wallflame.rundir import WAKE_STEM
from wallflame.systools import package_of, require_program
from wallflame.timeline import WAKER_MARKS

#: Seconds per perf.data chunk (see above).
CHUNK_S = 10
#: The on-CPU recorder's chunks: long enough to hold about this many samples, between
#: ``CHUNK_S`` and ``CHUNK_MAX_S`` seconds (``oncpu_chunk_s``).
CHUNK_SAMPLES = 12_000
CHUNK_MAX_S = 60
#: Seconds ``-- sleep N`` runs past the requested duration (see ``record_command``).
SLEEP_MARGIN_S = 10
#: Seconds a recorder runs outside the window, which a window's chunks are sized to hold
#: too (``chunk_seconds``): it starts before the window opens (the window waits for every
#: recorder to be ready; perf -a can take a second on a busy machine) and stops after it.
LEAD_S = 3
#: Bound of ``-- sleep N`` when collection has no duration (launch mode until the command
#: exits); perf is stopped with SIGINT long before.
UNBOUNDED_S = 7 * 24 * 3600

_LOST = re.compile(r"lost (\d+) chunks", re.I)
_LOST_PCT = re.compile(r"(\d+(?:\.\d+)?)% of events lost|lost (\d+(?:\.\d+)?)%", re.I)
_LOST_EVENTS = re.compile(r"Processed (\d+) events and lost (\d+) chunks", re.I)


def perf_path() -> str:
    return require_program("perf")


def version() -> str:
    try:
        r = subprocess.run([perf_path(), "--version"], capture_output=True, text=True,
                           timeout=20, env=tool_env(), check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return r.stdout.strip()


def supports_off_cpu() -> bool:
    """``perf record --off-cpu`` needs perf built with BPF skeletons (Debian's 6.1 is not:
    it ignores the option with a warning), so detect it rather than assume."""
    try:
        r = subprocess.run([perf_path(), "version", "--build-options"], capture_output=True,
                           text=True, timeout=20, env=tool_env(), check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return bool(re.search(r"bpf_skeletons:\s*\[\s*on", r.stdout))


def system_wide_allowed() -> bool:
    """May this user sample every CPU (root, or perf_event_paranoid at most 0)?"""
    if os.geteuid() == 0:
        return True
    text = read_text("/proc/sys/kernel/perf_event_paranoid") or "2"
    try:
        return int(text.strip()) <= 0
    except ValueError:
        return False


def sched_allowed() -> bool:
    """May this user record ``sched:sched_switch``?  Root may; anyone else is asked of perf
    itself (tracepoints need tracefs access and a low perf_event_paranoid)."""
    if os.geteuid() == 0:
        return True
    try:
        r = subprocess.run([perf_path(), "record", "-q", "-e", "sched:sched_switch", "-o",
                            os.devnull, "--", "true"], capture_output=True, timeout=30,
                           env=tool_env(), check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


@dataclass
class PerfOptions:
    """What one ``perf record`` records.

    freq_hz:    on-CPU sampling frequency of ``cpu-clock`` (``-F``).
    call_graph: ``fp`` (frame pointers) or ``dwarf`` (copies user stack per sample).
    sched:      the scheduler instead of on-CPU samples: every switch of every thread as a
                ``PERF_RECORD_SWITCH`` pair (``--switch-events``: exact off-CPU and run-queue
                intervals, about 40 bytes each, no stack), and ``sched:sched_switch`` with a
                call chain for a sample of them (``stack_hz``).  It runs as a second perf so
                that its stacks can use DWARF while on-CPU samples keep cheap frame pointers
                (a per-event ``call-graph=dwarf`` term unwound only the leaf with perf 6.1).
    stack_hz:   call chains of switches per second per thread, in the kernel's frequency mode
                (each sample carries how many switches it stands for); ``0``: every switch
                (``-c 1``), which costs 8 KiB of stack copied per switch with DWARF.
    stack_bytes: user stack copied per DWARF sample (``--call-graph dwarf,SIZE``).
    switch_filter: with ``system_wide``, the scheduler is recorded on every CPU instead of per
                thread: every switch of every task as a ``PERF_RECORD_SWITCH_CPU_WIDE`` pair
                (exact intervals; the target's picked out when read, by process id), and
                ``sched:sched_switch`` filtered in the kernel on the switches out of the
                target's threads (``threads.wake_filter`` on ``prev_pid``), one in
                ``stack_period`` per CPU with its call chain.  Per-thread events (``-p``) make
                the kernel stop and start them at every context switch of every thread, which
                costs a busy server far more than one event per CPU
                (``benchmarks/lab/sched_recorders.py``).  The tracepoint without a stack cannot
                stand in for the switch records: perf 6.1 drops switches out of the idle task
                on some CPUs.
    stack_period: with ``switch_filter``: one switch out of this many (per CPU) carries a
                stack; each such sample stands for that many switches.
    chunk_s:    seconds per chunk (``--switch-output``; ``oncpu_chunk_s``).
    """

    freq_hz: int = 499
    call_graph: str = "fp"
    sched: bool = False
    stack_hz: float = 0.0
    stack_bytes: int = 8192
    system_wide: bool = False
    switch_filter: str | None = None
    stack_period: int = 1
    chunk_s: int = CHUNK_S


#: User stack copied per *sampled* scheduler stack (a stack rate per thread, as a data budget
#: sets it): each costs little in all, so enough to reach a server thread's root
#: (``benchmarks/lab/sched_stack_bytes.py``: 8 KiB cuts a deep server stack short).  A stack at
#: every switch keeps the default 8 KiB (32 KiB at tens of thousands of switches a second
#: would be gigabytes).
SAMPLED_STACK_BYTES = 32768


def sched_options(freq_hz: int, call_graph: str, stack_hz: float | None) -> PerfOptions:
    """The scheduler recorder's options: a stack at every switch (``stack_hz`` 0 or None) with
    the default stack copy, or sampled stacks with ``SAMPLED_STACK_BYTES``."""
    hz = stack_hz or 0.0
    return PerfOptions(freq_hz, call_graph, True, hz,
                       SAMPLED_STACK_BYTES if hz > 0 else PerfOptions.stack_bytes)


def oncpu_chunk_s(freq_hz: int, call_graph: str, duration_s: float | None = None,
                  cpus: int | None = None) -> int:
    """Seconds per chunk of the on-CPU recorder: up to ``CHUNK_S``, or up to ``CHUNK_MAX_S``
    when frame-pointer samples at ``freq_hz`` on every CPU fill fewer than ``CHUNK_SAMPLES``
    in it (99 Hz on 2 CPUs: 60 s; 499 Hz on 2: 12 s; 99 Hz on 8: 15 s), the window split
    evenly (``chunk_seconds``).  A chunk's ``perf script`` costs about the same whatever it
    holds (module docstring), so chunks of few samples are read less often; the bound on
    samples per chunk keeps what is read after the window (the last chunk) short.  DWARF
    samples copy kilobytes of stack each: their chunks last up to ``CHUNK_S``.  What a longer
    chunk costs: a perf killed by SIGKILL loses it whole."""
    if call_graph != "fp" or freq_hz <= 0:
        return chunk_seconds(duration_s)
    n = cpus if cpus is not None else (os.cpu_count() or 1)
    fits = min(CHUNK_MAX_S, CHUNK_SAMPLES / (freq_hz * max(1, n)))
    return chunk_seconds(duration_s, max(CHUNK_S, int(fits)))


def chunk_seconds(duration_s: float | None, longest_s: int = CHUNK_S) -> int:
    """Seconds per chunk (``--switch-output``) of a recorder whose chunks may last up to
    ``longest_s``, for a window of ``duration_s``: a window that fits in one such chunk is
    one chunk, closed when perf stops (its length is perf's own bound, ``record_command``);
    a longer one is split into as few chunks as ``longest_s`` allows, of equal length,
    enough for the window and ``LEAD_S`` besides.  Fixed chunks of ``longest_s`` left a last
    chunk of the fraction of a second the recorder ran past a whole number of them (it starts
    before the window opens and stops after it closes), and each chunk's ``perf script`` has
    a fixed cost whatever the chunk holds (``benchmarks/lab/script_chunk.py``).  No set duration
    (until a launched command exits): ``longest_s``."""
    if duration_s is None or not 0 < duration_s < UNBOUNDED_S:
        return longest_s
    whole = max(1, int(duration_s + 0.999))
    if whole <= longest_s:
        return whole + SLEEP_MARGIN_S
    n = -(-whole // longest_s)
    return -(-(whole + LEAD_S) // n)


def one_chunk(duration_s: float | None) -> bool:
    """Whether a window of ``duration_s`` is one chunk of every recorder (``chunk_seconds``:
    each one's chunks may last ``CHUNK_S`` or more), so that no chunk is closed before the
    window is: the folding process (``collect.stream.StreamProcess``) would have nothing to
    fold during it, and its start (a Python process of its own) is saved by folding after
    the window in the collect itself."""
    return duration_s is not None and 0 < duration_s < UNBOUNDED_S and \
        chunk_seconds(duration_s) > duration_s


def record_command(pid: int | str, out: Path, opts: PerfOptions,
                   duration_s: float | None) -> list[str]:
    """``perf record`` of ``pid`` (one PID, or several joined by commas, as ``-p`` takes them;
    perf follows the processes they fork)."""
    # The window opens only once every recorder is ready (perf -a can take a second to start on
    # a busy machine) and perf is stopped with SIGINT when it closes: the sleep is a bound for a
    # wallflame that died, and must not end the recording before the window does (it did: the
    # on-CPU perf stopped up to a second early, 9% of a 10 s window).
    sleep_s = UNBOUNDED_S if duration_s is None else max(1, int(duration_s + 0.999)) + \
        SLEEP_MARGIN_S
    call_graph = opts.call_graph
    if opts.sched and opts.system_wide and opts.switch_filter is not None:
        return [*_switches_command(opts), *CLOCK, "-a", "-o", str(out),
                f"--switch-output={opts.chunk_s}s", "--", "sleep", str(sleep_s)]
    if opts.sched:
        cmd = [perf_path(), "record", "-e", "sched:sched_switch"]
        cmd += ["-F", f"{max(1, round(opts.stack_hz))}"] if opts.stack_hz > 0 else ["-c", "1"]
        cmd.append("--switch-events")
        if os.geteuid() == 0:
            # Every switch is a record: a larger ring buffer loses fewer events (measured:
            # ~300 PERF_RECORD_LOST in 8 s of samples/bin/mix with DWARF stacks of every
            # switch and the default size).  Only root may lock more than
            # perf_event_mlock_kb.
            cmd += ["-m", "2M"]
        if call_graph == "dwarf":
            call_graph = f"dwarf,{opts.stack_bytes}"
    else:
        cmd = [perf_path(), "record", "-e", "cpu-clock", "-F", str(opts.freq_hz)]
    who = ["-a"] if opts.system_wide and not opts.sched else ["-p", str(pid)]
    # Timestamps in CLOCK_MONOTONIC, the clock of the window's bounds and of a program's own
    # clock_gettime (perf's default clock drifts from it: 2.3 ms after 3 hours of uptime).
    cmd += [*CLOCK, "--call-graph", call_graph, *who, "-o", str(out),
            f"--switch-output={opts.chunk_s}s", "--", "sleep", str(sleep_s)]
    return cmd


def _switches_command(opts: PerfOptions) -> list[str]:
    """The scheduler's ``perf record`` on every CPU (``PerfOptions.switch_filter``), without
    its clock, output and duration."""
    call_graph = opts.call_graph
    if call_graph == "dwarf":
        call_graph = f"dwarf,{opts.stack_bytes}"
    cmd = [perf_path(), "record", "-e", "sched:sched_switch"]
    if opts.switch_filter:
        cmd += ["--filter", opts.switch_filter]
    # --no-period: with the period in each sample, the kernel samples a tracepoint at every
    # hit whatever the period (``perf_swevent_event``: a stack at every switch).
    cmd += ["-c", str(max(1, opts.stack_period)), "--no-period", "--switch-events",
            "--call-graph", call_graph]
    if os.geteuid() == 0:
        cmd += ["-m", "2M"]
    return cmd


#: Every recorder timestamps with ``CLOCK_MONOTONIC``, the clock the window is taken with, so
#: that evidence is clipped to the window exactly.
CLOCK = ["-k", "mono"]


#: The wake-up recorder's events: ``sched_wakeup`` ends a blocked interval (the wakee is on a
#: run queue); with the wakers, ``sched_waking`` names the waker (it fires in the waker's
#: context, where a wake-up done on the wakee's CPU by an interrupt, as the kernel does for
#: an idle CPU, fires ``sched_wakeup`` in whatever task that CPU ran), with its kernel call
#: chain (frame pointers, a few hundred bytes), which tells a timer or an interrupt from the
#: task it interrupted.
WAKEUP_EVENT = "sched:sched_wakeup"
WAKER_EVENT = "sched:sched_waking"


def wake_command(out: Path, wakee_filter: str, duration_s: float | None,
                 chunk_s: int = CHUNK_S, wakers: bool = True) -> list[str]:
    """The wake-ups of the target's threads: ``WAKEUP_EVENT`` and with ``wakers``
    ``WAKER_EVENT`` on every CPU (a
    wake-up runs in the waker's context, often an interrupt or another process, so a
    per-thread event misses most of them), filtered in the kernel on the wakee, no call
    chain.  The time from a
    blocked thread's wake-up to its switch-in is time waiting for a CPU, which the scheduler
    capture alone counts as blocked."""
    sleep_s = UNBOUNDED_S if duration_s is None else max(1, int(duration_s + 0.999)) + \
        SLEEP_MARGIN_S
    cmd = [perf_path(), "record"]
    for event in (WAKEUP_EVENT, f"{WAKER_EVENT}/call-graph=fp/") if wakers else (WAKEUP_EVENT,):
        cmd += ["-e", event]
        if wakee_filter:
            cmd += ["--filter", wakee_filter]
    cmd += ["--kernel-callchains"] if wakers else []
    cmd += ["-c", "1", "-a", *CLOCK]
    if os.geteuid() == 0:
        cmd += ["-m", "1M"]
    return [*cmd, "-o", str(out), f"--switch-output={chunk_s}s", "--", "sleep", str(sleep_s)]


@dataclass
class PerfRecorder:
    """A running ``perf record`` and what it said."""

    command: list[str]
    raw_dir: Path
    stem: str = "perf"
    proc: subprocess.Popen[bytes] | None = None
    stderr_path: Path = field(default_factory=Path)
    returncode: int | None = None
    interrupted: bool = False  # asked to stop (``interrupt``), not yet waited for
    #: Whether perf reads the copy of the kernel's symbols in ``raw/`` (``start``).
    kallsyms_copy: bool = False

    def start(self, pid: int) -> None:
        """Start perf.  Where the run has its copy of the kernel's symbols (``save_kallsyms``)
        perf reads it in place of ``/proc/kallsyms`` (``safety.spawn``): perf reads that file
        twice (for ``_text``, then ``_etext``) when it starts and at every new chunk, and the
        kernel formats its 120,000 lines at each read.  Measured (``perf record -a`` of an
        event that never fires, 10 s, 3 runs): 0.10-0.15 s of system time, 0.01-0.02 s with
        the copy.  The copy is the same text (taken by the same kernel a moment before)."""
        self.stderr_path = self.raw_dir / f"{self.stem}-record.stderr"
        err = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in stop()
        self._err: IO[bytes] = err
        copy = self.raw_dir / KALLSYMS
        try:
            self.proc = spawn(self.command, signal.SIGINT, kallsyms=copy,
                              stdout=subprocess.DEVNULL, stderr=err, cwd=str(self.raw_dir))
        except OSError as e:
            err.close()
            raise ToolError(f"cannot run perf: {e.strerror}",
                            f"apt-get install {package_of('perf')}") from None
        self.kallsyms_copy = reads_copy_of_kallsyms(self.proc.pid, copy)

    def wait_ready(self, timeout_s: float = 30.0) -> bool:
        """Wait until perf's events are enabled: perf execs its ``sleep`` workload only after
        that, so the child turning into ``sleep`` marks the start of recording (perf can take
        most of a second to start on a busy machine; that time must not count as window)."""
        if self.proc is None:
            return False
        deadline = time.monotonic() + timeout_s
        pid = self.proc.pid
        while time.monotonic() < deadline and self.proc.poll() is None:
            children = read_text(f"/proc/{pid}/task/{pid}/children") or ""
            for child in children.split():
                if (read_text(f"/proc/{child}/comm") or "").strip() == "sleep":
                    return True
            time.sleep(0.005)
        return False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def early_failure(self) -> None:
        """Raise a clean error if perf died at once (permission, bad event, bad PID)."""
        if self.proc is None or self.proc.poll() is None:
            return
        text = self.stderr_text()
        if re.search(r"perf_event_paranoid|Permission denied|No permission|EACCES", text):
            raise PermissionDenied(
                "perf may not record this process (perf_event_paranoid)",
                "sysctl -w kernel.perf_event_paranoid=1 (or grant CAP_PERFMON to the user), "
                "or run as root")
        if self.proc.returncode not in (0, 143) and not self.chunks():
            first = next((ln for ln in text.splitlines() if ln.strip()), "no output")
            raise ToolError(f"perf record failed ({self.proc.returncode}): {first}",
                            "run wallflame doctor")

    def interrupt(self) -> None:
        """Ask perf to stop (SIGINT) without waiting: ``stop`` then waits.  The recorders are
        all asked first, so that none records on while another is written out (each takes
        most of a second against a target that fills every CPU)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGINT)
            self.interrupted = True

    def stop(self) -> None:
        if self.proc is not None:
            self.returncode = stop_tool(self.proc, grace_s=10.0,
                                        first=None if self.interrupted else signal.SIGINT)
        err = getattr(self, "_err", None)
        if err is not None:
            err.close()

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def chunks(self) -> list[Path]:
        """The perf.data chunks written so far, oldest first (names end in a timestamp)."""
        return data_chunks(self.raw_dir, self.stem)


def data_chunks(raw_dir: Path, stem: str) -> list[Path]:
    """The chunks in time order: ``STEM.data.<timestamp>`` (perf renames the file it writes
    to that when it switches output or ends), then a ``STEM.data`` perf did not get to rename
    (it was killed); each with ``.zst`` once read (``collect.packed``)."""
    return sorted(packed.keep_packed([p for p in raw_dir.glob(f"{stem}.data*")
                                      if _size(p) > 0]),
                  key=lambda p: (packed.chunk_name(p) == f"{stem}.data", packed.chunk_name(p)))


def _size(path: Path) -> int:
    """A regular file's size; 0 when it is gone: perf renames ``STEM.data`` when it switches
    output, between the listing and the look (a folding process died of it)."""
    try:
        st = path.stat()
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


def lost_from_stderr(text: str) -> tuple[int, list[str]]:
    """Lost chunk count and the lines saying so, from perf record's stderr."""
    lost = 0
    lines = []
    for line in text.splitlines():
        m = _LOST.search(line) or _LOST_EVENTS.search(line)
        if m:
            lost += int(m.groups()[-1])
            lines.append(line.strip())
        elif _LOST_PCT.search(line) or "lost" in line.lower():
            lines.append(line.strip())
    return lost, lines


#: The kernel's symbols when the chunks were recorded (a copy of ``/proc/kallsyms`` in
#: ``raw/``), and those the wake-up chunks need: where the kernel's text lies, and the
#: functions that name a waker (``WAKER_MARKS``), each with the symbol after it (where it
#: ends: an address elsewhere is never named after one of them).
KALLSYMS = "kallsyms"
KALLSYMS_MIN = "kallsyms.min"
_KERNEL_BOUNDS = (b"_text", b"_stext", b"_etext")


def _bound_lines(text: bytes) -> list[tuple[int, bytes]]:
    """The lines of ``/proc/kallsyms`` (``ADDRESS TYPE NAME``) naming one of
    ``_KERNEL_BOUNDS``, not a module's (those end in a tab and ``[module]``), in the file's
    order.  Found by searching for the names rather than by a loop over the 120,000 lines
    (0.05 s of the collect's CPU, a regular expression more)."""
    found = []
    for name in _KERNEL_BOUNDS:
        needle = b" " + name + b"\n"
        at = text.find(needle)
        while at >= 0:
            start = text.rfind(b"\n", 0, at) + 1
            line = text[start:at + len(needle) - 1]
            if b"\t" not in line:
                found.append((start, line))
            at = text.find(needle, at + 1)
        if text.endswith(needle[:-1]):  # the last line, without its newline
            start = text.rfind(b"\n") + 1
            if b"\t" not in text[start:]:
                found.append((start, text[start:]))
    return sorted(found)


def _marker_lines(text: bytes) -> list[tuple[int, bytes]]:
    """The lines of ``/proc/kallsyms`` of every kernel function whose name holds one of
    ``WAKER_MARKS``, each with the line after it, by searching for the names."""
    found: dict[int, bytes] = {}
    for mark in (m.encode() for _, marks in WAKER_MARKS for m in marks):
        at = text.find(mark)
        while at >= 0:
            start = text.rfind(b"\n", 0, at) + 1
            end = text.find(b"\n", at)
            end = len(text) if end < 0 else end
            after = text.find(b"\n", end + 1)
            after = len(text) if after < 0 else after
            for a, b in ((start, end), (end + 1, after)):
                line = text[a:b]
                if line and b"\t" not in line and line.count(b" ") == 2:
                    found[a] = line
            at = text.find(mark, end)
    return sorted(found.items())


def save_kallsyms(raw: Path, source: Path = Path("/proc/kallsyms")) -> bool:
    """Copy ``/proc/kallsyms`` into ``raw/`` once, before recording, for every ``perf
    script`` of the run to read instead of the kernel's own file.

    Without it each ``perf script`` reads ``/proc/kallsyms``, which the kernel formats line by
    line (120,000 lines here): about half of the 0.1 s of CPU each chunk's ``perf script``
    took, whatever the chunk's size, and all but 0.02 s of a wake-up chunk's, which needs
    only where the kernel's text lies.  The copy is also what makes ``raw/`` readable again
    after a reboot (the kernel's addresses move with KASLR).  Not written when the
    addresses are hidden (``kptr_restrict``: all zero); returns whether it was written."""
    try:
        text = source.read_bytes()
    except OSError:
        return False
    first = text[:text.find(b" ")]
    if not first.strip(b"0"):
        return False
    bounds = _bound_lines(text)
    wanted = [line for _, line in sorted(set(bounds + _marker_lines(text)))]
    try:
        (raw / KALLSYMS).write_bytes(text)
        (raw / KALLSYMS_MIN).write_bytes(b"".join(line + b"\n" for line in wanted)
                                         if bounds else text)
    except OSError:
        with contextlib.suppress(OSError):
            (raw / KALLSYMS).unlink()
        return False
    return True


def script_command(chunk: Path, sched: bool, pid: int | str | None = None,
                   kallsyms: bool | None = None, inline: bool = True,
                   switches: bool = True) -> list[str]:
    """``perf script`` of one chunk; ``pid``: only the samples of that process (or of those
    processes, joined by commas): a system-wide on-CPU capture holds every process's.
    ``kallsyms``: read the kernel's symbols from ``raw/`` (``save_kallsyms``); ``None``: when
    the copy is there.  ``inline``: inlined frames resolved (``CollectOptions.inline_frames``);
    without, perf does not run ``addr2line``.  ``switches``: the scheduler's switch records
    printed too (without: they are read from the chunk itself,
    ``wallflame.fold.perf.sched_reader.read_switches``)."""
    cmd = [perf_path(), "script", "-i", str(chunk), "--show-lost-events"]
    if not inline:
        cmd.append("--no-inline")
    wake = chunk.name.startswith(f"{WAKE}.")
    ksyms = chunk.parent / (KALLSYMS_MIN if wake else KALLSYMS)
    if kallsyms or (kallsyms is None and ksyms.is_file()):
        cmd.append(f"--kallsyms={ksyms}")
    if wake:
        return [*cmd, "--ns", "-F", "tid,time,event,trace,ip,sym"]
    if pid is not None and not sched:
        cmd.append(f"--pid={pid}")
    if sched:
        # The fields wallflame.fold.perf.sampled_switches reads; nanosecond times.
        # Task events: which process each thread belongs to (a capture on every CPU names
        # only the thread switched in).
        cmd += ["--ns", *(["--show-switch-events"] if switches else []),
                "--show-task-events", "-F", SCHED_FIELDS]
    return cmd


#: The wake-up recorder's file stem.
WAKE = WAKE_STEM
#: ``perf script -F`` of the scheduler capture.
SCHED_FIELDS = "comm,pid,tid,time,period,event,trace,ip,sym,dso"


def write_script(chunks: list[Path], out: IO[bytes], sched: bool, err: IO[bytes]) -> Iterator[
        tuple[Path, int]]:
    """Run ``perf script`` on each chunk in order, streaming its text into ``out``.

    Yields ``(chunk, returncode)``; a chunk perf cannot read (truncated by a kill) yields a
    non-zero code and is counted by the caller, never silently skipped.
    """
    for chunk in chunks:
        try:
            proc = subprocess.Popen(script_command(chunk, sched), stdout=subprocess.PIPE,
                                    stderr=err, stdin=subprocess.DEVNULL, env=tool_env())
        except OSError:
            yield chunk, -1
            continue
        stdout = proc.stdout
        assert stdout is not None
        while block := stdout.read(1 << 16):
            out.write(block)
        yield chunk, proc.wait()
