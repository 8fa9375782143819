"""``wallflame check``: the CI gate (exit 0 pass, 1 regression, 7 inconclusive)."""

from __future__ import annotations

import gc
import os

import click

from wallflame.output import open_output
from wallflame.report.check import CONFIG_NAME, judge, load_thresholds
from wallflame.report.check_output import junit, markdown
from wallflame.report.diff import compare
from wallflame.rundir import load_inputs


@click.command("check")
@click.argument("baseline", type=click.Path(exists=True))
@click.argument("current", type=click.Path(exists=True))
@click.option("-t", "--threshold", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a threshold (repeatable), e.g. -t frame_share_pp=5 -t "
              "min_samples=1000. Keys and defaults: see above.")
@click.option("--config", type=click.Path(dir_okay=False), default=None,
              help=f"Thresholds file (default: ./{CONFIG_NAME} when present).")
@click.option("--html", "html_out", default="wallflame-diff.html", show_default=True,
              type=click.Path(dir_okay=False), help="Differential report to write ('' for none).")
@click.option("--markdown", "md_out", default=None, type=click.Path(dir_okay=False),
              help="Also write the Markdown summary here (it is always appended to "
              "$GITHUB_STEP_SUMMARY when that is set).")
@click.option("--junit", "junit_out", default=None, type=click.Path(dir_okay=False),
              help="Write JUnit XML, one test case per threshold.")
@click.pass_context
def command(ctx: click.Context, baseline: str, current: str, overrides: tuple[str, ...],
            config: str | None, html_out: str, md_out: str | None,
            junit_out: str | None) -> None:
    """Judge CURRENT against BASELINE (run directories or captures).

    \b
    Exit codes: 0 no regression; 1 regression beyond a threshold; 7 inconclusive (too few
    samples, lost or truncated data, or runs collected differently): never "pass" on partial
    data. Thresholds, with defaults, settable in .wallflame-check.toml under [thresholds]:
      frame_share_pp=5.0    on-CPU inclusive share of any frame, growth in points
      wait_s_per_s=0.25     off-CPU s per s of window per wait class, growth ...
      wait_relative=1.0     ... and relative growth (a class fails past both)
      wait_classes=mutex,rwlock,io  (of mutex,rwlock,condvar,io,poll,sleep,other)
      mutex_share_pp=10     mutex wait share of all thread time, growth in points
      cpu_per_work_relative=0.10  CPU per unit of work (when both runs record work)
      ignore_frames=RE,...  frames frame_share does not judge (default: the kernel's
                            interrupt and preemption entry points)
      min_samples=500       on-CPU samples each side needs
      noise_k=3.0           changes within k standard errors of sampling are noise
      rate_tolerance=0.10   sampling rates may differ this much
      max_loss_share=0.005  losses up to this share of a side's evidence are tolerated
      allowed_losses=       kinds of loss that never make the check inconclusive
    """
    thresholds = load_thresholds(config, list(overrides))
    gc.disable()  # ~1M short-lived acyclic objects: the cyclic collector only costs time here
    before, after = load_inputs([baseline]), load_inputs([current])
    diff = compare(before, after, (baseline, current), None, thresholds.noise_k)
    verdict = judge(diff, thresholds)
    if html_out:
        from wallflame.report.diff_html import write_html

        write_html(diff, html_out, verdict)
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
    for r in verdict.results:
        click.echo(f"{r.status:>12}  {r.name}: {r.message}")
    click.echo(f"wallflame check: {verdict.status}")
    ctx.exit(verdict.exit_code)
