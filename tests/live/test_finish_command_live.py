"""wallflame finish, live: a run directory rebuilt from raw/ after its collect was killed, and
from its compressed chunks."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from livehelp import WALLFLAME, load, start_mix, stop_mix, wait_clean

from wallflame.rundir import CAPTURE

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


def test_a_killed_collect_is_finished(live: None, sample_bin: Path, tmp_path: Path) -> None:
    """SIGKILL wallflame mid-collection: raw/ keeps what the tools wrote, raw/capture.json
    describes the run up to its last update, and `wallflame finish` builds the run."""
    mix = start_mix(sample_bin, "--threads", "4", "--duration", "60")
    run = tmp_path / "run"
    proc = subprocess.Popen([*WALLFLAME, "collect", "--pid", str(mix.pid), "-o", str(run),
                             "--duration", "60"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        cap = run / "raw" / CAPTURE
        deadline = time.monotonic() + 60
        # running for a few seconds: the window has started and been updated
        while time.monotonic() < deadline:
            if cap.exists() and json.loads(cap.read_text()).get("window", {}).get(
                    "window_ns", 0) > 3e9:
                break
            time.sleep(0.1)
        else:
            pytest.fail("capture.json never showed a 3 s window")
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        harmed, left = wait_clean(mix.pid, run, 15)
        assert harmed == [] and left == [], (harmed, left)
        assert not (run / "summary.json").exists()
        r = subprocess.run([*WALLFLAME, "finish", str(run)], capture_output=True, text=True,
                           timeout=120, check=False)
        assert r.returncode == 0, r.stderr
        assert "did not finish" in r.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        stop_mix(mix)
    meta = load(run, "meta.json")
    assert meta["ended_by"] == "collect did not finish"
    assert 3.0 <= meta["window"]["window_ns"] / 1e9 < 10
    summary = load(run, "summary.json")
    workers = [t for t in summary["threads"] if re.fullmatch(r"mix-\d+", str(t["name"]))]
    assert len(workers) == 4
    assert all(t["on_cpu_s"] > 0 for t in workers), workers
    # the window (to the last update of capture.json) covers what the tools recorded
    assert all(0.8 < t["coverage"] < 1.2 for t in summary["threads"]), summary["threads"]
    assert summary["totals"]["off_cpu_s"] > 0
    assert (run / "oncpu.folded").read_text().count("\n") > 5
    r = subprocess.run([*WALLFLAME, "report", str(run)], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0 and (run / "report.html").exists(), r.stderr


def test_a_run_finished_again_from_its_compressed_chunks_is_the_same(
        live: None, sample_bin: Path, tmp_path: Path) -> None:
    """The chunks are kept compressed once read (collect.packed); `wallflame finish` reads them
    again, unpacked one at a time under perf's own names, and gives the same files."""
    run = tmp_path / "run"
    r = subprocess.run([*WALLFLAME, "collect", "-o", str(run), "--duration", "3", "--",
                        str(sample_bin / "mix"), "--duration", "3"], capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    data = sorted(p.name for p in (run / "raw").iterdir() if ".data" in p.name)
    assert data and all(n.endswith(".zst") for n in data), data
    assert {n.split(".")[0] for n in data} == {"perf", "sched", "wake"}
    packed = load(run, "meta.json")["postprocess"]["packed"]
    assert packed["chunks"] == len(data) and packed["mb_out"] < packed["mb_in"]
    again = _finished_again(run, tmp_path / "again")
    assert sorted(p.name for p in (again / "raw").iterdir() if ".data" in p.name) == data


def test_chunks_read_in_the_window_fold_as_when_read_after_it(
        live: None, sample_bin: Path, tmp_path: Path) -> None:
    """An attached collect reads each finished chunk while its window is still open (its
    scheduler chunks' switch records from the file, as `finish` reads them afterwards): a
    14 s window closes the first chunk of the scheduler's and the wake-ups' recorders inside it
    (``chunk_seconds``: two of 9 s).  Finished again from the kept chunks, every chunk read
    after the window, the run gives the same files."""
    mix = start_mix(sample_bin, "--threads", "3", "--duration", "40")
    run = tmp_path / "run"
    try:
        r = subprocess.run([*WALLFLAME, "collect", "--pid", str(mix.pid), "-o", str(run),
                            "--duration", "14"], capture_output=True, text=True, timeout=180,
                           check=False)
    finally:
        stop_mix(mix)
    assert r.returncode == 0, r.stderr
    cost = load(run, "meta.json")["postprocess"]["cost"]
    assert cost["chunks_during_window"] >= 1, cost
    _finished_again(run, tmp_path / "again")


def _finished_again(run: Path, again: Path) -> Path:
    """A copy of ``run`` finished again by `wallflame finish`: its folded stacks, summary and
    slices are the run's own (its path aside)."""
    shutil.copytree(run, again)
    r = subprocess.run([*WALLFLAME, "finish", str(again)], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    for name in ("oncpu.folded", "offcpu.folded", "summary.json", "slices.json"):
        first = (run / name).read_text()
        second = (again / name).read_text().replace(str(again), str(run))
        assert first == second, name
    return again
