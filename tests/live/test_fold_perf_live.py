"""perf on ``samples/bin/mix`` -> Profile: the workers' on-CPU stacks and the CPU time the
kernel accounted."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wallflame.collect.machine import machine_ticks
from wallflame.fold import perf
from wallflame.fold.options import FoldOptions
from wallflame.profile import Profile

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


_RUSAGE = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, "
           "stdout=subprocess.DEVNULL); r = resource.getrusage(resource.RUSAGE_CHILDREN); "
           "print(round((r.ru_utime + r.ru_stime) * 1e9))")


def test_live_mix_on_cpu(live: None, sample_bin: Path, tmp_path: Path) -> None:
    """perf runs mix for 2 s: its workers' on-CPU stacks, and the sum of periods equals the
    CPU time the kernel accounted to mix (perf counts from exec to exit, like rusage)."""
    data = tmp_path / "perf.data"
    t0, m0 = time.monotonic(), machine_ticks()
    rec = subprocess.run(["perf", "record", "-q", "-F", "499", "-g", "-e", "cpu-clock", "-o",
                          str(data), "--", sys.executable, "-c", _RUSAGE,
                          str(sample_bin / "mix"), "--duration", "2"],
                         capture_output=True, text=True, check=True, timeout=120)
    t1, m1 = time.monotonic(), machine_ticks()
    cpu_ns = int(rec.stdout.split()[-1])
    script = subprocess.run(["perf", "script", "-i", str(data)], capture_output=True,
                            check=True, timeout=120).stdout
    p = Profile()
    perf.fold_stream(io.BytesIO(script), FoldOptions(), p)
    mix = {k: w for k, w in p.stacks.items() if k.thread.startswith("mix")}
    workers = {k for k in mix if k.thread in ("mix-1", "mix-2", "mix-3")}
    under = [k.frames[k.frames.index("worker_loop") + 1:] for k in workers
             if "worker_loop" in k.frames]
    assert any(f and f[0] == "spin_work" for f in under)
    assert {k.thread for k in workers} == {"mix-1", "mix-2", "mix-3"}
    # Sampling error at ~1500 samples is ~3%; margins 10%.  cpu-clock also counts the time
    # the hypervisor took from mix's CPUs (steal), which the kernel leaves out of rusage: the
    # upper bound grows with the machine's steal over the run (ten runs: 0.994-1.019 at 0.2-1.9%
    # steal; one earlier run gave 1.26).
    steal = 0.0
    if m0 is not None and m1 is not None:
        steal = (m1[1] - m0[1]) / os.sysconf("SC_CLK_TCK") / ((t1 - t0) * (os.cpu_count() or 1))
    ratio = sum(mix.values()) / cpu_ns
    assert 0.9 < ratio < 1.1 / (1 - min(steal, 0.5)), (ratio, steal)
    print("RATIO", round(ratio, 3), "STEAL", round(steal, 3))
    if _tail_call(sample_bin / "mix", "critical_section"):
        pytest.xfail("samples/bin/mix compiles critical_section() to `jmp spin_work` (a sibling "
                     "call), so no profiler can see its frame; build mix with "
                     "-fno-optimize-sibling-calls")
    assert any(f and f[0] == "critical_section" for f in under)


def _tail_call(binary: Path, function: str) -> bool:
    """Whether ``function`` is only a jump to another function (no frame of its own)."""
    try:
        out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(binary)],
                             capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    body = out.split(f"<{function}>:\n", 1)
    return len(body) == 2 and body[1].split("\n", 1)[0].split("\t")[-1].startswith("jmp")
