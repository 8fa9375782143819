"""``wallflame report``: run directories, captures or folded files in; one report out."""

from __future__ import annotations

import gc
import os

import click

from wallflame.cli import quick_exit
from wallflame.fold import FoldOptions, load_inputs
from wallflame.output import print_losses
from wallflame.profile import Profile
from wallflame.report.writers import NAMES, extension, format_for
from wallflame.rundir import is_run_dir


def _default_output(inputs: tuple[str, ...], fmt: str | None) -> str:
    if fmt == "txt":
        return "-"
    ext = extension(fmt or "html")
    if len(inputs) == 1 and is_run_dir(inputs[0]):
        return os.path.join(inputs[0], f"report{ext}")
    return f"report{ext}"


def load_range(inputs: tuple[str, ...], from_s: float | None, to_s: float | None
               ) -> Profile:
    """The run directories restricted to ``[from_s, to_s)`` seconds into each one's window,
    merged."""
    from wallflame import timeline
    from wallflame.errors import InputError
    from wallflame.profile import merge_all
    from wallflame.report.timerange import restrict, window_range
    from wallflame.rundir import load_run_dir

    parts = []
    for path in inputs:
        if not is_run_dir(path):
            raise InputError(f"{path}: --from/--to need a run directory (its timeline)",
                             "give a directory written by wallflame collect")
        tl = timeline.load(path)
        parts.append(restrict(load_run_dir(path), tl, window_range(tl, from_s, to_s)))
    return parts[0] if len(parts) == 1 else merge_all(parts)


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
def command(inputs: tuple[str, ...], output: str | None, fmt: str | None, state: str,
            unit: str, title: str | None, rules: str | None, from_s: float | None,
            to_s: float | None) -> None:
    """Render run directories, captures or folded files as one report.

    Several inputs are merged (for example the same service on several hosts). The HTML page is
    self-contained: no network access, scripts allowed only by hash; it is written mode 0600
    because it may hold command lines and symbol names of the target.
    """
    from wallflame.classify import load_rules, set_label_rules
    from wallflame.report.exports import add_run_facts, write_report

    # Reading a profile allocates millions of objects and frees almost none of them, which
    # makes the cyclic collector scan the growing heap again and again (a tenth of the run
    # time) for cycles that are not there.
    if from_s is not None and to_s is not None and to_s <= from_s:
        raise click.BadParameter("--to must come after --from (seconds into the window)",
                                 param_hint="--to")
    collecting, ending = gc.isenabled(), False
    gc.disable()
    try:
        extra = load_rules(rules) if rules else None
        set_label_rules(extra)
        if from_s is None and to_s is None:
            profile = load_inputs(inputs, FoldOptions(folded_unit=unit, rules=extra))
        else:
            profile = load_range(inputs, from_s, to_s)
        add_run_facts(profile, inputs)
        if state != "all":
            profile = profile.on_cpu() if state == "on" else profile.off_cpu()
        print_losses(profile.meta)
        out = output or _default_output(inputs, fmt)
        kind = format_for(out, fmt)
        write_report(profile, kind, out, title)
        ending = quick_exit(profile)  # the process ends soon: nothing is freed or collected
    finally:
        if collecting and not ending:
            gc.enable()
    if out != "-":
        size = os.path.getsize(out)
        click.echo(f"wallflame: wrote {out} ({kind}, {size / 1024:.0f} KiB, "
                   f"{len(profile.stacks)} stacks, {len(profile.per_thread())} threads)",
                   err=True)
