"""``wallflame fold``: any capture in, folded stacks out."""

from __future__ import annotations

import os
import sys

import click

from wallflame.classify import load_rules
from wallflame.fold import FoldOptions, fold_file, formats
from wallflame.folded import ThreadRoot, write_folded
from wallflame.output import open_output, print_losses, summary_table
from wallflame.profile import Profile, merge_all


@click.command("fold")
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True))
@click.option("--format", "fmt", type=click.Choice(formats()), default=None,
              help="Input format (default: detected from the first lines of each file).")
@click.option("-o", "--output", default="-", type=click.Path(allow_dash=True),
              help="Write folded stacks here (default: standard output).")
@click.option("--event", default=None,
              help="perf: fold only this event (default: every event, each kept apart).")
@click.option("--pid", "root", flag_value=ThreadRoot.PID.value,
              help="Root frame comm-PID (stackcollapse --pid).")
@click.option("--tid", "root", flag_value=ThreadRoot.TID.value,
              help="Root frame comm-PID/TID (stackcollapse --tid).")
@click.option("--no-thread", "root", flag_value=ThreadRoot.NONE.value,
              help="No thread root frame at all.")
@click.option("--kernel", is_flag=True, help="Mark kernel frames with _[k].")
@click.option("--annotate", is_flag=True,
              help="Write wallflame's lossless folded flavour (thread, state, wait class, "
              "lock, holder, metadata) instead of plain folded text.")
@click.option("--state", type=click.Choice(["all", "on", "off"]), default="all",
              help="Keep only on-CPU or only off-CPU stacks.")
@click.option("--unit", type=click.Choice(["samples", "ns", "us"]), default="samples",
              help="Unit of plain folded input (bcc offcputime writes us).")
@click.option("--rules", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Extra wait-classification rules (rules.tsv format), tried first.")
@click.option("--summary", is_flag=True,
              help="Print per-thread and per-class totals instead of stacks.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="Processes folding a big perf capture in parts (default: one per CPU).")
def command(files: tuple[str, ...], fmt: str | None, output: str, event: str | None,
            root: str | None, kernel: bool, annotate: bool, state: str, unit: str,
            rules: str | None, summary: bool, jobs: int | None) -> None:
    """Fold captures (perf script, gdb/eu-stack dumps, pt-pmp logs, folded) into stacks.

    Output is sorted and deterministic. Several files are merged. Plain output for perf
    script input matches stackcollapse-perf.pl / inferno-collapse-perf (see docs/formats.md
    for the deliberate differences).
    """
    options = FoldOptions(event=event, kernel=kernel, rules=load_rules(rules) if rules else None,
                          folded_unit=unit)
    # plain stacks of a big perf capture: folded in parts on every CPU (same result)
    if annotate or summary:
        jobs = 1
    elif jobs is None:
        jobs = len(os.sched_getaffinity(0))
    profile = merge_all(_fold(f, options, fmt, jobs) for f in files)
    if state != "all":
        profile = profile.on_cpu() if state == "on" else profile.off_cpu()
    print_losses(profile.meta)
    if summary:
        summary_table(profile, sys.stdout)
        return
    with open_output(output) as out:
        write_folded(profile, out, ThreadRoot(root or ThreadRoot.COMM.value), annotate)


def _fold(path: str, options: FoldOptions, fmt: str | None, jobs: int) -> Profile:
    if jobs < 2 or path == "-" or fmt not in (None, "perf"):
        return fold_file(path, options, fmt)
    from wallflame.fold import detect_format
    from wallflame.fold.perf.reader import PARALLEL_MIN, fold_parallel
    from wallflame.textio import head

    try:
        big = os.path.getsize(path) >= PARALLEL_MIN
    except OSError:
        big = False
    kind = fmt or (detect_format(head(path), path) if big else None)
    if kind != "perf":
        return fold_file(path, options, kind)
    profile = Profile()
    fold_parallel(path, options, profile, jobs)
    profile.meta.sources.append({"path": path, "format": kind})
    return profile
