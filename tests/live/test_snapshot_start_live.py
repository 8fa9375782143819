"""Live: what an attached collect's libdw snapshots stop, and when they start.

* The backend's start-up (libdw attached, the modules reported, each module's ELF and CFI read
  at its first unwind, the symbol index of each module a frame falls in) is one snapshot whose
  stacks are not kept, taken by the snapshot thread before the window opens
  (``LibdwBackend.warm``): ``meta.json`` ``profile.extra.attach_ms`` is that start, and the
  window's first snapshot no longer carries it.
* A thread its /proc record reads running (``R``) is not stopped: its stack would not be
  counted (running time is perf's), and the stop takes it off its CPU.  It is logged with
  ``RUNNING_FRAME`` alone, and its time still counts as running.

Ground truth: the collect's own timing of each snapshot (``span_ms``: from the request to the
last thread's release and its names) and the threads' /proc records logged with each snapshot.

Measured against ``samples/bin/mix --threads 3`` (three workers that spin, sleep and take a
lock), ``--pmp-rate 5``, 3 s windows, 10 collects each (2026-11-29): before the change the first
snapshot's span was 15.8-57.8 ms and the start (``attach_ms``, then libdw's attach alone)
0.45-0.77 ms, always the shorter; after it the first snapshot's span was 0.43-11.95 ms and the
start 14.1-55.7 ms, always the longer (by 1.9 times at least).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from livehelp import collect, start_mix, stop_mix

from wallflame.collect.snapshots import RUNNING_FRAME
from wallflame.rundir import READ_LINE

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


_SNAP = "# wallflame-snapshot "
_PROC = "# wallflame-proc "


@pytest.fixture(scope="module")
def run(sample_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    mix = start_mix(sample_bin, "--threads", "3", "--duration", "30")
    out = tmp_path_factory.mktemp("snapshot-start") / "run"
    try:
        r = collect("--pid", str(mix.pid), "--off-cpu", "pmp", "--pmp-rate", "5",
                    "--owner-rate", "0", "--duration", "3", "-o", str(out))
    finally:
        stop_mix(mix)
    assert r.returncode == 0, r.stderr
    yield out


def _dumps(log: Path) -> list[dict[str, Any]]:
    """Each snapshot of the log: its threads' frames, /proc records and snapshot line."""
    dumps: list[dict[str, Any]] = []
    cur: dict[str, Any] = {"frames": {}, "procs": {}}
    tid = 0
    for line in log.read_text().splitlines():
        if line.startswith("TID "):
            tid = int(line[4:].rstrip(":"))
            cur["frames"][tid] = []
        elif line.startswith("#") and not line.startswith("# ") and tid:
            cur["frames"][tid].append(line)
        elif line.startswith(_PROC):
            rec = json.loads(line[len(_PROC):])
            cur["procs"][int(rec["tid"])] = rec
        elif line.startswith(_SNAP):
            cur["snap"] = json.loads(line[len(_SNAP):])
        elif line.startswith("TS "):
            dumps.append(cur)
            cur, tid = {"frames": {}, "procs": {}}, 0
    return dumps


def test_libdw_starts_before_the_window(run: Path) -> None:
    dumps = _dumps(run / "raw" / "snapshots.log")
    assert len(dumps) >= 10, len(dumps)
    first = dumps[0]["snap"]["span_ms"]
    start = json.loads((run / "meta.json").read_text())["profile"]["extra"]["attach_ms"]
    assert start > first, (start, first, [d["snap"]["span_ms"] for d in dumps])


def test_a_thread_read_running_is_not_stopped(run: Path) -> None:
    dumps = _dumps(run / "raw" / "snapshots.log")
    running = stopped = 0
    for d in dumps:
        stops = d["snap"].get("stops", {})
        for tid, rec in d["procs"].items():
            if tid not in d["frames"]:
                continue  # not unwound (uninterruptible sleep)
            if rec.get("state") == "R":
                running += 1
                assert d["frames"][tid] == [f"#0  0x{0:016x} {RUNNING_FRAME}"], d["frames"][tid]
                assert str(tid) not in stops
            else:
                stopped += 1
                assert str(tid) in stops and len(d["frames"][tid]) > 1
    assert running and stopped, (running, stopped)
    # the running threads' time is still theirs: running, not blocked, not lost
    meta = json.loads((run / "meta.json").read_text())
    assert sum(meta["profile"]["extra"]["pmp_running_ns"].values()) > 0
    assert "thread without frames" not in json.dumps(meta.get("losses"))


def test_each_thread_is_read_alone_between_snapshots(run: Path) -> None:
    """With snapshots alone, each thread's /proc record is also read alone between two
    snapshots, at a moment of its own drawn uniformly over the interval (200 ms at
    ``--pmp-rate 5``, drawn in 100-300 ms).  Read together, mix's 5 threads would be read
    within a millisecond of one another; under a uniform draw over 100 ms or more, the chance
    that 5 readings fall within 10 ms of one another is under 1 in 2,000, and the median over
    the intervals must be 10 ms or more."""
    snaps: list[int] = []
    reads: list[list[int]] = [[]]
    for line in (run / "raw" / "snapshots.log").read_text().splitlines():
        if line.startswith(_SNAP):
            snaps.append(json.loads(line[len(_SNAP):])["t_ns"])
            reads.append([])
        elif line.startswith(READ_LINE):
            rec = json.loads(line[len(READ_LINE):])
            assert rec["state"] and rec["comm"], rec
            reads[-1].append(rec["t_ns"])
    assert not reads[0]  # none before the first snapshot
    full = [r for r in reads[1:-1] if len(r) >= 5]
    assert len(full) >= 8, [len(r) for r in reads]
    for n, r in enumerate(reads[1:-1]):  # between that snapshot and the next
        assert all(snaps[n] < t < snaps[n + 1] for t in r), n
    spans = sorted((max(r) - min(r)) / 1e6 for r in full)
    assert spans[len(spans) // 2] >= 10, spans
