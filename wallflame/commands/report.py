"""``wallflame report``: run directories, captures or folded files in; one report out."""

from __future__ import annotations

import math

import click

from wallflame.report.writers import NAMES, extension
from wallflame.reportrun import VIEWS
from wallflame.runfiles import BLAME


@click.command("report")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(allow_dash=True))
@click.option("-o", "--output", default=None, type=click.Path(allow_dash=True),
              help="Where to write (default: RUN_DIR/report.html for one run directory, else "
              "report.html; '-' is standard output).")
@click.option("--format", "fmt", type=click.Choice(NAMES), default=None,
              help="Report format (default: from the output's suffix: "
              f"{' '.join(extension(n) for n in NAMES)}; perfetto needs a run directory).")
@click.option("--state", type=click.Choice(["all", "on", "off"]), default="all",
              help="Keep only on-CPU or only off-CPU stacks.")
@click.option("--unit", type=click.Choice(["samples", "ns", "us"]), default="samples",
              help="Unit of plain folded input (bcc offcputime writes us).")
@click.option("--title", default=None, help="Title of the report (default: the target).")
@click.option("--rules", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Extra wait-classification rules (rules.tsv format), tried first: they "
              "classify captures and label every stack (lock: ProcSleep).")
@click.option("--from", "from_s", type=float, default=None, metavar="S",
              help="Only the range starting S seconds into the window (run directories: "
              "their timeline.json.gz), for every format.")
@click.option("--to", "to_s", type=float, default=None, metavar="S",
              help="Only the range ending S seconds into the window.")
@click.option("--view", type=click.Choice(VIEWS), default="wall", show_default=True,
              help="wall: where the threads' time went; blame: the critical path of their "
              "waits, the code that ran while they waited (one run directory, its "
              f"{BLAME}; docs/critical-path.md).")
def command(inputs: tuple[str, ...], output: str | None, fmt: str | None, state: str,
            unit: str, title: str | None, rules: str | None, from_s: float | None,
            to_s: float | None, view: str) -> None:
    """Render run directories, captures or folded files as one report.

    Several inputs are merged (for example the same service on several hosts). The HTML page is
    self-contained: no network access, scripts allowed only by hash; it is written mode 0600
    because it may hold command lines and symbol names of the target.
    """
    for value, name in ((from_s, "--from"), (to_s, "--to")):
        if value is not None and not math.isfinite(value * 1e9):  # ns of the window
            raise click.BadParameter(f"{value} is not a number of seconds into the window",
                                     param_hint=name)
    if from_s is not None and to_s is not None and to_s <= from_s:
        raise click.BadParameter("--to must come after --from (seconds into the window)",
                                 param_hint="--to")
    from wallflame.reportrun import run

    run(inputs, output, fmt, state, unit, title, rules, from_s, to_s, view)
