"""The power of ``wallflame ab`` without work reporting: how often a 25% slower handler is
caught and named, and how often an unchanged A/B fails.

The target is ``samples/bin/handlers`` (a CPU-bound service with eight handlers;
``--slow-auth`` makes ``h_auth``, 12% of the work, 25% slower: about 3% more CPU per request),
run so that it reports no work: ``--progress-ms 0`` and its stdout sent to ``/dev/null``
(``sh -c 'exec ...'``: the shell becomes the program, which takes the collect's SIGTERM), so
the check has no CPU per request and must find the change in the frames' shares alone.

Each A/B is ``wallflame ab --rounds 3 --budget 0 --duration 10`` (a warm-up of each side,
then 3 + 3 runs of 10 s in turns, no rounds added), as a CI job would run it:

* slower: base against ``--slow-auth``; caught means exit 1 with ``h_auth`` among the
  frames a regression result names;
* unchanged: base against base; a false alarm is exit 1.

The A/Bs are made in the order unchanged, slower, unchanged, ... (one slower in three), so a
drift of the machine's load over the hour falls on both kinds.  Each A/B holds
``/tmp/wallflame-measure.lock`` while it runs and leaves it free ``--pause`` seconds after.
The load average is printed before each A/B.

Usage::

    .venv/bin/python benchmarks/ab_power.py --out /tmp/ab-power       # 30 A/Bs, about 50 min
    .venv/bin/python benchmarks/ab_power.py --out /tmp/ab-power --judge-only   # count again

A/Bs already in ``--out`` (with a ``verdict.json``) are kept: a second call makes the rest.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rows import Row, row, write_rows  # noqa: E402

HANDLERS = ROOT / "samples" / "bin" / "handlers"
LOCK = "/tmp/wallflame-measure.lock"
#: The frame a caught change must name.
FRAME = "h_auth"
#: Between A/Bs the lock is left free this long (flock is not fair).
PAUSE_S = 10.0


def command(slow: bool, run_s: float) -> str:
    """One side's command for ``wallflame ab``: the program, reporting no work (no progress
    lines, its stdout discarded), running longer than the window (the collect ends it)."""
    args = [str(HANDLERS), "--duration", f"{run_s + 30:g}", "--progress-ms", "0"]
    if slow:
        args.append("--slow-auth")
    return shlex.join(["sh", "-c", 'exec "$0" "$@" >/dev/null', *args])


def plan(slower: int, unchanged: int) -> list[str]:
    """The kinds of the A/Bs in the order they are made: the slower ones spread evenly among
    the unchanged ones (one in three for 10 and 20)."""
    total = slower + unchanged
    kinds, placed = [], 0
    for i in range(total):
        due = (i + 1) * slower // total  # slower A/Bs that should be made by now
        if placed < due:
            kinds.append("slower")
            placed += 1
        else:
            kinds.append("unchanged")
    return kinds


def run_ab(out: Path, slow: bool, run_s: float, rounds: int) -> None:
    cmd = [sys.executable, "-m", "wallflame", "ab", "--base", command(False, run_s),
           "--head", command(slow, run_s), "--rounds", str(rounds), "--budget", "0",
           "--duration", f"{run_s:g}", "-o", str(out)]
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False,
                       cwd=ROOT)
    seconds = time.monotonic() - t0
    if r.returncode not in (0, 1, 7):
        sys.exit(f"ab_power: {shlex.join(cmd)} failed (exit {r.returncode}): "
                 f"{r.stderr.strip().splitlines()[-1:]}")
    (out / "ab.json").write_text(json.dumps({
        "exit": r.returncode, "seconds": seconds, "command": cmd,
        "remade": r.stderr.count(": made again")}) + "\n")  # runs that lost too much


def outcome(out: Path) -> dict[str, Any]:
    """One A/B's exit code, seconds, runs made again for losing too much (``None`` when not
    recorded), whether it named ``FRAME`` in a regression, its verdict
    sentence (the summary's first line of text), ``FRAME``'s change, and whether the check
    judged CPU per unit of work (it must not: no work is reported)."""
    ab = json.loads((out / "ab.json").read_text())
    verdict = json.loads((out / "verdict.json").read_text())
    results = verdict["results"]
    named = any(r["status"] == "regression" and any(c["name"] == FRAME for c in r["changes"])
                for r in results)
    work = any(r["name"] == "cpu_per_work" and r["status"] != "skipped" for r in results)
    frame = next((q for q in verdict["quantities"] if q["name"] == FRAME), None)
    change = (f"{FRAME} {frame['delta_text']} [{frame['low_text']}, {frame['high_text']}]"
              if frame else f"{FRAME} not judged")
    lines = [x for x in (out / "summary.md").read_text().splitlines() if x.strip()]
    return {"exit": ab["exit"], "seconds": ab["seconds"], "remade": ab.get("remade"),
            "named": named, "work": work,
            "change": change, "sentence": lines[1] if len(lines) > 1 else "",
            "inconclusive": [r["name"] for r in results if r["status"] == "inconclusive"]}


def tally(outcomes: dict[str, list[dict[str, Any]]], rounds: int) -> dict[str, Any]:
    """The counts: slower A/Bs caught (exit 1) and caught naming ``FRAME``; unchanged A/Bs
    failed (exit 1); inconclusive ones of each; the median seconds of an A/B of ``rounds``
    runs a side."""
    slower, same = outcomes.get("slower", []), outcomes.get("unchanged", [])
    every = [*slower, *same]
    return {"rounds": rounds, "slower": len(slower), "caught": sum(o["exit"] == 1 for o in slower),
            "named": sum(o["exit"] == 1 and o["named"] for o in slower),
            "slower_inconclusive": sum(o["exit"] == 7 for o in slower),
            "unchanged": len(same), "failed": sum(o["exit"] == 1 for o in same),
            "unchanged_inconclusive": sum(o["exit"] == 7 for o in same),
            "median_s": statistics.median(o["seconds"] for o in every) if every else None}


def headline(t: dict[str, Any]) -> list[Row]:
    """The counts as the suite's rows (no peer tool)."""
    rows = []
    if t["slower"]:
        rows.append(row(f"25% slower handler, no work reported: caught, {FRAME} named "
                        f"({t['named']} of {t['slower']}, {t['slower_inconclusive']} "
                        "inconclusive)", 100 * t["named"] / t["slower"], unit="%",
                        better="higher"))
    if t["unchanged"]:
        rows.append(row(f"unchanged A/B: false alarms ({t['failed']} of {t['unchanged']}, "
                        f"{t['unchanged_inconclusive']} inconclusive)",
                        100 * t["failed"] / t["unchanged"], unit="%"))
    if t["median_s"] is not None:
        rows.append(row(f"one A/B ({t['rounds']} + {t['rounds']} runs), median wall",
                        t["median_s"]))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/wallflame-ab-power"))
    ap.add_argument("--slower", type=int, default=10, help="A/Bs of base against --slow-auth")
    ap.add_argument("--unchanged", type=int, default=20, help="A/Bs of base against base")
    ap.add_argument("--rounds", type=int, default=3, help="runs a side of each A/B")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of each run")
    ap.add_argument("--pause", type=float, default=PAUSE_S, metavar="S",
                    help="seconds the measurement lock is left free between A/Bs")
    ap.add_argument("--judge-only", action="store_true", help="count the A/Bs in --out")
    ap.add_argument("--json", type=Path, help="also write the headline rows here (run.py)")
    args = ap.parse_args()
    subprocess.run(["make", "-s", "-C", str(ROOT / "samples"), "bin/handlers"],
                   capture_output=True, check=False)
    if not HANDLERS.exists():
        sys.exit(f"ab_power: {HANDLERS} missing: make -C samples bin/handlers")
    os.environ.setdefault("WALLFLAME_NO_CACHE", "1")
    kinds = plan(args.slower, args.unchanged)
    outcomes: dict[str, list[dict[str, Any]]] = {}
    loads = []
    for i, kind in enumerate(kinds):
        out = args.out / f"{i:02d}-{kind}"
        if not (out / "ab.json").exists() and not args.judge_only:
            with open(LOCK, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                loads.append(os.getloadavg()[0])
                print(f"A/B {i + 1}/{len(kinds)} ({kind}), load average {loads[-1]:.1f}",
                      flush=True)
                subprocess.run(["rm", "-rf", str(out)], check=True)
                run_ab(out, kind == "slower", args.duration, args.rounds)
            time.sleep(args.pause)
        if not (out / "ab.json").exists():
            continue
        o = outcome(out)
        if o["work"]:
            sys.exit(f"ab_power: {out}: the check judged CPU per unit of work; the target "
                     "must report none")
        outcomes.setdefault(kind, []).append(o)
        remade = f", {o['remade']} runs made again" if o["remade"] else ""
        print(f"  {out.name}: exit {o['exit']} in {o['seconds']:.0f} s{remade}"
              f"{f' ({FRAME} named)' if o['named'] else ''}; {o['change']}"
              f"{'; inconclusive: ' + ', '.join(o['inconclusive']) if o['inconclusive'] else ''}"
              f"\n    {o['sentence'][:300]}", flush=True)
    t = tally(outcomes, args.rounds)
    print(f"\nslower (base against --slow-auth): {t['caught']} of {t['slower']} exit 1, "
          f"{t['named']} of them naming {FRAME}; {t['slower_inconclusive']} inconclusive")
    print(f"unchanged (base against base): {t['failed']} of {t['unchanged']} exit 1; "
          f"{t['unchanged_inconclusive']} inconclusive")
    if t["median_s"] is not None:
        print(f"median wall time of an A/B: {t['median_s']:.0f} s")
    if loads:
        print(f"load average (1 min) before each A/B: min {min(loads):.1f}, median "
              f"{statistics.median(loads):.1f}, max {max(loads):.1f}")
    if args.json:
        write_rows(args.json, headline(t))
    return 0


if __name__ == "__main__":
    sys.exit(main())
