"""Live: a launched command's processes forked during the window are profiled with it (its
perf follows them; their on-CPU samples used to be dropped by a filter on the command's own
PID)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT
from livehelp import WALLFLAME

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


def test_a_child_forked_during_the_window_keeps_its_samples(sample_bin: Path,
                                                            tmp_path: Path) -> None:
    """prefork forks its late worker 1 s into a 3 s window; the worker spins in spin_work
    (five runs on the shared 2-core machine: 0.654-0.668 s on-CPU): it is in the summary
    with on-CPU time under its own PID, its stacks resolved."""
    run = tmp_path / "run"
    r = subprocess.run([*WALLFLAME, "collect", "-o", str(run), "-d", "3", "--",
                        str(sample_bin / "prefork"), "--workers", "1", "--late", "1",
                        "--duration", "4"], cwd=ROOT, capture_output=True, text=True,
                       timeout=180, check=False)
    assert r.returncode == 0, r.stderr
    out = (run / "raw" / "target.stdout").read_text().strip().splitlines()[-1]
    late = next(p["pid"] for p in json.loads(out)["processes"]
                if p["title"] == "prefork: late worker")
    s = json.loads((run / "summary.json").read_text())
    rows = {t["tid"]: t for t in s["threads"]}
    assert late in rows, rows
    assert rows[late]["on_cpu_s"] > 0.1, rows[late]
    on = (run / "oncpu.folded").read_text()
    assert "spin_work" in on
