"""``wallflame ab``'s order of runs: each round runs both sides, the first alternating (ABBA),
so neither side is always first and a drift of the machine falls on both alike."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from wallflame.cli import cli
from wallflame.commands.ab import order


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
