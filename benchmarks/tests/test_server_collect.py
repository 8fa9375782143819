"""``benchmarks/server_collect.py``'s pure parts: its count of low seconds (sysbench's
per-second figures under 85% of the median of the window with no profiler before a collect, in
that window and in the collect's), a window's mean of a polled status variable, the summary
of rounds with ``--alt``'s options apart from the others, sham rounds (no collect) timed as
the collects and their losses set against the collects', when the on-CPU chunks were closed
and what the seconds they are read in cost, and ``--replay`` on a made-up kept sitting."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from benchmarks import server_collect
from benchmarks.server_collect import (
    against_sham,
    by_second,
    chunk_closes,
    chunk_second_pct,
    first_second_pct,
    low_seconds,
    replay,
    sham,
    state_mean,
    summarize,
)


def test_a_window_that_drops_halfway_and_a_collect_low_throughout() -> None:
    # seconds 0-19: no profiler, 100 for ten seconds then 80 (the server's own drop);
    # seconds 20-29: the collect, every second at 90 but two at 70
    iv = [(float(t), 100.0 if t <= 9 else 80.0) for t in range(20)]
    iv += [(float(t), 70.0 if t in (24, 25) else 90.0) for t in range(20, 30)]
    # the first second after each window's start is left out (as ``mean_tps`` does): the
    # window before holds seconds 1-19, whose median is 80 (nine at 100, ten at 80): mark 68
    assert low_seconds(iv, (0.0, 19.0), (19.0, 29.0)) == {"none": 0, "collect": 0}
    # against the first ten seconds alone (median 100, mark 85): the collect's two at 70 and
    # its eight at 90 are 2 low seconds, the window's own none
    assert low_seconds(iv, (0.0, 9.0), (19.0, 29.0)) == {"none": 0, "collect": 2}
    # a window with no figure in it: nothing to count against
    assert low_seconds(iv, (100.0, 110.0), (19.0, 29.0)) == {}


def test_state_mean_takes_the_polls_inside_the_window_only() -> None:
    # polls once a second, seconds 0-9: the history list grows by 100 a second; second 5 has
    # no reading of it (a poll that returned other variables only)
    rows = [(float(t), {"h": 100.0 * t} if t != 5 else {"d": 1.0}) for t in range(10)]
    # seconds 2-6, bounds included: 200, 300, 400 and 600 (second 5 has no "h")
    assert state_mean(rows, 2.0, 6.0, "h") == 375.0
    assert state_mean(rows, 5.0, 5.0, "d") == 1.0
    # no poll inside the window, or no such variable: no mean, not zero
    assert state_mean(rows, 20.0, 30.0, "h") is None
    assert state_mean(rows, 0.0, 9.0, "nothing") is None


def test_summarize_sets_the_alt_rounds_apart(capsys: pytest.CaptureFixture[str]) -> None:
    # four rounds, --alt's options in rounds 1 and 3: each kind's median is of its own rounds
    rows = [{"round": i, "variant": "alt" if i % 2 else "collect", "tps_none": 100.0,
             "tps_collect": 100.0 - loss, "tps_whole": 100.0 - loss, "loss_pct": loss,
             "loss_before_pct": loss, "loss_whole_pct": loss, "none_change_pct": 0.0,
             "tps_none_after": 100.0, "post_s": 1.0, "run_mb": 20.0, "sched_mb_per_s": 0.0,
             "min_coverage": 1.0, "below_95": 0}
            for i, loss in enumerate((10.0, 2.0, 12.0, 4.0))]
    summarize("t", {"rounds": rows, "reference": None})
    out = capsys.readouterr().out
    alt, _, given = out.partition("rounds with the options given")
    assert "rounds with --alt's options: 2 rounds" in alt
    assert "median loss 3.0%" in alt and "median loss 11.0%" in given


def _round_row(i: int, variant: str, loss: float) -> dict[str, object]:
    return {"round": i, "variant": variant, "tps_none": 100.0, "tps_collect": 100.0 - loss,
            "tps_whole": 100.0 - loss, "loss_pct": loss, "loss_before_pct": loss,
            "loss_whole_pct": loss, "none_change_pct": 0.0, "tps_none_after": 100.0,
            "post_s": 1.0, "run_mb": 0.0 if variant == "sham" else 20.0,
            "sched_mb_per_s": 0.0, "min_coverage": None if variant == "sham" else 1.0,
            "below_95": 0}


def test_sham_rounds_are_the_null_the_collects_are_set_against(
        capsys: pytest.CaptureFixture[str]) -> None:
    # collects lost 6, 8, 3 and 9%; the shams (the server alone) -2, 4, 1 and 8%
    rows = [_round_row(i, "sham" if i % 2 else "collect", loss)
            for i, loss in enumerate((6.0, -2.0, 8.0, 4.0, 3.0, 1.0, 9.0, 8.0))]
    line = against_sham(rows)
    # medians 7.0 and 2.5; of the 16 pairs the collect lost more in 12, the same in one
    # (8 against 8: a half), less in three (3 against 4 and 8, 6 against 8): 12.5 of 16
    assert "median loss 7.0% against 2.5% (difference +4.5 points)" in line
    assert "in 0.78 of the 16 pairs" in line
    summarize("t", {"rounds": rows, "reference": None})
    out = capsys.readouterr().out
    # each kind summarised apart, a sham's coverage printed as "-" (nothing was collected),
    # then the comparison
    assert "t, sham rounds (no collect, timed as one): 4 rounds" in out
    assert "t, rounds with the options given: 4 rounds" in out
    assert out.rstrip().endswith(line)
    assert "    1       100          102             100   -2.0" in out
    assert "0.0        0.00             -            0\n" in out
    # no sham with a loss figure: said, not a division by zero
    assert "nothing to set against" in against_sham(rows[::2])


def test_a_sham_round_is_timed_as_the_collects_before_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    clock = [100.0]

    def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += s

    monkeypatch.setattr(server_collect.time, "sleep", sleep)
    monkeypatch.setattr(server_collect.time, "monotonic", lambda: clock[0])
    # no collect yet: the default start and post-processing
    c = sham([], 60.0)
    assert slept == [server_collect.SHAM_START_S, 60.0, server_collect.SHAM_POST_S]
    assert c["meta"] is None and c["end"] - c["start"] == pytest.approx(60.0)
    # then the medians of the collects' (a sham round's own figures are not counted)
    slept.clear()
    done = [{"variant": "collect", "start_s": s, "post_s": p}
            for s, p in ((1.5, 1.0), (2.5, 3.0), (2.0, 2.0))]
    c = sham([*done, {"variant": "sham", "start_s": 9.0, "post_s": 9.0}], 10.0)
    assert slept == [2.0, 10.0, 2.0]
    assert c["start"] - c["t0"] == pytest.approx(2.0) and c["t1"] - c["end"] == pytest.approx(2.0)


def test_first_second_pct_is_the_left_out_second_against_the_window() -> None:
    # sysbench's figure stamped t covers the second before t; the window opens at 10.4
    iv = [(float(t), 50.0 if t == 11 else 100.0) for t in range(1, 30)]
    # the figure at 11 (10-11, the window opening in it) is left out of the mean (100): -50%
    assert first_second_pct(iv, 10.4, 20.4) == -50.0
    # a window opening on a figure's own stamp leaves none out: nothing to set against
    assert first_second_pct(iv, 10.0, 20.0) is None
    assert first_second_pct(iv, 100.0, 110.0) is None


def test_replay_summarises_a_kept_sitting_and_refuses_what_is_not_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a sysbench log of 200 seconds at 100 transactions/s, but 90 in seconds 71-130 (the
    # collect's window, opening at 70.5 with its first second at 50) and 80 from 132 on
    log = "".join(f"[ {t}s ] thds: 32 tps: "
                  f"{50.0 if t == 71 else 90.0 if 71 < t <= 130 else 80.0 if t > 131 else 100.0}"
                  " qps: 1\n" for t in range(1, 201))
    (tmp_path / "t-sysbench.log").write_text(log)
    row = {"test": "t", "round": 0, "tps_none": 100.0, "tps_collect": 90.0, "tps_whole": 90.0,
           "none_s": [5.0, 65.0], "window_s": [70.5, 130.5], "loss_pct": 10.0,
           "loss_whole_pct": 10.0, "post_s": 1.0, "run_mb": 20.0, "sched_mb_per_s": 0.0,
           "min_coverage": 1.0, "below_95": 0}
    lines = tmp_path / "lines"
    lines.write_text("not a JSON line\n" + json.dumps(row) + "\n")
    replay(lines, 60)
    out = capsys.readouterr().out
    # the last window with no profiler starts 2 s after the collect's (132.5): 80 a second;
    # against (100 + 80) / 2 the collect's 90 is no loss, against the window before 10%
    assert "median loss 0.0% against the windows either side (10.0% against the one before" in out
    assert "the second each collect's window opens in (left out of its mean) against that " \
           "mean: -44.4%" in out
    lines.write_text("no sitting here\n")
    with pytest.raises(ValueError):
        replay(lines, 60)


def test_chunk_closes_reads_perfs_names_against_the_window(tmp_path: Path) -> None:
    start = 1_795_911_266.64  # the window opened then (epoch seconds)
    (tmp_path / "raw").mkdir()
    (tmp_path / "meta.json").write_text(json.dumps({"window": {"start_ns": int(start * 1e9)}}))

    def stamp(t: float) -> str:  # perf's name for a chunk closed at t, in local time
        return time.strftime("%Y%m%d%H%M%S", time.localtime(int(t))) + f"{int(t % 1 * 100):02d}"

    for after, suffix in ((9.8, ".zst"), (19.81, ".zst"), (60.07, "")):
        (tmp_path / "raw" / f"perf.data.{stamp(start + after)}{suffix}").write_bytes(b"x")
    (tmp_path / "raw" / "perf.data").write_bytes(b"x")  # not renamed (perf killed): no time
    (tmp_path / "raw" / f"sched.data.{stamp(start + 5)}").write_bytes(b"x")  # another stem
    assert chunk_closes(tmp_path) == pytest.approx([9.8, 19.81, 60.07], abs=0.011)
    assert chunk_closes(tmp_path / "nothing") == []


def test_chunk_second_pct_is_the_second_a_chunk_is_read_in_against_the_window() -> None:
    # the window [10.4, 70.4]; figures of 100 a second but 80 in the one stamped 21 (20-21)
    iv = [(float(t), 80.0 if t == 21 else 100.0) for t in range(1, 80)]
    mean = (58 * 100.0 + 80.0) / 59
    # a chunk closed 9.8 s after the window opened is read at 20.25: in the figure at 21;
    # one in the window's first second and one after it are not counted
    got = chunk_second_pct(iv, 10.4, 70.4, [0.3, 9.8, 30.0, 60.5])
    assert got == pytest.approx([100 * (80.0 / mean - 1), 100 * (100.0 / mean - 1)])
    assert chunk_second_pct(iv, 10.4, 70.4, []) == []


def test_by_second_averages_each_second_around_the_windows_over_the_rounds() -> None:
    # two rounds; each window with no profiler at 100 a second, each collect's at 90 but 50
    # in the second it opens in; the second round's server runs at twice the rate
    iv: list[tuple[float, float]] = []
    for scale, none_at, w0 in ((1.0, 0, 70.5), (2.0, 200, 270.5)):
        for t in range(none_at + 1, none_at + 141):
            inside = w0 < t <= w0 + 60 + 1
            fig = 50.0 if w0 < t < w0 + 1 else 90.0 if inside else 100.0
            iv.append((float(t), scale * fig))
    rows = [{"none_s": [5.0, 65.0], "window_s": [70.5, 130.5]},
            {"none_s": [205.0, 265.0], "window_s": [270.5, 330.5]}]
    each = by_second(iv, rows, before=3, after=2)
    assert each[0] == pytest.approx(0.5)  # the second the window opens in (stamped 71)
    assert each[1] == pytest.approx(0.9) and each[60] == pytest.approx(0.9)
    assert each[-1] == pytest.approx(1.0) and each[-3] == pytest.approx(1.0)
    assert min(each) == -3 and max(each) == 62
    assert by_second(iv, [{"none_s": [500.0, 560.0], "window_s": [570.5, 630.5]}]) == {}
