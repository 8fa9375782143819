"""``wallflame doctor`` on a running target: its binary's debug info, symbols and frame
pointers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from livehelp import WALLFLAME, start_mix, stop_mix

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


def test_doctor_on_a_frame_pointer_build(live: None, sample_bin: Path) -> None:
    mix = start_mix(sample_bin, "--threads", "1", "--duration", "30")
    try:
        r = subprocess.run([*WALLFLAME, "doctor", "--pid", str(mix.pid)], capture_output=True,
                           text=True, timeout=120, check=False)
    finally:
        stop_mix(mix)
    assert r.returncode == 0, r.stdout
    assert f"PID {mix.pid}: mix" in r.stdout
    assert "threads: 3" in r.stdout  # main, the ticker, one worker
    assert "debug info: yes" in r.stdout
    assert "symbol table: yes" in r.stdout
    fp = [ln for ln in r.stdout.splitlines() if "frame pointers:" in ln]
    assert fp and fp[0].lstrip().startswith("ok"), r.stdout
