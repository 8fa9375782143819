"""Multi-process targets, live: a pre-fork sample under --pid-tree and --pid, and the processes
of a cgroup."""

from __future__ import annotations

import html
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT
from livehelp import WALLFLAME, wait_window_open

from wallflame.collect import procs
from wallflame.errors import InputError

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


def test_pid_tree_covers_every_process_named_with_a_late_fork(sample_bin: Path,
                                                               tmp_path: Path) -> None:
    """prefork (2 workers, an idle helper, a worker forked 1 s into the window, a hostile
    title): every process is in the summary under its title, the late one marked as joined,
    the idle helper with its whole blocked time, no unknown frame; the HTML shows the hostile
    title only escaped.  The late worker is forked when the test sees the window open (its
    start in ``raw/capture.json``), not at a set time: on a busy machine the collect's start
    took over 3 s once, and a worker forked 4 s after prefork's start was there before it."""
    proc = subprocess.Popen([str(sample_bin / "prefork"), "--workers", "2", "--duration", "20",
                             "--late-on-usr1", "--hostile"], stdout=subprocess.PIPE)
    try:
        time.sleep(1)
        run = tmp_path / "run"
        col = subprocess.Popen([*WALLFLAME, "collect", "--pid-tree", str(proc.pid), "-d", "6",
                                "-o", str(run)], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        opened = wait_window_open(run, col, 120)
        if opened:
            time.sleep(1)
            proc.send_signal(signal.SIGUSR1)
        _, err = col.communicate(timeout=180)
        assert col.returncode == 0, err
        assert opened, "the collect's window never opened"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    truth = json.loads(out.decode().strip().splitlines()[-1])
    s = json.loads((run / "summary.json").read_text())
    names = {g["name"]: g for g in s["processes"]}
    assert {"prefork: master", "prefork: worker 2", "prefork: idle helper",
            "prefork: late worker"} <= set(names), names
    assert sorted(p for g in s["processes"] for p in g["pids"]) == sorted(
        [truth["master"], *(p["pid"] for p in truth["processes"])])
    assert names["prefork: late worker"]["joined"] == 1
    assert names["prefork: late worker"]["on_cpu_s"] > 0
    assert names["prefork: idle helper"]["off_cpu_s"] > 0.5 * s["window_s"]
    for w in ("prefork: worker 2",):
        assert names[w]["on_cpu_s"] > 0.2, names[w]
    assert s["quality"]["unknown_frame_share"] < 0.05
    hostile = next(n for n in names if "<img" in n)
    page = subprocess.run([*WALLFLAME, "report", str(run), "-o", str(tmp_path / "r.html")],
                          capture_output=True, text=True, check=False)
    assert page.returncode == 0, page.stderr
    text = (tmp_path / "r.html").read_text()
    assert "<img src=x" not in text and "\x1b" not in text
    assert html.escape(hostile, quote=False)[:20] in text or "\\u003cimg" in text


def test_pid_repeated_profiles_exactly_those_processes(sample_bin: Path,
                                                       tmp_path: Path) -> None:
    proc = subprocess.Popen([str(sample_bin / "prefork"), "--workers", "3", "--duration", "10"],
                            stdout=subprocess.PIPE)
    try:
        time.sleep(1)
        kids = sorted(int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
                      .read_text().split())
        run = tmp_path / "run"
        r = subprocess.run([*WALLFLAME, "collect", "--pid", str(kids[0]), "--pid",
                            str(kids[1]), "-d", "3", "-o", str(run)], cwd=ROOT,
                           capture_output=True, text=True, timeout=180, check=False)
        assert r.returncode == 0, r.stderr
    finally:
        proc.communicate(timeout=60)
    s = json.loads((run / "summary.json").read_text())
    assert sorted(p for g in s["processes"] for p in g["pids"]) == kids[:2]
    assert {r["pid"] for r in s["threads"]} == set(kids[:2])
    assert os.path.exists(run / f"raw/snapshots.{kids[1]}.log")


def _cgroup2_dir(tmp_name: str) -> Path | None:
    """A new cgroup v2 directory, or None where none can be made (not root, no v2 mount)."""
    try:
        root = procs.cgroup2_root()
        d = root / tmp_name
        d.mkdir()
    except (OSError, InputError):
        return None
    return d


def test_cgroup_profiles_exactly_its_processes(sample_bin: Path, tmp_path: Path) -> None:
    """Two processes moved into a new cgroup v2 directory (one of them in a sub-directory)
    and one left outside: ``--cgroup`` profiles exactly the two, each under its own pid, with
    its threads' time; the one outside is in no file of the run."""
    d = _cgroup2_dir(f"wallflame-test-{os.getpid()}")
    if d is None:
        pytest.skip("no cgroup v2 directory can be made here (root and a cgroup2 mount needed)")
    sub = d / "inner"
    started = [subprocess.Popen([str(sample_bin / "mix"), "--threads", "2", "--duration", "12"],
                                stdout=subprocess.DEVNULL) for _ in range(3)]
    inside, outside = started[:2], started[2]
    try:
        sub.mkdir()
        (d / "cgroup.procs").write_text(str(inside[0].pid))
        (sub / "cgroup.procs").write_text(str(inside[1].pid))
        time.sleep(0.5)
        run = tmp_path / "run"
        r = subprocess.run([*WALLFLAME, "collect", "--cgroup", str(d), "-d", "3", "-o",
                            str(run)], cwd=ROOT, capture_output=True, text=True, timeout=180,
                           check=False)
        assert r.returncode == 0, r.stderr
        s = json.loads((run / "summary.json").read_text())
        pids = sorted(p for g in s["processes"] for p in g["pids"])
        assert pids == sorted(p.pid for p in inside), s["processes"]
        by_pid = {p: g for g in s["processes"] for p in g["pids"]}
        for p in inside:
            assert by_pid[p.pid]["on_cpu_s"] > 0.1, by_pid[p.pid]
        for name in ("oncpu.folded", "offcpu.folded"):
            assert f"-{outside.pid}/" not in (run / name).read_text(errors="replace"), name
    finally:
        for p in started:
            p.kill()
            p.wait(timeout=30)
        for c in (sub, d):  # empty now: the processes have exited
            for _ in range(50):
                try:
                    c.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
