"""``wallflame diff``: two runs compared, both directions, with a noise floor."""

from __future__ import annotations

import gc
import json
import sys

import click

from wallflame.fold import load_inputs
from wallflame.output import open_output, print_losses
from wallflame.report.diff.compare import NORMALISATIONS, compare
from wallflame.report.diff.text import to_json, write_text


def output_format(path: str, fmt: str | None) -> str:
    if fmt:
        return fmt
    for ext, name in ((".html", "html"), (".htm", "html"), (".json", "json")):
        if path.lower().endswith(ext):
            return name
    return "text"


@click.command("diff")
@click.argument("before", type=click.Path(exists=True))
@click.argument("after", type=click.Path(exists=True))
@click.option("-o", "--output", default="-", type=click.Path(allow_dash=True),
              help="Write here (default: text on standard output). The format follows the "
              "extension: .html page, .json data, anything else text.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "html"]), default=None,
              help="Output format, overriding the extension.")
@click.option("--normalise", "--normalize", "mode", type=click.Choice(NORMALISATIONS),
              default=None, help="rate: thread time per second of window (default when both "
              "windows are known); share: share of each side's total.")
@click.option("--noise-k", default=3.0, show_default=True, type=click.FloatRange(0, 100),
              help="Changes within this many standard errors of sampling are drawn neutral.")
@click.option("--top", default=15, show_default=True, type=click.IntRange(1, 10000),
              help="Rows per table in the text and JSON forms.")
def command(before: str, after: str, output: str, fmt: str | None, mode: str | None,
            noise_k: float, top: int) -> None:
    """Compare BEFORE with AFTER (run directories, captures or folded files).

    Shows what grew, what shrank and what vanished, self and inclusive, per thread, per wait
    class and per lock, with the normalisation and the noise floor stated.
    """
    gc.disable()  # ~1M short-lived acyclic objects: the cyclic collector only costs time here
    pa, pb = load_inputs([before]), load_inputs([after])
    for p in (pa, pb):
        print_losses(p.meta)
    diff = compare(pa, pb, (before, after), mode, noise_k)
    kind = output_format(output, fmt)
    if kind == "html":
        from wallflame.report.diff.page import write_html

        write_html(diff, output)
        click.echo(f"wallflame: wrote {output}", err=True)
        return
    with open_output(output) as out:
        if kind == "json":
            json.dump(to_json(diff, top), out, sort_keys=True, indent=1)
            out.write("\n")
        else:
            write_text(diff, out, top)
    if output != "-":
        click.echo(f"wallflame: wrote {output}", err=True)
    sys.stdout.flush()
