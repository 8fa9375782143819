"""``wallflame ab``'s order of runs: each round runs both sides, the first alternating (ABBA),
so neither side is always first and a drift of the machine falls on both alike; and its rule
for adding a round to an inconclusive verdict (``next_round``); a run that lost too much is
made again."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from wallflame.cli import cli
from wallflame.commands import ab
from wallflame.commands.ab import SETTLED_BY_RUNS, next_round, order
from wallflame.report.gate.thresholds import Thresholds


@pytest.mark.parametrize(("rounds", "expected"), [
    (1, [(1, "base"), (1, "head")]),
    (2, [(1, "base"), (1, "head"), (2, "head"), (2, "base")]),
    (3, [(1, "base"), (1, "head"), (2, "head"), (2, "base"), (3, "base"), (3, "head")]),
])
def test_rounds_alternate_which_side_runs_first(rounds: int,
                                                expected: list[tuple[int, str]]) -> None:
    assert order(rounds) == expected


@pytest.mark.parametrize("rounds", range(1, 9))
def test_every_side_runs_once_a_round_and_first_as_often_as_the_other(rounds: int) -> None:
    runs = order(rounds)
    assert sorted(runs) == sorted((i, s) for i in range(1, rounds + 1) for s in ("base", "head"))
    firsts = [runs[2 * i][1] for i in range(rounds)]
    assert abs(firsts.count("base") - firsts.count("head")) <= 1


def test_both_commands_are_required() -> None:
    r = CliRunner().invoke(cli, ["ab", "--base", "true"])
    assert r.exit_code == 2 and "--head" in r.output


def test_a_command_that_is_not_a_command_line_is_a_bad_parameter() -> None:
    for bad in ("'unclosed", "   "):
        r = CliRunner().invoke(cli, ["ab", "--base", bad, "--head", "true"])
        assert r.exit_code == 2 and "--base" in r.output, r.output


def test_a_command_that_cannot_run_is_the_collects_one_line_error(tmp_path: object) -> None:
    """The collect refuses a command that is not an executable before anything runs (exit 4);
    ab says so once, for that run, with the collect's own fix."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "wallflame", "ab", "--base", "/nonexistent/prog",
                        "--head", "true", "--rounds", "1", "--duration", "1", "-o",
                        f"{tmp_path}/ab"], capture_output=True, text=True, timeout=60,
                       check=False)
    assert r.returncode == 4, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("wallflame: error: the collect of ") and "cannot run" in last
    assert last.count("wallflame: error:") == 1 and last.count("(fix:") == 1
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    ("status", "inconclusive", "rounds", "elapsed", "step", "budget", "more", "said"), [
        # a verdict that is not inconclusive stops, whatever the budget
        ("pass", [], 3, 100.0, 30.0, 600.0, False, "pass after 3 rounds"),
        ("regression", [], 3, 100.0, 30.0, 600.0, False, "regression after 3 rounds"),
        # too few runs to have seen the sensitivity increase, or a different load: one more
        ("inconclusive", ["sensitivity"], 3, 100.0, 30.0, 600.0, True, "one more round"),
        ("inconclusive", ["same_load"], 4, 130.0, 30.0, 600.0, True, "one more round"),
        ("inconclusive", ["same_load", "sensitivity"], 5, 160.0, 30.0, 600.0, True,
         "(same_load, sensitivity)"),
        # ... as long as one more round and look fits in the budget (just fits, just not)
        ("inconclusive", ["sensitivity"], 3, 570.0, 30.0, 600.0, True, "570 of 600 s"),
        ("inconclusive", ["sensitivity"], 3, 571.0, 30.0, 600.0, False, "overrun the budget"),
        ("inconclusive", ["sensitivity"], 3, 100.0, 30.0, 0.0, False, "overrun the budget"),
        # reasons more rounds cannot settle stop at once, even beside one they could
        ("inconclusive", ["same_machine"], 3, 100.0, 30.0, 600.0, False,
         "(same_machine), which more rounds cannot settle"),
        ("inconclusive", ["complete_data", "sensitivity"], 3, 100.0, 30.0, 600.0, False,
         "(complete_data)"),
        ("inconclusive", ["same_collectors"], 3, 100.0, 30.0, 600.0, False, "cannot settle"),
        # never past the most rounds there can be
        ("inconclusive", ["sensitivity"], 50, 100.0, 1.0, 1e9, False, "the most there can be"),
        ("inconclusive", ["sensitivity"], 49, 100.0, 1.0, 1e9, True, "one more round"),
    ])
def test_a_round_is_added_only_to_an_inconclusive_verdict_more_runs_can_settle_in_budget(
        status: str, inconclusive: list[str], rounds: int, elapsed: float, step: float,
        budget: float, more: bool, said: str) -> None:
    got, why = next_round(status, inconclusive, rounds, elapsed, step, budget)
    assert got is more and said in why, why


def test_the_rules_names_are_the_checks_results() -> None:
    """Every name the rule counts as settled by runs is a result the check gives."""
    import inspect

    from wallflame.report.gate import check, comparable

    source = inspect.getsource(check) + inspect.getsource(comparable)
    assert SETTLED_BY_RUNS and all(f'Result("{n}"' in source for n in SETTLED_BY_RUNS)
    assert ab.MAX_ROUNDS >= ab.ROUNDS and ab.BUDGET_S > 0


def test_the_help_states_the_default_budget() -> None:
    r = CliRunner().invoke(cli, ["ab", "--help"], terminal_width=200)
    assert r.exit_code == 0 and f"default: {ab.BUDGET_S}" in r.output, r.output


@pytest.mark.parametrize(("lossy", "collects"), [(0, 1), (1, 2), (2, 3), (3, 3), (9, 3)])
def test_a_run_that_lost_too_much_is_made_again_at_most_remakes_times(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lossy: int, collects: int) -> None:
    """The first ``lossy`` collects lose too much; each is made again until one does not,
    or ``REMAKES`` remakes were spent (the last run is kept, for the check to judge)."""
    made: list[Path] = []

    def collect(out: Path, duration: float, command: str) -> None:
        out.mkdir(parents=True)
        made.append(out)

    monkeypatch.setattr(ab, "_collect", collect)
    monkeypatch.setattr(ab, "load_side", lambda path, label, cut: ([label], None))
    monkeypatch.setattr(ab, "lost_too_much",
                        lambda run, t: ["30% lost"] if len(made) <= lossy else [])
    ab._usable_run(tmp_path / "base" / "run-1", "base/run-1", 1.0, "true", Thresholds())
    assert len(made) == collects == min(lossy, ab.REMAKES) + 1
    assert (tmp_path / "base" / "run-1").is_dir()
