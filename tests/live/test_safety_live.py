"""G1: whatever happens to wallflame, the target is never left stopped or traced, and no
perf, gdb or eu-stack process outlives the collection by more than a few seconds.

One long-running target serves every trial; each trial starts ``wallflame collect`` and sends
it a signal at a random moment (seeded, so a failure can be replayed)."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from livehelp import WALLFLAME, harmed, load, mix_stderr, start_mix, stop_mix, wait_clean

from wallflame.collect.target import thread_states

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


DURATION = 3
TRIALS = 20


@pytest.fixture
def target(live: None, sample_bin: Path):  # type: ignore[no-untyped-def]
    mix = start_mix(sample_bin, "--threads", "3", "--duration", "900")
    yield mix
    stop_mix(mix)


def _trial(pid: int, run: Path, sig: int, delay: float, backend: str) -> str:
    proc = subprocess.Popen([*WALLFLAME, "collect", "--pid", str(pid), "--duration",
                             str(DURATION), "--pmp-backend", backend, "-o", str(run)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(delay)
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=DURATION + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return (f"wallflame did not end after {signal.Signals(sig).name} at {delay:.2f}s "
                f"({backend})")
    if b"Traceback" in err:
        return f"traceback after {signal.Signals(sig).name}: {err.decode()[-300:]}"
    # Tools must be gone (and the target running) within the duration plus a few seconds.
    h, left = wait_clean(pid, run, DURATION + 5)
    if h or left:
        return (f"{signal.Signals(sig).name} at {delay:.2f}s ({backend}): harmed={h} "
                f"leftovers={left}")
    return ""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_signal_at_random_moments_never_harms_target(target: subprocess.Popen[bytes],
                                                     tmp_path: Path, sig: int) -> None:
    rng = random.Random(1000 + sig)
    failures = []
    for i in range(TRIALS):
        backend = ("libdw", "eu-stack", "gdb", "gdb-batch")[i % 4]
        msg = _trial(target.pid, tmp_path / f"run{i}", sig, rng.uniform(0.1, DURATION),
                     backend)
        if msg:
            failures.append(msg)
        assert target.poll() is None, (
            f"the target died (exit {target.returncode}) in trial {i} ({backend}, "
            f"{signal.Signals(sig).name}): {mix_stderr(target) or 'no signal reported'}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_interrupt_keeps_what_was_collected(target: subprocess.Popen[bytes], tmp_path: Path,
                                            sig: int) -> None:
    run = tmp_path / "run"
    proc = subprocess.Popen([*WALLFLAME, "collect", "--pid", str(target.pid), "--duration",
                             "30", "-o", str(run)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    # Interrupt once collection is under way: four snapshots logged and perf recording
    # for a second (startup takes a variable time on a busy machine).
    log = run / "raw" / "snapshots.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if log.exists() and log.read_text(errors="replace").count("\nTS ") >= 4 \
                and _perf_recording(run):
            break
        time.sleep(0.05)
    time.sleep(1.0)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    meta = load(run, "meta.json")
    assert meta["ended_by"] == signal.Signals(sig).name
    assert 0.5 < meta["window"]["window_ns"] / 1e9 < 30
    assert meta["pmp"]["snapshots"] >= 4
    assert list((run / "raw").glob("perf.data*"))
    assert (run / "summary.json").exists()
    h, left = wait_clean(target.pid, run, 5)
    assert not h and not left


def _perf_recording(run: Path) -> bool:
    """perf runs its ``sleep`` workload once its events are enabled."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            children = (entry / "task" / entry.name / "children").read_text().split()
        except OSError:
            continue
        perf = argv[:2] == [b"perf", b"record"] or argv[0].endswith(b"/perf")
        if perf and str(run).encode() in b" ".join(argv) and children:
            return True
    return False


@pytest.mark.parametrize("backend", ["libdw", "eu-stack", "gdb"])
def test_stopped_target_stays_stopped(target: subprocess.Popen[bytes], tmp_path: Path,
                                      backend: str) -> None:
    target.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while set(thread_states(target.pid).values()) != {"T"} and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        run = tmp_path / "run"
        r = subprocess.run([*WALLFLAME, "collect", "--pid", str(target.pid), "--duration", "2",
                            "--pmp-backend", backend, "-o", str(run)], capture_output=True,
                           text=True, timeout=60, check=False)
        assert r.returncode == 0, r.stderr
        time.sleep(0.5)
        assert set(thread_states(target.pid).values()) == {"T"}, thread_states(target.pid)
        meta = load(run, "meta.json")
        assert meta["target"]["stopped_at_start"] is True
        assert any("stays stopped" in w for w in meta["warnings"])
    finally:
        target.send_signal(signal.SIGCONT)
    time.sleep(0.3)
    assert not harmed(target.pid)
