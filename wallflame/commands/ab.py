"""``wallflame ab``: the base and the head of a program profiled in turns on this machine, and
judged as ``wallflame check`` judges two series (exit 0 pass, 1 regression, 7 inconclusive).

A shared CI runner differs from job to job (CPU model, frequency, neighbours), so a baseline
recorded elsewhere is not comparable: the two sides are measured in the same job instead.

* The order: a warm-up run of each side first, discarded (caches, page cache, symbol caches);
  then ``--rounds`` rounds in the order base, head, head, base, base, head, ... (ABBA), so a
  drift of the machine over the job falls on both sides alike.
* Each run is ``wallflame collect --duration S -- CMD`` into ``OUT/base/run-N`` or
  ``OUT/head/run-N``; ``CMD`` is split as a shell splits words, and run without a shell, so
  the program is the target and is asked to end (SIGTERM) when the window closes (a shell in
  between would take the signal and leave the program running into the next run).
* The rounds: ``--rounds`` (3) first; then, while the verdict is inconclusive only for
  reasons more runs can settle (``SETTLED_BY_RUNS``) and one more round fits in ``--budget``
  seconds of the whole A/B, one more round at a time (``next_round``).  Each look at the
  verdict is one more chance of a false alarm: with L looks the rate is at most L x ``alpha``.
* A run that lost too much of its evidence to be compared (``lost_too_much``: perf's buffer
  overflows when a busy machine starves its reader) is made again, up to ``REMAKES`` times, in
  its place in the order; the last one is kept (and the check then says it cannot compare).
* The verdict: ``check OUT/base OUT/head`` (two series), with ``OUT/diff.html``,
  ``OUT/summary.md`` and ``OUT/verdict.json``.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path

import click

from wallflame.commands.check import publish, verdict_of
from wallflame.errors import (
    EXIT_PERMISSION,
    EXIT_TARGET,
    PermissionDenied,
    TargetError,
    ToolError,
)
from wallflame.report.gate.check import ignored
from wallflame.report.gate.comparable import lost_too_much
from wallflame.report.gate.results import INCONCLUSIVE
from wallflame.report.gate.series import load_side
from wallflame.report.gate.thresholds import CONFIG_NAME, Thresholds, load_thresholds

#: Rounds to start with by default: three runs a side (a slower function of 12% of the work,
#: 25% slower, was caught in 10 of 10 three-run series: docs/check.md, "Error rates").
ROUNDS = 3
#: Seconds the whole A/B may take by default (warm-up, rounds, judging): rounds are added to
#: an inconclusive verdict while one more fits.
BUDGET_S = 600.0
#: Rounds at most, however much budget is left.
MAX_ROUNDS = 50
#: The inconclusive results another round can settle: a pass that could not have seen the
#: ``sensitivity`` increase (more runs narrow every interval) and sides collected under
#: different load (each side's load is averaged over more runs).  Other collectors, another
#: machine or lost data stay as they are however many rounds are added.
SETTLED_BY_RUNS = frozenset({"sensitivity", "same_load"})
#: Seconds of each run's window by default.
DURATION_S = 10.0
#: Times a run that lost too much of its evidence is made again.
REMAKES = 2
#: Which side runs first in each round: ABBA, so that neither side is always first.
ORDER = (("base", "head"), ("head", "base"))


def order(rounds: int) -> list[tuple[int, str]]:
    """Every run of the rounds, in the order they are made: (round, side)."""
    return [(i, side) for i in range(1, rounds + 1) for side in ORDER[(i - 1) % 2]]


def next_round(status: str, inconclusive: Collection[str], rounds: int, elapsed_s: float,
               step_s: float, budget_s: float) -> tuple[bool, str]:
    """Whether to add a round after a look at the verdict, and why (said on the terminal).

    ``status``: the verdict's; ``inconclusive``: the names of its inconclusive results;
    ``rounds``: rounds made; ``elapsed_s``: seconds since the A/B started; ``step_s``: what
    one more round and look is expected to take (the mean round so far plus the last look);
    ``budget_s``: ``--budget``."""
    if status != INCONCLUSIVE:
        return False, f"{status} after {rounds} rounds"
    stuck = sorted(set(inconclusive) - SETTLED_BY_RUNS)
    if stuck:
        return False, (f"inconclusive after {rounds} rounds ({', '.join(stuck)}), which more "
                       "rounds cannot settle")
    if rounds >= MAX_ROUNDS:
        return False, f"inconclusive after {rounds} rounds, the most there can be"
    if elapsed_s + step_s > budget_s:
        return False, (f"inconclusive after {rounds} rounds; one more (about {step_s:.0f} s) "
                       f"would overrun the budget ({elapsed_s:.0f} of {budget_s:g} s spent)")
    return True, (f"inconclusive after {rounds} rounds ({', '.join(sorted(inconclusive))}): "
                  f"one more round ({elapsed_s:.0f} of {budget_s:g} s spent)")


def _collect(out: Path, duration: float, command: str) -> None:
    args = [sys.executable, "-m", "wallflame", "collect", "-o", str(out), "--duration",
            f"{duration:g}", "--", *shlex.split(command)]
    r = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       check=False)
    if r.returncode != 0:
        # the collect's own one-line error, with its exit code and fix, said for this run
        last = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        said = re.fullmatch(r"(?:wallflame: error: )?(.*?)(?: \(fix: (.*)\))?", last)
        what, fix = (said.group(1), said.group(2)) if said else (last, None)
        error = {EXIT_TARGET: TargetError, EXIT_PERMISSION: PermissionDenied}.get(
            r.returncode, ToolError)
        raise error(f"the collect of {out} failed: {what}",
                    fix or "run the command alone to see why; wallflame doctor checks the "
                    "machine")


def _usable_run(out: Path, label: str, duration: float, command: str,
                t: Thresholds) -> None:
    """A run collected into ``out``, made again while it lost too much to be compared (up to
    ``REMAKES`` times; the last is kept)."""
    for attempt in range(REMAKES + 1):
        _collect(out, duration, command)
        why = lost_too_much(load_side(str(out), label, ignored(t))[0][0], t)
        if not why or attempt == REMAKES:
            return
        click.echo(f"wallflame ab: {'; '.join(why)}: made again", err=True)
        shutil.rmtree(out)


@click.command("ab")
@click.option("--base", "base_cmd", required=True, metavar="CMD",
              help="The base build's command, split into words as a shell would; no shell runs "
              "it (write sh -c '...' for one).")
@click.option("--head", "head_cmd", required=True, metavar="CMD",
              help="The head build's command, split the same way.")
@click.option("--rounds", default=ROUNDS, show_default=True, type=click.IntRange(1, MAX_ROUNDS),
              help="Rounds to start with: each side runs once a round, in turns (ABBA).")
@click.option("--budget", default=BUDGET_S, show_default=True, metavar="SECONDS",
              type=click.FloatRange(0), help="Seconds the whole A/B may take: while the "
              "verdict is inconclusive for want of runs, rounds are added one at a time as "
              "long as one more fits (0: exactly --rounds).")
@click.option("--duration", default=DURATION_S, show_default=True,
              type=click.FloatRange(1, 3600), help="Seconds of each run's window.")
@click.option("-o", "--output", "out", default="wallflame-ab", show_default=True,
              type=click.Path(file_okay=False), help="Directory for base/, head/ and the verdict.")
@click.option("-t", "--threshold", "overrides", multiple=True, metavar="KEY=VALUE",
              help="A setting of the check (as wallflame check -t).")
@click.option("--config", type=click.Path(dir_okay=False), default=None,
              help=f"Settings file (default: ./{CONFIG_NAME} when present).")
@click.pass_context
def command(ctx: click.Context, base_cmd: str, head_cmd: str, rounds: int, budget: float,
            duration: float, out: str, overrides: tuple[str, ...], config: str | None) -> None:
    """Profile BASE and HEAD in turns on this machine and judge HEAD against BASE.

    \b
    Exit codes: 0 no regression; 1 regression; 7 inconclusive (as wallflame check).
    A warm-up run of each side comes first and is discarded; then each round runs
    both sides, the first of a round alternating (base, head, head, base, ...).
    An inconclusive verdict that more runs can settle (too few to have seen the
    `sensitivity` increase, or sides under different load) gets one more round at a
    time while the --budget lasts; every look is one more chance of a false alarm.
    """
    thresholds = load_thresholds(config, list(overrides))
    for name, cmd in (("--base", base_cmd), ("--head", head_cmd)):
        try:
            if not shlex.split(cmd):
                raise ValueError("empty")
        except ValueError as e:
            raise click.BadParameter(f"{cmd!r} is not a command line ({e})",
                                     param_hint=name) from None
    root = Path(out)
    commands = {"base": base_cmd, "head": head_cmd}
    started = time.monotonic()
    for side in ("base", "head"):
        click.echo(f"wallflame ab: warm-up, {side}", err=True)
        _collect(root / "warmup" / side, min(duration, 5.0), commands[side])
    made, spent = 0, 0.0  # rounds made, and their seconds
    while True:
        t = time.monotonic()
        for i, side in order(rounds)[2 * made:]:
            click.echo(f"wallflame ab: round {i} of {rounds}, {side}", err=True)
            _usable_run(root / side / f"run-{i}", f"{side}/run-{i}", duration,
                        commands[side], thresholds)
        made, spent = rounds, spent + time.monotonic() - t
        t = time.monotonic()
        verdict = verdict_of(str(root / "base"), str(root / "head"), thresholds)
        more, why = next_round(
            verdict.status, [r.name for r in verdict.results if r.status == INCONCLUSIVE],
            made, time.monotonic() - started, spent / made + time.monotonic() - t, budget)
        click.echo(f"wallflame ab: {why}", err=True)
        if not more:
            break
        rounds += 1
    ctx.exit(publish(verdict, str(root / "diff.html"), str(root / "summary.md"), None,
                     str(root / "verdict.json")))
