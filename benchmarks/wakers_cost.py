#!/usr/bin/env python3
"""What recording the wakers (``collect --wakers``, the critical path) costs a program that
switches often: the same collect with and without them, in the same run.

Targets: the samples whose threads wake each other most (``queue --queue=mutex``: consumers
on one mutex; ``chain``: a lock whose holder waits for a second thread).  Each round runs the
target alone, under ``wallflame collect --no-wakers`` and under ``wallflame collect --wakers``
(the default for a launched command), in turn, ``--runs`` rounds, so that a shared machine's
drift hits the three alike.  The work counted is the target's own (its JSON line's ``work``
over its ``seconds``); the cost of each collect is its throughput loss against the round's
run alone, and the wakers' cost is the difference of the two losses, in points.

    .venv/bin/python benchmarks/wakers_cost.py [--runs 5] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rows import Row, row, write_rows  # noqa: E402

TARGETS = {"queue": ["queue", "--queue=mutex"], "chain": ["chain"]}
MODES = ("alone", "--no-wakers", "--wakers")


def rate(out: str) -> float:
    """Work per second from the sample's JSON line."""
    for line in reversed(out.splitlines()):
        if line.startswith("{") and '"sample"' in line:
            d = json.loads(line)
            return float(d["work"]) / float(d["seconds"])
    raise SystemExit(f"no result line in: {out[-300:]}")


def run_once(target: list[str], mode: str, seconds: float) -> float:
    argv = [str(ROOT / "samples" / "bin" / target[0]), *target[1:], "--duration", f"{seconds:g}"]
    if mode == "alone":
        return rate(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        subprocess.run([sys.executable, "-m", "wallflame", "collect", "-o", str(run),
                        "--duration", f"{seconds:g}", mode, "--", *argv],
                       capture_output=True, text=True, check=True, cwd=ROOT)
        return rate((run / "raw" / "target.stdout").read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--json", default="", help="also write the rows here (run.py)")
    args = ap.parse_args()
    subprocess.run(["make", "-s", "-C", str(ROOT / "samples"), "bin/queue", "bin/chain"],
                   check=True)
    rows: list[Row] = []
    print(f"{'target':8} {'alone/s':>10} {'loss no-wakers':>15} {'loss wakers':>12} "
          f"{'wakers cost':>12}  (medians of {args.runs} rounds)")
    for name, target in TARGETS.items():
        loss: dict[str, list[float]] = {m: [] for m in MODES[1:]}
        alone: list[float] = []
        for _ in range(args.runs):
            r = {m: run_once(target, m, args.seconds) for m in MODES}
            alone.append(r["alone"])
            for m in MODES[1:]:
                loss[m].append(100 * (1 - r[m] / r["alone"]))
        cost = [w - n for w, n in zip(loss["--wakers"], loss["--no-wakers"], strict=True)]
        med = {m: statistics.median(v) for m, v in loss.items()}
        print(f"{name:8} {statistics.median(alone):10,.0f} {med['--no-wakers']:14.1f}% "
              f"{med['--wakers']:11.1f}% {statistics.median(cost):+11.1f} pt  "
              f"(rounds: {', '.join(f'{c:+.1f}' for c in cost)})")
        rows.append(row(f"throughput loss of {name} under a collect with the wakers (%)",
                        med["--wakers"], med["--no-wakers"], "wallflame collect --no-wakers",
                        unit="%"))
    if args.json:
        write_rows(args.json, rows)


if __name__ == "__main__":
    main()
