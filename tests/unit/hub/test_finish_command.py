"""wallflame finish: a run directory rebuilt from raw/ (after a killed collect, live:
``tests/live/test_finish_command_live.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from livehelp import load

from wallflame.cli import cli
from wallflame.collect.target import read_stat
from wallflame.commands.finish import RECONSTRUCTED, writers
from wallflame.errors import EXIT_INPUT
from wallflame.rundir import CAPTURE, RUNNING

FIX = FIXTURES


def finish(run: Path) -> tuple[int, str]:
    r = CliRunner().invoke(cli, ["finish", str(run)])
    return r.exit_code, r.output


@pytest.mark.parametrize("case", ["missing", "file", "no-raw", "empty-raw"])
def test_what_cannot_be_finished_is_one_line_and_exit_3(tmp_path: Path, case: str) -> None:
    run = tmp_path / "run"
    if case == "file":
        run.write_text("x")
    elif case == "no-raw":
        run.mkdir()
    elif case == "empty-raw":
        (run / "raw").mkdir(parents=True)
        (run / "raw" / "perf.data").write_bytes(b"")  # a perf that never wrote
    code, out = finish(run)
    assert code == EXIT_INPUT, out
    assert out.startswith("wallflame: error: ") and out.count("\n") == 1, out
    assert "Traceback" not in out


def test_a_run_still_being_collected_is_refused(tmp_path: Path) -> None:
    raw = tmp_path / "run" / "raw"
    raw.mkdir(parents=True)
    (raw / "snapshots.log").write_text("x\n")
    me = read_stat(os.getpid())
    assert me is not None
    (raw / CAPTURE).write_text(json.dumps({RUNNING: {"pid": os.getpid(),
                                                     "start_ticks": me.start_ticks}}))
    code, out = finish(tmp_path / "run")
    assert code == EXIT_INPUT and f"still being collected by PID {os.getpid()}" in out, out
    # a tool still working in raw/ (the tools run there) is refused too
    (raw / CAPTURE).write_text("{}")
    sleeper = subprocess.Popen(["sleep", "30"], cwd=raw)
    try:
        deadline = time.monotonic() + 5
        while not writers(raw) and time.monotonic() < deadline:
            time.sleep(0.02)
        code, out = finish(tmp_path / "run")
        assert code == EXIT_INPUT and f"sleep (PID {sleeper.pid})" in out, out
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_raw_folder_without_capture_json_is_finished_from_its_files(tmp_path: Path) -> None:
    raw = tmp_path / "run" / "raw"
    raw.mkdir(parents=True)
    log = FIX / "eustack" / "mix-wallflame.log"
    (raw / "snapshots.log").write_bytes(log.read_bytes())
    code, out = finish(tmp_path / "run")
    assert code == 0, out
    cap = load(raw, CAPTURE)
    assert cap[RECONSTRUCTED] and cap["options"]["off_cpu"] == "pmp"
    assert cap["options"]["pmp_backend"] == "eu-stack"
    meta = load(tmp_path / "run", "meta.json")
    assert any("capture.json was missing" in w for w in meta["warnings"])
    summary = load(tmp_path / "run", "summary.json")
    assert summary["threads"] and summary["totals"]["off_cpu_s"] > 0
