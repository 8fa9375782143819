#!/usr/bin/env python3
"""The wait-class split of the mix sample against the program's own measurement.

    python3 benchmarks/sched_split.py [RUNS] [-- COLLECT OPTIONS...]

mix times each phase of its workers (on-CPU, mutex, sleep, condition variable) and prints the
totals per thread.  Each run collects it for 8 s with the given options (for example
``-- --max-data-mb-per-s 4`` against the default, a stack at every switch) and prints, per
worker and class, the program's share and wallflame's, then the worst difference in points.
Mutex waits under ``wait_for_tick`` are counted by mix in its condvar phase, and are moved there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from wallflame.fold import FoldOptions, fold_file
from wallflame.report.phases import thread_phases

MIX = Path(__file__).resolve().parent.parent / "samples" / "bin" / "mix"
CLASSES = (("on_ns", "on"), ("mutex_ns", "mutex"), ("sleep_ns", "sleep"),
           ("condvar_ns", "condvar"))


def _load(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def one(extra: list[str]) -> float:
    run = Path(tempfile.mkdtemp(prefix="wallflame-split-")) / "run"
    r = subprocess.run([sys.executable, "-m", "wallflame", "collect", "-o", str(run), *extra,
                        "--", str(MIX), "--duration", "8"],
                       capture_output=True, text=True, check=True)
    truth = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    summary = _load(run / "summary.json")
    offcpu = fold_file(str(run / "offcpu.folded"), FoldOptions(), "wallflame")
    # Time woken but not yet running counts in the phase mix clocks it in: the class of the
    # stack it waited at (runnable_after), preemption ("other") in the on-CPU phase.
    phases = thread_phases(summary, offcpu, "wait_for_tick")
    worst = 0.0
    for mine in truth:
        phase = phases[mine["tid"]]
        cells = []
        for field, cls in CLASSES:
            expected = 100 * mine[field] / mine["wall_ns"]
            got = phase.share(cls)
            worst = max(worst, abs(got - expected))
            cells.append(f"{cls} {expected:.1f}/{got:.1f}")
        print(f"  {mine['name']}: " + "  ".join(cells))
    return worst


def main() -> None:
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    runs = int(args[0]) if args and args[0] != "--" else 3
    worst = [one(extra) for _ in range(runs)]
    print(f"options {extra or '(defaults)'}: worst class difference per run (points): "
          + ", ".join(f"{w:.1f}" for w in worst))


if __name__ == "__main__":
    main()
