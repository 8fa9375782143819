"""pt-pmp itself on ``samples/bin/mix``: its aggregated output against our fold of its raw
log."""

from __future__ import annotations

from pathlib import Path

import pytest

from wallflame.fold import gdb, ptpmp
from wallflame.fold.options import FoldOptions
from wallflame.profile import Profile

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


def test_live_pt_pmp_agrees_with_our_fold_of_its_raw_log(sample_bin: Path, live: None,
                                                          tmp_path: Path) -> None:
    """Run pt-pmp itself on mix: its aggregated counts equal our fold of the raw log it saved,
    stack for stack (names normalized the same way on both sides)."""
    import shutil
    import signal
    import subprocess
    import time

    if shutil.which("pt-pmp") is None:
        pytest.skip("pt-pmp (percona-toolkit) is not installed")
    mix = subprocess.Popen([str(sample_bin / "mix"), "--threads", "2", "--duration", "20"],
                           stdout=subprocess.DEVNULL)
    raw = tmp_path / "raw.txt"
    try:
        time.sleep(0.5)
        r = subprocess.run(["pt-pmp", "--save-samples", str(raw), "--iterations", "2",
                            "--interval", "0", "--pid", str(mix.pid)],
                           capture_output=True, text=True, timeout=120, check=False)
    finally:
        mix.send_signal(signal.SIGINT)
        mix.wait(timeout=30)
    assert r.returncode == 0, r.stderr
    agg = tmp_path / "agg.txt"
    agg.write_text(r.stdout)
    aggregated = Profile()
    ptpmp.fold(str(agg), FoldOptions(), aggregated)
    theirs = {k.frames: w for k, w in aggregated.stacks.items()}
    untimed = tmp_path / "untimed.txt"
    untimed.write_text("\n".join(ln for ln in raw.read_text().splitlines()
                                 if not ln.startswith("TS ")))
    mine = Profile()
    gdb.fold(str(untimed), FoldOptions(snapshot_interval_ns=1), mine)
    ours: dict[tuple[str, ...], int] = {}
    for k, w in mine.stacks.items():
        ours[k.frames] = ours.get(k.frames, 0) + w
    assert ours == theirs
    assert sum(theirs.values()) == 2 * 4  # two dumps of main, ticker and two workers
