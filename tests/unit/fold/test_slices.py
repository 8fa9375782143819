"""Per-slice figures of a run (slices.json): slicing perf samples by time, work from progress
lines, the file's validation, and what the check does with a run's slices."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from wallflame.fold import load_inputs
from wallflame.fold.options import FoldOptions
from wallflame.fold.perf.chunks import write_sched_bins
from wallflame.fold.perf.sampled_switches import SampledSched
from wallflame.fold.slices import compute_slices, write_slices
from wallflame.profile import Profile
from wallflame.progress import work_in_slices, work_progress
from wallflame.report.gate.quantities import make_run
from wallflame.report.gate.slicefile import SLICES, load_slices
from wallflame.rundir import SCHED_BINS

MS = 1_000_000


def perf_record(t_ns: int, leaf: str, tid: int = 101) -> str:
    sec, ns = divmod(t_ns, 1_000_000_000)
    return (f"prog 100/{tid} [000] {sec}.{ns // 1000:06d}:    2000000 cpu-clock: \n"
            f"\t    1000 {leaf}+0x1 (/bin/prog)\n\t    2000 main+0x1 (/bin/prog)\n\n")


def make_raw(run: Path, lost: int = 0) -> None:
    """10 s of samples every 10 ms: ``a`` in the first half, ``b`` in the second; progress
    lines every 500 ms, 100 units per second."""
    raw = run / "raw"
    raw.mkdir(parents=True)
    t0 = 1000 * 10**9
    recs = [perf_record(t0 + i * 10 * MS, "a" if i < 500 else "b") for i in range(1000)]
    if lost:
        recs.insert(300, f"prog 100/101 [000] 1003.000001: PERF_RECORD_LOST lost {lost}\n\n")
    (raw / "perf.script").write_text("".join(recs))
    lines = [json.dumps({"t_ns": t0 - 10**9 + i * 500 * MS, "work": 50 * i}) for i in range(25)]
    lines.append(json.dumps({"work": 1200, "unit": "requests"}))
    (raw / "target.stdout").write_text("\n".join(lines) + "\n")


def test_slices_follow_the_samples_in_time(tmp_path: Path) -> None:
    make_raw(tmp_path, lost=7)
    d = compute_slices(tmp_path)
    assert d is not None and d["k"] == 10 and d["version"] == 1
    assert d["samples"] == [100] * 10 and d["on"] == [200 * MS] * 10
    assert d["functions"]["a"] == [200 * MS] * 5 + [0] * 5
    assert d["functions"]["b"] == [0] * 5 + [200 * MS] * 5
    assert d["functions"]["main"] == [200 * MS] * 10
    assert d["lost"] == {"perf": 7, "sched": 0}
    assert "wait" not in d  # no scheduler capture
    # 100 units per second, slices of 0.999 s: 99.9 each, interpolated between progress lines
    assert d["work"] == pytest.approx([99.9] * 10)


def test_waits_per_slice_from_the_bins_a_streamed_collect_keeps(tmp_path: Path) -> None:
    """``wallflame collect`` folds the scheduler's chunks while recording and keeps no text:
    the per-slice waits come from ``raw/sched.bins.json`` (what ``SampledSched`` binned)."""
    make_raw(tmp_path)  # on-CPU samples from 1000.000 s to 1009.990 s: slices of 0.999 s
    t0 = 1000 * 10**9
    sched = SampledSched(FoldOptions().get_rules())
    text = ""
    for i in range(10):  # a mutex wait of 100 ms, then 400 ms in a condvar, each second
        t = t0 + i * 10**9
        text += (_sample(t + 100 * MS - 10, "__lll_lock_wait") + _switch(t + 100 * MS, "OUT")
                 + _switch(t + 200 * MS, "IN")
                 + _sample(t + 300 * MS - 10, "pthread_cond_wait")
                 + _switch(t + 300 * MS, "OUT") + _switch(t + 700 * MS, "IN"))
    sched.feed(io.BytesIO(text.encode()))
    sched.finish(Profile())
    write_sched_bins(tmp_path / "raw", sched)
    assert (tmp_path / "raw" / SCHED_BINS).exists()
    d = compute_slices(tmp_path)
    assert d is not None and d["lost"]["sched"] == 0
    # each slice (0.999 s) holds one second's 100 ms mutex wait and 400 ms condvar wait
    assert d["wait"]["mutex"] == [100 * MS] * 10
    assert d["wait"]["condvar"] == [400 * MS] * 10
    assert d["wait"]["io"] == [0] * 10
    run = make_run("r", load_inputs([str(tmp_path / "raw" / "perf.script")]), {"losses": {}},
                   d)
    assert run.slices is not None and "wait" in run.slices
    (tmp_path / "raw" / SCHED_BINS).write_text('{"version": 1, "bin_ns": "x"}')
    bad = compute_slices(tmp_path)
    assert bad is not None and "wait" not in bad  # unreadable: sampling error alone


def _switch(t_ns: int, kind: str) -> str:
    sec, ns = divmod(t_ns, 1_000_000_000)
    return f"prog 100/101 {sec}.{ns:09d}: PERF_RECORD_SWITCH {kind}\n"


def _sample(t_ns: int, leaf: str) -> str:
    sec, ns = divmod(t_ns, 1_000_000_000)
    return (f"prog 100/101 {sec}.{ns:09d}:          1 sched:sched_switch: prev_comm=prog "
            "prev_pid=101 prev_prio=120 prev_state=S ==> next_comm=x next_pid=0 "
            f"next_prio=120\n\t            1000 {leaf} (/lib/libc.so.6)\n"
            "\t            2000 main (/bin/prog)\n\n")


def test_work_progress_and_interpolation(tmp_path: Path) -> None:
    out = tmp_path / "stdout"
    out.write_text('{"t_ns": 2000, "work": 20}\nnoise\n{"t_ns": 1000, "work": 10}\n'
                   '{"t_ns": true, "work": 5}\n{"work": 30}\n{"t_ns": 3000, "work": "x"}\n')
    progress = work_progress(out)
    assert progress == [(1000, 10.0), (2000, 20.0)]
    assert work_in_slices(progress, 1000, 2000, 4) == pytest.approx([2.5] * 4)
    # a window that starts (or ends) within two progress intervals of the points: the work
    # there is extrapolated from the first (last) two; further out it is unknown
    assert work_in_slices(progress, 500, 2000, 2) == pytest.approx([7.5, 7.5])
    assert work_in_slices(progress, 1000, 2600, 2) == pytest.approx([8.0, 8.0])
    # a launched program's first line: one period after the window opened, plus its start-up
    assert work_in_slices(progress, -20, 2000, 2) == pytest.approx([9.9, 10.1])
    assert work_in_slices(progress, -1100, 2000, 2) is None
    assert work_in_slices(progress, 1000, 4100, 2) is None
    assert work_in_slices(progress[:1], 900, 1000, 2) is None
    assert work_progress(tmp_path / "missing") == []


def test_written_file_is_read_back_and_a_bad_one_ignored(tmp_path: Path) -> None:
    make_raw(tmp_path)
    write_slices(tmp_path)
    path = tmp_path / SLICES
    assert load_slices(tmp_path) == json.loads(path.read_text())
    for bad in ('{"version": 2}', "[1]", "not json",
                '{"version": 1, "k": 2, "on": [1, -1], "samples": [1, 1], "functions": {}}',
                '{"version": 1, "k": 2, "on": [1, 1], "samples": [1, 1], "functions": '
                '{"f": [1]}}'):
        path.write_text(bad)
        assert load_slices(tmp_path) is None, bad
    path.unlink()
    assert load_slices(tmp_path) is None  # the report stage does not fold by itself ...
    assert load_slices(tmp_path, compute_slices) is not None  # ... it is given the folder's
    (tmp_path / "raw" / "perf.script").unlink()
    write_slices(tmp_path)
    assert not path.exists() and load_slices(tmp_path, compute_slices) is None


def test_a_run_takes_the_work_of_its_window_from_the_slices(tmp_path: Path) -> None:
    make_raw(tmp_path)
    slices = compute_slices(tmp_path)
    profile = load_inputs([str(tmp_path / "raw" / "perf.script")])
    run = make_run("r", profile, {"work": {"count": 1200.0, "unit": "requests"},
                                  "losses": {}}, slices)
    # the command did 1200 requests in all; 999 of them fell within the sampled window
    assert run.work == pytest.approx(999.0) and run.work_unit == "requests"
    assert run.functions["a"] == run.functions["b"] == 500 * 2 * MS
