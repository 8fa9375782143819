"""A fresh gdb dump of ``samples/bin/mix`` -> Profile."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from wallflame.fold import gdb
from wallflame.fold.options import FoldOptions
from wallflame.profile import Profile

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


def test_live_gdb_dump_of_mix(sample_bin: Path, live: None, tmp_path: Path) -> None:
    """A fresh gdb dump of mix: every worker thread is found with its name and LWP, and the
    mix functions appear under the names they have in the source."""
    proc = subprocess.Popen([str(sample_bin / "mix"), "--threads", "3", "--duration", "10"],
                            stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        gdb_bin = shutil.which("gdb")
        assert gdb_bin
        r = subprocess.run([gdb_bin, "-nx", "-batch", "-iex", "set auto-load off", "-iex",
                            "set debuginfod enabled off", "-ex", "thread apply all bt",
                            "-p", str(proc.pid)], capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin", "DEBUGINFOD_URLS": ""}, check=False)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    path = tmp_path / "bt.txt"
    path.write_text(r.stdout)
    p = Profile()
    gdb.fold(str(path), FoldOptions(), p)
    threads = {k.thread for k in p.stacks}
    assert threads == {"mix", "mix-ticker", "mix-1", "mix-2", "mix-3"}
    assert {k.pid for k in p.stacks} == {proc.pid}
    workers = [k for k in p.stacks if k.thread.startswith("mix-") and k.thread != "mix-ticker"]
    for k in workers:
        assert k.frames[:4] == ("clone3", "start_thread", "worker_main", "worker_loop")
    names = {f for k in p.stacks for f in k.frames}
    assert {"main", "nap", "ticker", "worker_loop", "worker_main"} <= names
