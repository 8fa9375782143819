"""A real scheduler capture read both ways: the switch records from each chunk's perf.data
(``_speedups.perf_switches``, what a collect does now) and from ``perf script
--show-switch-events`` (perf's own reader, the text read before), with the same stack samples
and task events.  The threads, every interval, and the profile must be the same: perf's text
is the reference.  ``samples/bin/mix`` (a mutex, a condition variable, sleeps and CPU work)
collected for 3 s on every CPU, so other tasks' records lie among the target's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from livehelp import collect, start_mix, stop_mix
from unit.fold.test_sampled_switches_native import state

from wallflame.collect import perf
from wallflame.collect.packed import unpacked
from wallflame.collect.safety import tool_env
from wallflame.fold.options import FoldOptions
from wallflame.fold.perf.sampled_switches import SampledSched
from wallflame.fold.perf.sched_reader import read_switches
from wallflame.profile import Profile

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


def read(chunks: list[Path], from_file: bool, at_start: list[int]) -> SampledSched:
    s = SampledSched(FoldOptions().get_rules())
    s.set_window(0, None, at_start)
    for packed_chunk in chunks:  # kept compressed once read (collect.packed)
        with unpacked(packed_chunk) as chunk:
            switches = read_switches(chunk) if from_file else None
            assert (switches is not None) == from_file, chunk
            p = subprocess.Popen(perf.script_command(chunk, True, switches=not from_file),
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 env=tool_env())
            assert p.stdout is not None
            s.feed(p.stdout, switches=switches)  # type: ignore[arg-type]
            p.stdout.close()
            assert p.wait() == 0
    return s


def test_records_from_the_file_as_perf_script_prints_them(tmp_path: Path, live: None,
                                                          sample_bin: Path) -> None:
    mix = start_mix(sample_bin, "--duration", "30")
    run = tmp_path / "run"
    try:
        r = collect("--pid", str(mix.pid), "--duration", "3", "--off-cpu", "sched", "-o",
                    str(run))
        assert r.returncode == 0, r.stderr
    finally:
        stop_mix(mix)
    chunks = perf.data_chunks(run / "raw", "sched")
    assert chunks
    listing = json.loads((run / "raw" / "capture.json").read_text())["threads"]["start"]
    at_start = [int(row["tid"]) for row in listing["threads"]]
    text, file = read(chunks, False, at_start), read(chunks, True, at_start)
    a, b = state(text), state(file)
    assert file.every_cpu and file.foreign > 0  # other tasks' records were read and set apart
    assert sum(th["switches"] for th in b["threads"].values()) > 100
    b["lines"] = a["lines"]  # the text's switch lines are counted as lines, records not
    assert a == b
    pa, pb = Profile(), Profile()
    text.finish(pa, {"stack_period": 1})
    file.finish(pb, {"stack_period": 1})
    assert pa.stacks == pb.stacks
