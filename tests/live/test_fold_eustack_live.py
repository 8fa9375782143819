"""A fresh eu-stack dump of ``samples/bin/mix`` -> Profile: every thread, one pid, the
source's names."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from wallflame.fold import eustack
from wallflame.fold.options import FoldOptions
from wallflame.profile import Profile

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


def test_live_eustack_dump_of_mix(sample_bin: Path, live: None, tmp_path: Path) -> None:
    proc = subprocess.Popen([str(sample_bin / "mix"), "--threads", "2", "--duration", "10"],
                            stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        r = subprocess.run(["eu-stack", "-i", "-m", "-p", str(proc.pid)], capture_output=True,
                           text=True, timeout=60, check=False)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    path = tmp_path / "eu.txt"
    path.write_text(r.stdout)
    p = Profile()
    eustack.fold(str(path), FoldOptions(), p)
    assert {k.tid for k in p.stacks} >= {proc.pid}
    assert len({k.tid for k in p.stacks}) == 4  # main, ticker, two workers
    assert {k.pid for k in p.stacks} == {proc.pid}
    names = {f for k in p.stacks for f in k.frames}
    assert {"main", "nap", "ticker", "worker_main", "worker_loop", "start_thread"} <= names
