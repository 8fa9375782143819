"""``wallflame doctor``: tools, kernel settings, and the target's binary, with fixes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from livehelp import start_mix, stop_mix

from wallflame.commands.doctor import frame_pointer_share

DOCTOR = [sys.executable, "-m", "wallflame", "doctor"]


def test_doctor_checks_tools_and_settings() -> None:
    r = subprocess.run(DOCTOR, capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in r.stderr
    for item in ("perf", "eu-stack", "gdb", "perf_event_paranoid", "kptr_restrict"):
        assert item in r.stdout
    assert "ptrace_scope" in r.stdout
    failed = [ln for ln in r.stdout.splitlines() if ln.startswith("FAIL")]
    assert (r.returncode == 0) == (not failed), r.stdout


@pytest.mark.live
def test_doctor_on_a_frame_pointer_build(live: None, sample_bin: Path) -> None:
    mix = start_mix(sample_bin, "--threads", "1", "--duration", "30")
    try:
        r = subprocess.run([*DOCTOR, "--pid", str(mix.pid)], capture_output=True, text=True,
                           timeout=120, check=False)
    finally:
        stop_mix(mix)
    assert r.returncode == 0, r.stdout
    assert f"PID {mix.pid}: mix" in r.stdout
    assert "threads: 3" in r.stdout  # main, the ticker, one worker
    assert "debug info: yes" in r.stdout
    assert "symbol table: yes" in r.stdout
    fp = [ln for ln in r.stdout.splitlines() if "frame pointers:" in ln]
    assert fp and fp[0].lstrip().startswith("ok"), r.stdout


def test_frame_pointer_share_tells_builds_apart(tmp_path: Path) -> None:
    src = tmp_path / "f.c"
    src.write_text("int g(int x){return x*3+1;}\nint f(int x){return g(x)+g(x+1);}\n"
                   "int main(int c, char **v){(void)v; return f(c);}\n")
    shares = {}
    for flag in ("-fno-omit-frame-pointer", "-fomit-frame-pointer"):
        exe = tmp_path / flag
        subprocess.run(["cc", "-O2", "-fno-inline", flag, "-o", str(exe), str(src)], check=True)
        shares[flag] = frame_pointer_share(str(exe))
    with_fp, without = shares["-fno-omit-frame-pointer"], shares["-fomit-frame-pointer"]
    assert with_fp is not None and without is not None
    assert with_fp > without


def test_doctor_missing_pid_is_a_target_error() -> None:
    r = subprocess.run([*DOCTOR, "--pid", "4194000"], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 4
    assert "FAIL  PID 4194000: no process with PID 4194000" in r.stdout
    assert "Traceback" not in r.stderr
