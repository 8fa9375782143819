"""``wallflame doctor``: tools, kernel settings, and the target's binary, with fixes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
