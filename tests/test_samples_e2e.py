"""End-to-end: each field case in samples/, profiled live, tells its story with numbers.

These run the real `wallflame collect` (perf, scheduler events, stack snapshots) against the
sample programs, then read `summary.json` and the folded profiles.  Margins are those of the
scenarios (SCENARIOS.md), not tuned to one run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from wallflame.profile import ON, Profile
from wallflame.rundir import load_run_dir

pytestmark = pytest.mark.live


@dataclass
class Run:
    dir: Path
    summary: dict[str, Any]
    profile: Profile
    work: dict[str, Any]


def collect(tmp: Path, name: str, argv: list[str], duration: float = 5.0,
            extra: tuple[str, ...] = ()) -> Run:
    out = tmp / name
    r = subprocess.run(
        [sys.executable, "-m", "wallflame", "collect", "-o", str(out), "--duration",
         f"{duration:g}", *extra, "--", *argv, "--duration", f"{duration:g}"],
        capture_output=True, text=True, timeout=duration + 120, check=False)
    assert r.returncode == 0, r.stderr
    work: dict[str, Any] = {}
    for line in (r.stdout + "\n" + read_target_stdout(out)).splitlines():
        if line.startswith("{") and '"sample"' in line:
            work = json.loads(line)
    summary = json.loads((out / "summary.json").read_text())
    return Run(out, summary, load_run_dir(out), work)


def read_target_stdout(run_dir: Path) -> str:
    for name in ("target.stdout", "stdout.txt"):
        p = run_dir / "raw" / name
        if p.exists():
            return p.read_text(errors="replace")
    return ""


def threads(summary: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    rows = [t for t in summary["threads"] if str(t["name"]).startswith(prefix)]
    assert rows, f"no thread named {prefix}* in {[t['name'] for t in summary['threads']]}"
    return rows


def wait_share(rows: list[dict[str, Any]], cls: str) -> float:
    wall = sum(t["on_cpu_s"] + t["off_cpu_s"] for t in rows)
    return sum(t["wait"][cls] for t in rows) / wall


def on_share(profile: Profile, frame_pred: Any, thread_prefix: str = "") -> float:
    """Inclusive share of on-CPU time (of threads named ``thread_prefix*``) under a frame."""
    total = hit = 0
    for k, w in profile.stacks.items():
        if k.state != ON or not k.thread.startswith(thread_prefix):
            continue
        total += w
        if any(frame_pred(f) for f in k.frames):
            hit += w
    assert total, "no on-CPU samples"
    return hit / total


def test_queue_mutex_wait_found_off_cpu_and_gone_after(tmp_path: Path, live: None,
                                                        sample_bin: Path) -> None:
    before = collect(tmp_path, "before", [str(sample_bin / "queue"), "--queue=mutex"])
    after = collect(tmp_path, "after", [str(sample_bin / "queue"), "--queue=lockfree"])

    cb, ca = threads(before.summary, "consumer"), threads(after.summary, "consumer")
    assert len(cb) == 8
    mutex_before, mutex_after = wait_share(cb, "mutex"), wait_share(ca, "mutex")
    assert mutex_before >= 0.15, f"consumers' mutex wait before: {mutex_before:.1%}"
    assert mutex_after <= 0.03, f"consumers' mutex wait after: {mutex_after:.1%}"

    # The lock is named, with the call site that locks it and who held it.
    lock = before.summary["locks"][0]
    assert {w["name"] for w in lock["waiters"]} & {t["name"] for t in cb}
    assert any("MutexQueue::pop" in s["frame"] or "MutexQueue::push" in s["frame"]
               for s in lock["call_sites"]), lock["call_sites"]
    assert lock["holders"], "no holder attributed"
    assert lock["wait_s"] >= 0.5 * sum(t["wait"]["mutex"] for t in cb)

    # The on-CPU view alone barely changes: a perf-only user misses this case.
    def processing(f: str) -> bool:
        return "process_message" in f

    pb = on_share(before.profile, processing, "consumer")
    pa = on_share(after.profile, processing, "consumer")
    assert abs(pa - pb) <= 0.05, f"on-CPU processing share {pb:.1%} -> {pa:.1%}"

    assert after.work["rate"] > before.work["rate"], (before.work, after.work)
