"""``wallflame check``: the CI gate (exit 0 pass, 1 regression, 7 inconclusive)."""

from __future__ import annotations

import gc
import json
import os

import click

from wallflame.output import open_output
from wallflame.profile import Profile
from wallflame.report.diff.compare import compare
from wallflame.report.diff.text import visible
from wallflame.report.gate.check import Verdict, ignored, judge
from wallflame.report.gate.output import junit, markdown, to_json, verdict_sentence
from wallflame.report.gate.series import load_side
from wallflame.report.gate.thresholds import CONFIG_NAME, Thresholds, load_thresholds
from wallflame.waitclasses import WAIT_CLASSES

#: The command's help; its list of wait classes is the table's (``waitclasses``).
HELP = """Judge CURRENT against BASELINE: each a run directory, a capture, or a directory of run
directories (a series of repeated runs).

\b
Exit codes: 0 no regression; 1 regression; 7 inconclusive (runs that cannot be
compared: different collectors or rates, truncated data, too much lost; or a pass
that could not have seen a `sensitivity` increase). A regression is an increase that
Welch's one-sided t-test finds significant, Holm-corrected over every quantity
judged, and larger than the minimum effect; the noise comes from the spread over
slices of each run and between the runs of a series (docs/check.md).
Settings, with defaults, settable in .wallflame-check.toml under [thresholds]:
  alpha=0.01               false-alarm rate of one whole check
  min_effect_pp=1.0        frame shares: ignore increases under this many points
  min_effect_relative=0.02 any quantity: ignore increases under this fraction
  min_effect_s_per_s=0.02  wait classes: ignore increases under this (s/s)
  min_frame_share=0.005    judge functions with at least this on-CPU share
  sensitivity=0.10         a pass must have been able to see this increase
  power=0.8                ... with this probability
  run_cv=0.04              run-to-run spread of CPU per work when no side is a
                           series (a series measures it)
  wait_run_cv=0.3          the same for wait classes
  wait_classes={judged}  (of {classes})
  ignore_frames=RE,...     frames not judged (default: interrupt and preemption
                           entry points)
  rate_tolerance=0.10      sampling rates may differ this much
  max_loss_share=0.25      more evidence lost than this: runs cannot be compared
  allowed_losses=          kinds of loss never counted
  top=8                    frames shown in the summary
""".format(judged=",".join(Thresholds().wait_classes), classes=",".join(WAIT_CLASSES))


def _fold_capture(path: str) -> Profile:
    """A side of the check given as a capture file, folded."""
    from wallflame.fold import load_inputs

    return load_inputs([path])


@click.command("check", help=HELP)
@click.argument("baseline", type=click.Path(exists=True))
@click.argument("current", type=click.Path(exists=True))
@click.option("-t", "--threshold", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a setting (repeatable), e.g. -t alpha=0.001 -t "
              "min_effect_relative=0.05. Keys and defaults: see above.")
@click.option("--across-machines", is_flag=True, default=False,
              help="Judge runs from different machines (CPU model, CPU count, kernel, "
              "frequency governor, virtual or not) as alike; without it such a check is "
              "inconclusive (exit 7). The same as -t across_machines=true.")
@click.option("--config", type=click.Path(dir_okay=False), default=None,
              help=f"Settings file (default: ./{CONFIG_NAME} when present).")
@click.option("--html", "html_out", default="wallflame-diff.html", show_default=True,
              type=click.Path(dir_okay=False), help="Differential report to write ('' for none).")
@click.option("--markdown", "md_out", default=None, type=click.Path(dir_okay=False),
              help="Also write the Markdown summary here (it is always appended to "
              "$GITHUB_STEP_SUMMARY when that is set).")
@click.option("--junit", "junit_out", default=None, type=click.Path(dir_okay=False),
              help="Write JUnit XML, one test case per test.")
@click.option("--json", "json_out", default=None, type=click.Path(dir_okay=False),
              help="Write the verdict, every quantity judged and its interval as JSON.")
@click.pass_context
def command(ctx: click.Context, baseline: str, current: str, overrides: tuple[str, ...],
            across_machines: bool, config: str | None, html_out: str, md_out: str | None,
            junit_out: str | None, json_out: str | None) -> None:
    """Judge CURRENT against BASELINE (the command's help: ``HELP``)."""
    thresholds = load_thresholds(config, list(overrides))
    if across_machines:
        thresholds.across_machines = True
    ctx.exit(gate(baseline, current, thresholds, html_out, md_out, junit_out, json_out))


def gate(baseline: str, current: str, thresholds: Thresholds, html_out: str,
         md_out: str | None = None, junit_out: str | None = None,
         json_out: str | None = None) -> int:
    """The check of ``current`` against ``baseline``: its outputs written and its results
    printed; returns its exit code (``wallflame check`` and ``wallflame ab``)."""
    return publish(verdict_of(baseline, current, thresholds), html_out, md_out, junit_out,
                   json_out)


def verdict_of(baseline: str, current: str, thresholds: Thresholds) -> Verdict:
    """The verdict on ``current`` against ``baseline``, nothing written or printed."""
    gc.disable()  # ~1M short-lived acyclic objects: the cyclic collector only costs time here
    cut = ignored(thresholds)
    from wallflame.fold.slices import compute_slices

    before_runs, before = load_side(baseline, "baseline", cut, _fold_capture, compute_slices)
    after_runs, after = load_side(current, "current", cut, _fold_capture, compute_slices)
    diff = compare(before, after, (baseline, current), None)
    return judge(before_runs, after_runs, diff, thresholds)


def publish(verdict: Verdict, html_out: str, md_out: str | None = None,
            junit_out: str | None = None, json_out: str | None = None) -> int:
    """A verdict's outputs written and its results printed; returns its exit code."""
    if html_out:
        from wallflame.report.diff.page import write_html

        write_html(verdict.diff, html_out, verdict)
    text = markdown(verdict, os.path.basename(html_out) if html_out else None)
    summary_path = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_path:
        with open(summary_path, "a", encoding="utf-8") as f:
            f.write(text)
    if md_out:
        with open_output(md_out) as out:
            out.write(text)
    if junit_out:
        with open_output(junit_out) as out:
            out.write(junit(verdict))
    if json_out:
        with open_output(json_out) as out:
            out.write(json.dumps(to_json(verdict), indent=1, sort_keys=True) + "\n")
    for r in verdict.results:
        click.echo(f"{r.status:>12}  {r.name}: {r.message}")
    click.echo(f"wallflame check: {verdict.status}: {visible(verdict_sentence(verdict), 2000)}"
               + (f" (diff: {html_out})" if html_out else ""))
    return verdict.exit_code

