"""``benchmarks/run.py``'s table and results file, and ``benchmarks/rows.py``'s rows (no perf,
no benchmark run)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from benchmarks import run
from benchmarks.rows import row, write_rows


def test_a_row_s_ratio_is_wallflame_over_the_peer() -> None:
    r = row("page, wall", 0.5, 0.25, "inferno-flamegraph")
    assert r == {"name": "page, wall", "wallflame": 0.5, "peer": 0.25,
                 "peer_tool": "inferno-flamegraph", "ratio": 2.0, "unit": "s",
                 "better": "lower"}
    assert row("fold", 1.0, 2.0, "inferno", ratio=0.6)["ratio"] == 0.6  # a paired median
    assert row("false alarms", 3.3, unit="%")["ratio"] is None  # no peer
    assert row("x", 1.0, 0.0, "peer")["ratio"] is None
    with pytest.raises(ValueError):
        row("x", 1.0, better="faster")


def test_rows_are_written_as_a_json_list(tmp_path: Path) -> None:
    rows = [row("a", 1.0, 2.0, "p"), row("b", 3.0, unit="%", better="higher")]
    write_rows(tmp_path / "rows.json", rows)
    assert json.loads((tmp_path / "rows.json").read_text()) == rows


def test_numbers_keep_three_significant_digits_without_an_exponent() -> None:
    assert run.number(None) == "-"
    assert run.number(0.49694, "s") == "0.497 s"
    assert run.number(2.617) == "2.62"
    assert run.number(12.34, "%") == "12.3 %"
    assert run.number(1234.5, "ms") == "1234 ms"  # (1234.5 rounds to even)
    assert run.number(-3.21, "%") == "-3.21 %"
    assert run.number(0.000294) == "0.000294"  # a small ratio keeps its digits
    assert run.number(0.0) == "0.00"
    assert run.number(1e-12) == "0.000000000"


def test_the_table_has_a_line_per_row_in_aligned_columns() -> None:
    rows = [{"benchmark": "fold", **row("varied: one thread, CPU", 0.497, 0.656,
                                        "inferno-collapse-perf --nthreads 1", ratio=0.774)},
            {"benchmark": "gate", **row("slower pairs: caught", 100.0, unit="%",
                                        better="higher")}]
    lines = run.table(rows).splitlines()
    assert lines[0].split() == ["benchmark", "measure", "wallflame", "peer", "tool", "peer",
                                "ratio"]
    assert set(lines[1]) <= {"-", " "}
    assert len(lines) == 4
    assert lines[2].split()[:2] == ["fold", "varied:"]
    assert lines[2].endswith("0.774")
    assert "0.497 s" in lines[2] and "0.656 s" in lines[2]
    assert "(higher is better)" in lines[3]
    assert lines[3].endswith("-")  # no peer, no ratio
    # columns line up: every line's "wallflame" figure ends where the header's does
    end = lines[0].index("wallflame") + len("wallflame")
    assert lines[2][end - 1] == "s" and lines[3][end - 1] == "%"


def test_an_empty_table_is_its_header() -> None:
    assert len(run.table([]).splitlines()) == 2


def test_the_results_file_is_named_by_utc_date_and_host(tmp_path: Path) -> None:
    when = datetime(2026, 12, 7, 23, 30, tzinfo=UTC)
    path = run.result_path(tmp_path / "results", when, "box")
    assert path == tmp_path / "results" / "2026-12-07-box.json"
    run.write_results(path, {"rows": [row("a", 1.0)]})
    assert json.loads(path.read_text())["rows"][0]["name"] == "a"


def test_commands_run_with_this_interpreter_and_write_json(tmp_path: Path) -> None:
    cmd = run.command(run.SUITE["gate"], True, tmp_path, tmp_path / "gate.json")
    assert cmd[0] == sys.executable
    assert cmd[1].endswith("benchmarks/check_gate.py")
    assert cmd[-2:] == ["--json", str(tmp_path / "gate.json")]
    assert str(tmp_path / "gate") in cmd  # {work} filled in
    full = run.command(run.SUITE["gate"], False, tmp_path, tmp_path / "gate.json")
    assert "--rounds" not in full


def test_every_benchmark_s_script_is_in_the_suite() -> None:
    for bench in run.SUITE.values():
        assert (run.HERE / bench.script).exists()
        assert "--json" not in bench.quick + bench.full


def test_a_missing_peer_tool_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "CARGO_BIN", tmp_path / "none")
    tool = tmp_path / "bin" / "pt-pmp"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    bench = run.Benchmark("overhead.py", "", [], [], ["pt-pmp", "inferno-flamegraph"])
    assert run.missing_tools(bench, str(tool.parent)) == ["inferno-flamegraph"]


def test_the_default_leaves_the_server_out() -> None:
    assert run.parse([]).names == ["fold", "report", "diff", "overhead", "wakers", "gate"]
    assert run.parse(["server", "fold", "fold", "--quick"]).names == ["server", "fold"]
    with pytest.raises(SystemExit):
        run.parse(["nonesuch"])


def test_the_gate_s_rows_are_its_error_rates() -> None:
    from benchmarks.check_gate import headline

    rows = headline({"unchanged single-run pairs (both directions)": [5, 1, 0, 0],
                     "slower, single-run pairs": [0, 3, 0, 2],
                     "unchanged 3-run series": [0, 0, 0, 0]})  # no checks: no row
    assert [(r["name"], round(r["wallflame"], 1), r["better"]) for r in rows] == [
        ("unchanged single-run pairs: false alarms (1 of 6, 0 inconclusive)", 16.7, "lower"),
        ("slower, single-run pairs: caught, frame named (2 of 3, 0 inconclusive)", 66.7,
         "higher")]
    assert all(r["peer"] is None and r["ratio"] is None for r in rows)


def test_the_server_s_rows_are_medians_of_the_collect_rounds() -> None:
    from benchmarks.server_collect import headline

    rounds = [{"variant": "collect", "loss_pct": 3.0, "sched_mb_per_s": 0.0, "post_s": 1.0},
              {"variant": "sham", "loss_pct": -9.0, "sched_mb_per_s": 0.0, "post_s": 0.0},
              {"variant": "collect", "loss_pct": 1.0, "sched_mb_per_s": 2.0, "post_s": None}]
    rows = headline({"oltp_read_write": {"rounds": rounds, "reference": None}})
    assert [(r["name"], r["wallflame"], r["unit"]) for r in rows] == [
        ("oltp_read_write: throughput loss", 2.0, "%"),
        ("oltp_read_write: scheduler data", 1.0, "MB/s"),
        ("oltp_read_write: post-processing", 1.0, "s")]


def test_the_ab_benchmark_spreads_its_slower_a_bs_and_counts_them() -> None:
    from benchmarks.ab_power import command, headline, plan, tally

    kinds = plan(10, 20)
    assert kinds.count("slower") == 10 and kinds[:3] == ["unchanged", "unchanged", "slower"]
    assert all(kinds[i] == "slower" for i in range(2, 30, 3))
    assert "--slow-auth" in command(True, 10) and "--slow-auth" not in command(False, 10)
    assert ">/dev/null" in command(False, 10) and "--progress-ms 0" in command(False, 10)
    o = {"exit": 1, "seconds": 100.0, "named": True}
    t = tally({"slower": [o, {**o, "named": False}, {**o, "exit": 7}],
               "unchanged": [{**o, "exit": 0, "seconds": 120.0}, {**o, "exit": 7}]}, 3)
    assert (t["caught"], t["named"], t["slower_inconclusive"]) == (2, 1, 1)
    assert (t["failed"], t["unchanged_inconclusive"], t["median_s"]) == (0, 1, 100.0)
    rows = headline(t)
    assert [round(r["wallflame"], 1) for r in rows] == [33.3, 0.0, 100.0]
    assert rows[0]["name"].startswith("25% slower handler") and rows[0]["better"] == "higher"
