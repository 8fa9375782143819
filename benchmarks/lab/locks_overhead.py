#!/usr/bin/env python3
"""What the lock evidence costs a lock-bound target: the queue sample's throughput.

``samples/bin/queue --queue=mutex`` (one producer, eight consumers on one mutex) runs
``--seconds`` under: no profiler; ``wallflame collect`` with the defaults (the owner sampler
stops each lock owner it finds to confirm its stack); the defaults plus ``--release-sites``
(the futex wakes with their call chains).  The configurations are interleaved ``--runs``
times; each loss is taken against the no-profiler run just before it.  Printed: the median
throughput (messages/s, from the sample's own JSON line) and loss of each configuration, the
owner probes' stop per owner (median and max, ``capture.json``) and the number of futex wakes
recorded per second.

    .venv/bin/python benchmarks/lab/locks_overhead.py [--runs 3] [--seconds 6]

Run it under ``flock /tmp/wallflame-measure.lock`` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
QUEUE = ROOT / "samples" / "bin" / "queue"


def rate_of(text: str) -> float:
    for line in reversed(text.splitlines()):
        if line.startswith("{") and '"rate"' in line:
            return float(json.loads(line)["rate"])
    raise RuntimeError("no result line from the queue sample")


def run(config: str, seconds: float, tmp: Path, i: int) -> dict[str, Any]:
    argv = [str(QUEUE), "--queue=mutex", "--duration", f"{seconds:g}"]
    if config == "none":
        r = subprocess.run(argv, capture_output=True, text=True, check=True)
        return {"rate": rate_of(r.stdout)}
    out = tmp / f"{config.replace(' ', '_')}-{i}"
    cmd = [sys.executable, "-m", "wallflame", "collect", "-o", str(out), "--duration",
           f"{seconds:g}"]
    if "release" in config:
        cmd.append("--release-sites")
    subprocess.run([*cmd, "--", *argv], cwd=ROOT, capture_output=True, text=True, check=True)
    stdout = (out / "raw" / "target.stdout").read_text(errors="replace")
    cap = json.loads((out / "raw" / "capture.json").read_text())
    owners = cap.get("owners") or {}
    res: dict[str, Any] = {"rate": rate_of(stdout), "pause": owners.get("pause") or {},
                           "probes": owners.get("probes") or {}}
    script = out / "raw" / "releases.script"
    if script.exists():
        wakes = script.read_text(errors="replace").count("sys_enter_futex:")
        res["wakes_per_s"] = wakes / seconds
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    subprocess.run(["make", "-s", "-C", str(ROOT / "samples"), "bin/queue"], check=True)
    configs = ("defaults", "defaults + --release-sites")
    rows: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
    losses: dict[str, list[float]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory(prefix="wf-lockcost-") as t:
        tmp = Path(t)
        for i in range(args.runs):
            for c in configs:
                base = run("none", args.seconds, tmp, i)["rate"]
                got = run(c, args.seconds, tmp, i)
                rows[c].append(got)
                losses[c].append(1 - got["rate"] / base)
                print(f"run {i} {c}: {got['rate']:,.0f} msg/s against {base:,.0f} "
                      f"({100 * losses[c][-1]:+.1f}% loss), probe stop {got['pause']}, "
                      f"probes {got['probes']}"
                      + (f", {got['wakes_per_s']:,.0f} wakes/s" if "wakes_per_s" in got
                         else ""), flush=True)
    for c in configs:
        med = [r["pause"].get("median_ms", 0.0) for r in rows[c]]
        print(f"{c}: median loss {100 * statistics.median(losses[c]):.1f}% "
              f"(runs {', '.join(f'{100 * x:.1f}%' for x in losses[c])}), probe stop median "
              f"{statistics.median(med) if med else 0:.3f} ms, max "
              f"{max((r['pause'].get('max_ms', 0.0) for r in rows[c]), default=0):.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
