"""Helpers shared by the live collection tests: targets, wallflame runs, leftover checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from wallflame.collect.target import read_stat, thread_states, tracer_of
from wallflame.systools import find_program, missing_message

WALLFLAME = [sys.executable, "-m", "wallflame"]


def need(*progs: str) -> list[str]:
    """The paths of ``progs`` (on PATH or in the sbin directories).  One not found skips the
    test, or fails it under WALLFLAME_REQUIRE_LIVE=1 (the test script: the machine must have
    it), with the package that provides it."""
    paths = [find_program(p) for p in progs]
    missing = "; ".join(missing_message(p) for p, path in zip(progs, paths, strict=True)
                        if path is None)
    if missing and os.environ.get("WALLFLAME_REQUIRE_LIVE") != "1":
        pytest.skip(missing)
    assert not missing, missing
    return [p for p in paths if p is not None]


#: Where each started mix writes its stderr (by pid): it names the sender of a signal that
#: ended it (``MIX_REPORT_SIGNAL``).
_MIX_STDERR: dict[int, Path] = {}


def start_mix(sample_bin: Path, *args: str) -> subprocess.Popen[bytes]:
    fd, name = tempfile.mkstemp(prefix="mix-stderr-")
    with os.fdopen(fd, "wb") as err:
        proc = subprocess.Popen([str(sample_bin / "mix"), *args], stdout=subprocess.PIPE,
                                stderr=err, env={**os.environ, "MIX_REPORT_SIGNAL": "1"})
    _MIX_STDERR[proc.pid] = Path(name)
    deadline = time.monotonic() + 5
    while len(thread_states(proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc


def mix_stderr(proc: subprocess.Popen[bytes]) -> str:
    """What a mix started by ``start_mix`` wrote on stderr (how it ended, if by a signal)."""
    path = _MIX_STDERR.get(proc.pid)
    try:
        return path.read_text(errors="replace").strip() if path else ""
    except OSError:
        return ""


def stop_mix(proc: subprocess.Popen[bytes]) -> str:
    if proc.poll() is None:
        os.kill(proc.pid, 18)  # SIGCONT, in case a test stopped it
        proc.terminate()
    out, _ = proc.communicate(timeout=20)
    path = _MIX_STDERR.pop(proc.pid, None)
    if path is not None:
        path.unlink(missing_ok=True)
    return out.decode()


def collect(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*WALLFLAME, "collect", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def harmed(pid: int) -> list[str]:
    """What is wrong with the target now: stopped or traced threads."""
    problems = []
    for tid, state in thread_states(pid).items():
        if state in ("T", "t"):
            problems.append(f"thread {tid} state {state}")
        tr = tracer_of(pid, tid)
        if tr:
            problems.append(f"thread {tid} traced by {tr}")
    return problems


def leftovers(pid: int, run_dir: Path) -> list[str]:
    """Tool processes still aimed at the target or writing into the run directory."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            raw = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]
        if not argv:
            continue
        tool = os.path.basename(argv[0])
        aimed = str(pid) in argv or any(str(run_dir) in a for a in argv)
        st = read_stat(int(entry))
        if aimed and tool in ("perf", "gdb", "eu-stack") and st and st.state != "Z":
            out.append(f"{entry}: {' '.join(argv)[:120]}")
    return out


def wait_clean(pid: int, run_dir: Path, within_s: float) -> tuple[list[str], list[str]]:
    deadline = time.monotonic() + within_s
    while True:
        h, left = harmed(pid), leftovers(pid, run_dir)
        if (not h and not left) or time.monotonic() > deadline:
            return h, left
        time.sleep(0.1)


def wait_window_open(run_dir: Path, collect: subprocess.Popen[str], within_s: float) -> bool:
    """Wait until the collect writing ``run_dir`` has opened its window (its start is in
    ``raw/capture.json``); False if it ended or ``within_s`` passed first."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and collect.poll() is None:
        try:
            window = json.loads((run_dir / "raw" / "capture.json").read_text()).get("window")
        except (OSError, ValueError):
            window = None
        if window and window.get("mono_start_ns"):
            return True
        time.sleep(0.05)
    return False


def load(run_dir: Path, name: str) -> Any:
    return json.loads((run_dir / name).read_text(encoding="utf-8"))


#: Microseconds per stop the scheduler's figure of a thread's stops may fall outside the
#: tracer's own bounds (measured: tests/live/test_tracer_stops_live.py).
SLACK_US = 150.0


def stops_against_bounds(summary: dict[str, object]) -> list[tuple[str, float, float, int]]:
    """Per thread stopped by the tracer: (name, us below the lower bound per stop, us above the
    upper bound per stop, stops); positive means outside."""
    ts = summary["tracer_stops"]
    assert isinstance(ts, dict)
    out = []
    for t in ts["threads"]:
        if "timed_s" not in t:
            continue
        lo, hi = t["timed_s"]
        n = int(t["stops"])
        blocked = t["s"] - t.get("runnable_s", 0.0)
        out.append((str(t["name"]), (lo - blocked) * 1e6 / n, (blocked - hi) * 1e6 / n, n))
    return out
