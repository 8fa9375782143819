"""``wallflame demo``: the headline case, end to end, in under two minutes.

Builds the ``queue`` sample (one producer, eight consumers), profiles the mutex-queue variant
and the lock-free variant under ``wallflame collect``, writes a report for each and the diff
between them, and prints what changed: the consumers' mutex wait and the throughput.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from wallflame.errors import ToolError
from wallflame.rundir import RAW, SUMMARY, TARGET_STDOUT, is_number, read_capture, read_json
from wallflame.textio import json_objects

VARIANTS = (("before", "mutex"), ("after", "lockfree"))


def samples_dir() -> Path:
    here = Path(__file__).resolve().parents[2] / "samples"
    if not (here / "Makefile").exists():
        raise ToolError("the samples/ folder is not next to the package",
                        "run the demo from a checkout of the wallflame repository")
    return here


def run(args: list[str], what: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(args, text=True, capture_output=True, check=False)
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise ToolError(f"{what} failed (exit {r.returncode}): {' / '.join(tail)}",
                        "see the message above; `wallflame doctor` checks the set-up")
    return r


def wallflame(*args: str) -> list[str]:
    return [sys.executable, "-m", "wallflame", *args]


def work_line(run_dir: Path, stdout: str) -> dict[str, Any]:
    """The sample's one-line JSON work counter, from the run directory or collect's output."""
    texts = [stdout]
    for name in (TARGET_STDOUT, "stdout.txt"):
        p = run_dir / RAW / name
        if p.exists():
            texts.insert(0, p.read_text(encoding="utf-8", errors="replace"))
    for text in texts:
        for d in json_objects(reversed(text.splitlines()), "rate"):
            return d
    return {}


def program_clock(run_dir: Path) -> tuple[float, int, int] | None:
    """The queue sample's own figure over the window: the consumers' lock wait between its
    first and last progress lines inside the window, over their wall time there, with those
    lines' instants (CLOCK_MONOTONIC ns, the window's clock); ``None`` without two such lines
    (a sample without progress lines, a run whose window has no such bounds)."""
    bounds = read_capture(run_dir / RAW).window.on_perf_clock()
    path = run_dir / RAW / TARGET_STDOUT
    if bounds is None or not path.exists():
        return None
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    inside = [d for d in json_objects(lines, "consumer_lock_wait_ns")
              if isinstance(d.get("t_ns"), int) and bounds[0] <= d["t_ns"] <= bounds[1]
              and is_number(d["consumer_lock_wait_ns"])
              and math.isfinite(d["consumer_lock_wait_ns"])
              and isinstance(d.get("consumers", 1), int)]
    if len(inside) < 2:
        return None
    first, last = inside[0], inside[-1]
    span = (last["t_ns"] - first["t_ns"]) * max(1, int(first.get("consumers") or 1))
    if span <= 0:
        return None
    wait = float(last["consumer_lock_wait_ns"]) - float(first["consumer_lock_wait_ns"])
    return wait / span, first["t_ns"], last["t_ns"]


def consumer_mutex_share(summary: dict[str, Any]) -> float:
    """Consumers' mutex wait as a share of their wall time (on-CPU + runnable + blocked), as
    the program clocks it around its lock call: blocked on the mutex, woken from it but not
    yet running (``runnable_after``), and on a CPU inside the lock's wait (``on_cpu_in``:
    entering and leaving the futex)."""
    wait = total = 0.0
    for t in summary.get("threads", []):
        if str(t.get("name", "")).startswith("consumer"):
            wait += float(t["wait"]["mutex"]) + sum(
                float((t.get(key) or {}).get("mutex", 0.0))
                for key in ("runnable_after", "on_cpu_in"))
            total += float(t["on_cpu_s"]) + float(t.get("runnable_s", 0.0)) + \
                float(t["off_cpu_s"])
    return wait / total if total else 0.0


def lock_story(summary: dict[str, Any]) -> str:
    """The queue lock's line: where its confirmed holders were (from the lock's call site to
    the leaf of the most observed holder stack), how much of its wait that covers, and where
    it was released."""
    locks = [lk for lk in summary.get("locks", []) if "g_mutex_queue" in str(lk.get("lock"))]
    if not locks:
        return "queue lock: not identified in this run"
    lk = locks[0]
    held = lk.get("held_confirmed") or {}
    line = f"queue lock: {held.get('count', 0)} of {held.get('of', 0)} observations caught its " \
           "holder"
    if "share" in held:  # enough observations to scale to the time waited
        line += f" ({lk.get('held_confirmed_s', 0):.2f} s of {lk.get('wait_s', 0):.2f} s waited)"
    if lk.get("holders"):
        frames = str(lk["holders"][0]["stack"]).split(";")
        sites = {s["frame"] for s in lk.get("call_sites", [])}
        start = max((i for i, f in enumerate(frames) if f in sites), default=0)
        line += ", held in " + " -> ".join(frames[start:])
    rel = (lk.get("released_from") or {}).get("sites") or []
    if rel:
        line += f", released from {rel[0]['frame']}"
    return line


#: The demo's collects also record each wake-up's waker: the queue lock's critical path.
DEMO_OPTIONS = ("--wakers",)


def critical_path_story(summary: dict[str, Any]) -> str:
    """The consumers' wait on the queue lock by its critical path (``report.blame``): the
    share of it with a known waker and the code that ran while they waited."""
    rows = [r for r in summary.get("critical_path") or []
            if r["waiters"].startswith("consumer") and "g_mutex_queue" in r["wait"]]
    if not rows:
        return "queue lock, critical path: not recorded in this run (needs root)"
    r = rows[0]
    causes = ", ".join(f"{c['what']}" + (f" ({c['who']})" if c["who"] else "")
                       + f" {100 * c['share']:.0f}%" for c in r["causes"][:3])
    return (f"queue lock, critical path: {100 * r['explained']:.0f}% of the consumers' "
            f"{r['waited_s']:.2f} s wait has a known waker; while they waited: {causes}")


@click.command("demo")
@click.option("-o", "--output", "out", default="wallflame-demo", type=click.Path(file_okay=False),
              show_default=True, help="Directory for before/, after/ and diff.html.")
@click.option("--duration", default=8.0, show_default=True, type=click.FloatRange(1, 120),
              help="Seconds to profile each variant.")
def command(out: str, duration: float) -> None:
    """Profile the mutex-bound queue before and after the lock-free fix, and diff them."""
    samples = samples_dir()
    run(["make", "-s", "-C", str(samples), "bin/queue"], "building the queue sample")
    binary = samples / "bin" / "queue"
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    results = {}
    for label, variant in VARIANTS:
        run_dir = root / label
        click.echo(f"demo: profiling queue --queue={variant} for {duration:g}s -> {run_dir}/",
                   err=True)
        r = run(wallflame("collect", "-o", str(run_dir), "--duration", f"{duration:g}",
                          *DEMO_OPTIONS, "--",
                          str(binary), f"--queue={variant}", "--duration", f"{duration:g}"),
                f"collecting the {variant} variant")
        run(wallflame("report", str(run_dir), "-o", str(run_dir / "report.html")),
            f"the {label} report")
        own_clock = program_clock(run_dir)
        results[label] = (read_json(run_dir / SUMMARY), work_line(run_dir, r.stdout),
                          own_clock[0] if own_clock else None)
    run(wallflame("diff", str(root / "before"), str(root / "after"), "-o",
                  str(root / "diff.html")), "the diff")
    (sb, wb, clock), (sa, wa, _) = results["before"], results["after"]
    unit = wb.get("unit", "messages")
    own = wb.get("consumer_mutex_wait_pct")
    if clock is not None:  # over the same window
        mine = f" (the program's own clock over the window: {clock:.1%})"
    else:  # over the program's whole run, which the window may not cover
        mine = f" (the program's own clock over its run: {float(own):.1f}%)" \
            if own is not None else ""
    click.echo(f"consumers' mutex wait: {consumer_mutex_share(sb):.1%} of their wall time before"
               + mine + f", {consumer_mutex_share(sa):.1%} after")
    click.echo(lock_story(sb))
    click.echo(critical_path_story(sb))
    rb, ra = float(wb.get("rate", 0)), float(wa.get("rate", 0))
    gain = f" ({ra / rb - 1:+.0%})" if rb else ""
    click.echo(f"throughput: {rb:,.0f} {unit}/s before, {ra:,.0f} {unit}/s after{gain}")
    click.echo(f"files: {root}/before/report.html, {root}/after/report.html, {root}/diff.html")
