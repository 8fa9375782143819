"""The run directory's records: written and read by the same code, one set of defaults, a
format version, and run directories from before the version kept loading.

``fixtures/rundir/v0-mix`` is a run directory written before ``version`` existed (mix, 2
threads, attached for 2 s at 99 Hz with ``--off-cpu both``); its perf chunks are left out
(13 MB), so finishing it again uses its snapshot log and owner log.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st

from wallflame.cli import cli
from wallflame.errors import EXIT_INPUT, InputError
from wallflame.metaextra import SavedExtra
from wallflame.metaschema import SCHEMA_PATH
from wallflame.report.summary import build_summary
from wallflame.rundir import (
    CAPTURE,
    FORMAT,
    META,
    Capture,
    CollectOptions,
    RunMeta,
    Running,
    SnapshotStats,
    Window,
    load_run_dir,
    read_capture,
    read_meta,
    write_capture,
)

OLD = FIXTURES / "rundir" / "v0-mix"


def _full_capture() -> Capture:
    return Capture(
        options=CollectOptions(duration_s=None, off_cpu="sched", pmp_backend="gdb",
                               pmp_rate_hz=3.5, freq_hz=997, sched_stack_hz=0.0),
        target={"pid": 7, "comm": "x"}, commands={"perf_record": ["perf", "record"]},
        tools={"perf": "perf version 6.1"}, window=Window(10, 30, 20),
        pmp=SnapshotStats(backend="gdb", consistent=True, snapshots=4, failed=1,
                          errors=["e"], rate_hz=2.0, final_rate_hz=1.0, attach_ms=3.25,
                          pause={"median_ms": 0.5}, pause_measure="ptrace"),
        perf={"sched": True, "perf": {"chunks": ["perf.data.1"], "lost_chunks": 2}},
        memory={"samples": []}, warnings=["w"], ended_by="duration",
        launched={"command": ["mix"], "pid": 7}, owners={"pause": {"stops": 3}},
        postprocess={"budget": {}}, running=Running(1, 2, 3))


def test_a_capture_reads_back_as_written(tmp_path: Path) -> None:
    cap = _full_capture()
    write_capture(tmp_path, cap)
    back = read_capture(tmp_path)
    assert back == cap and back.problems == []
    assert json.loads((tmp_path / CAPTURE).read_text())["version"] == FORMAT
    # the updates made while collecting are written on one line: the same capture
    write_capture(tmp_path, cap, compact=True)
    assert (tmp_path / CAPTURE).read_text().count("\n") == 1
    assert read_capture(tmp_path) == cap


def test_missing_fields_take_the_writers_defaults() -> None:
    """The reader's defaults are the writer's: a capture with no options reads as the
    options collect starts from (off_cpu ``both``, backend ``libdw``)."""
    cap = Capture.from_json({"options": {}})
    assert cap.options == CollectOptions()
    assert (cap.options.off_cpu, cap.options.pmp_backend) == ("both", "libdw")
    assert cap.version == 0 and cap.pmp is None and cap.window == Window()
    assert Capture.from_json(Capture().to_json()) == Capture()
    assert RunMeta.from_json(RunMeta().to_json()) == RunMeta()


def test_a_field_of_the_wrong_type_is_named_not_guessed() -> None:
    cap = Capture.from_json({"options": {"freq_hz": "fast", "off_cpu": "sched"},
                             "window": {"window_ns": True}, "pmp": []})
    assert cap.options.freq_hz == CollectOptions().freq_hz and cap.options.off_cpu == "sched"
    assert cap.window.window_ns == 0 and cap.pmp is None
    assert len(cap.problems) == 3
    assert any("options: freq_hz is not int" in p for p in cap.problems), cap.problems


def test_a_newer_format_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / CAPTURE).write_text(json.dumps({"version": FORMAT + 1}))
    with pytest.raises(InputError, match="format version 2, this wallflame reads up to 1"):
        read_capture(tmp_path)
    (tmp_path / CAPTURE).write_text("[1, 2]")
    with pytest.raises(InputError, match="not a JSON object"):
        read_capture(tmp_path)


def test_a_run_directory_from_before_the_version_loads() -> None:
    raw = json.loads((OLD / "raw" / CAPTURE).read_text())
    assert "version" not in raw and "version" not in json.loads((OLD / META).read_text())
    cap = read_capture(OLD / "raw")
    assert cap.version == 0 and cap.problems == []
    # the options as written, and those added since at their defaults
    assert {k: v for k, v in asdict(cap.options).items() if k in raw["options"]} == \
        raw["options"]
    assert cap.options.sched_stack_period is None
    assert cap.pmp is not None and asdict(cap.pmp) == raw["pmp"]
    assert cap.window.window_ns == raw["window"]["window_ns"]
    meta = read_meta(OLD)
    assert meta.version == 0 and meta.options.freq_hz == 99
    # the profile loaded from it gives the summary that was written with it
    saved = json.loads((OLD / "summary.json").read_text())
    again = build_summary(load_run_dir(OLD))
    # the same, with runnable time now a column of its own (the run-queue time it had)
    assert [_before_runnable(r) for r in (again["totals"], *again["threads"])] == \
        [saved["totals"], *saved["threads"]]


def test_a_run_directory_from_before_the_version_finishes_again(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(OLD / "raw", run / "raw")
    r = CliRunner().invoke(cli, ["finish", str(run)])
    assert r.exit_code == 0, r.output
    meta = json.loads((run / META).read_text())
    old = json.loads((OLD / META).read_text())
    assert meta["version"] == FORMAT
    for key in ("target", "commands", "tools", "pmp", "owners"):
        assert meta[key] == old[key], key
    assert {k: meta["options"][k] for k in old["options"]} == old["options"]
    assert meta["options"]["sched_stack_period"] is None  # added since, at its default
    # the window as it was, and the fields added since at their defaults
    assert {k: meta["window"][k] for k in old["window"]} == old["window"]
    assert meta["window"]["perf_clock"] == ""
    assert meta["profile"]["rates"]["perf_hz"] == 99.0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["totals"]["off_cpu_s"] > 0
    # the record written holds to its schema, and saves no key kept in memory only
    schema = json.loads(SCHEMA_PATH.read_text())
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(meta)) == []
    assert set(meta["profile"]["extra"]) <= set(SavedExtra.__annotations__)


def test_a_bad_capture_field_reaches_the_warnings(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(OLD / "raw", run / "raw")
    cap = json.loads((run / "raw" / CAPTURE).read_text())
    cap["options"]["freq_hz"] = "99"
    (run / "raw" / CAPTURE).write_text(json.dumps(cap))
    r = CliRunner().invoke(cli, ["finish", str(run)])
    assert r.exit_code == 0, r.output
    warnings = json.loads((run / META).read_text())["warnings"]
    assert any("options: freq_hz is not int: the default was used" in w for w in warnings)


def test_an_unreadable_capture_is_exit_3(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(OLD / "raw", run / "raw")
    (run / "raw" / CAPTURE).write_text("{")
    r = CliRunner().invoke(cli, ["finish", str(run)])
    assert r.exit_code == EXIT_INPUT and r.output.count("\n") == 1, r.output
    assert "unreadable JSON" in r.output


def _before_runnable(row: dict[str, Any]) -> dict[str, Any]:
    """A summary row as written before runnable time had a column and a class, and before
    on-CPU time inside waiting calls (``on_cpu_in``) was shown."""
    out = {k: v for k, v in row.items() if k not in ("runnable_s", "on_cpu_in")}
    assert row["runnable_s"] == row["runqueue_s"]
    out["wait"] = {c: s for c, s in row["wait"].items() if c != "runnable"}
    return out


def test_the_snapshot_logs_lock_records_are_read_once_and_bad_lines_counted(
        tmp_path: Path) -> None:
    """The lock evidence of a snapshot log is read by the snapshot folder's own rules: a
    record naming a lock that is not JSON is a loss, counted once in the run's metadata
    (the folder meets the same line), never skipped in silence."""
    from wallflame.fold.snapshots import lock_records
    from wallflame.profile import Meta

    log = tmp_path / "snapshots.log"
    good = '# wallflame-proc {"tid": 5, "lock": "0x10", "state": "S"}'
    log.write_text("\n".join([good, '# wallflame-proc {"tid": 6, "lock": "0x1',
                              '# wallflame-proc {"lock": "0x10"}']) + "\n")
    meta = Meta()
    recs = lock_records(str(log), meta)
    assert [r["tid"] for r in recs] == [5]
    loss = meta.losses["bad wallflame-proc line"]
    assert (loss.count, loss.first_line) == (2, 2)

    run = tmp_path / "run"
    shutil.copytree(OLD / "raw", run / "raw")
    with open(run / "raw" / "snapshots.log", "a", encoding="utf-8") as f:
        f.write('# wallflame-proc {"tid": 6, "lock": "0x1\n')
    r = CliRunner().invoke(cli, ["finish", str(run)])
    assert r.exit_code == 0, r.output
    losses = json.loads((run / META).read_text())["losses"]
    assert losses["bad wallflame-proc line"] == 1


def test_a_check_side_given_as_a_capture_is_folded_by_the_loader_passed_in() -> None:
    """The report stage does not fold: a capture file on one side of ``check`` is folded by
    the loader the command passes (the folders'), and refused in one line without one."""
    from wallflame.fold import load_inputs
    from wallflame.report.gate.series import load_side

    capture = str(FIXTURES / "perf" / "mix-fp.txt")
    with pytest.raises(InputError, match="not a run directory"):
        load_side(capture, "baseline")
    runs, profile = load_side(capture, "baseline", None, lambda p: load_inputs([p]))
    assert len(runs) == 1 and profile.total() == load_inputs([capture]).total() > 0


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner)
                    | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=12))
def test_plain_gives_what_asdict_gives(value: Any) -> None:
    from wallflame.rundir import Capture, Running, SnapshotStats, plain

    cap = Capture(target={"x": value}, processes=[{"v": value}], running=Running(1, 2, 3),
                  pmp=SnapshotStats(backend="libdw", pause={"p": value}))
    got = plain(cap)
    assert got == asdict(cap)
    assert json.dumps(got, sort_keys=True) == json.dumps(asdict(cap), sort_keys=True)
    got["target"]["x"] = "changed"  # a copy: the capture itself is left as it was
    assert cap.target == {"x": value}
