#!/usr/bin/env python3
"""The wait-class split of the mix sample against the program's own measurement.

    .venv/bin/python benchmarks/lab/sched_split.py [RUNS] [--attach] [--mix ARGS] \
        [-- COLLECT OPTIONS...]

mix times each phase of its workers (on-CPU, mutex, sleep, condition variable) and prints the
totals per thread.  Each run collects it for 8 s with the given options (for example
``-- --max-data-mb-per-s 4`` against the default, a stack at every switch) and prints, per
worker and class, the program's share and wallflame's, then the worst difference in points.
Mutex waits under ``wait_for_tick`` are counted by mix in its condvar phase, and are moved there.

``--attach`` starts mix (for 14 s) and attaches to it for 10 s instead (``collect --pid``: the
scheduler on every CPU, its stacks one switch in N per CPU under a budget); ``--mix`` passes
options to mix.  The sampling aliased, as ``tests/live/test_accuracy_live.py`` has it:

    .venv/bin/python benchmarks/lab/sched_split.py 10 --attach --mix "--sleep-ms 300" -- \
        --max-data-mb-per-s 0.3
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from wallflame.fold import FoldOptions, fold_file
from wallflame.report.phases import thread_phases

MIX = Path(__file__).resolve().parents[2] / "samples" / "bin" / "mix"
CLASSES = (("on_ns", "on"), ("mutex_ns", "mutex"), ("sleep_ns", "sleep"),
           ("condvar_ns", "condvar"))


def _load(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def one(extra: list[str], attach: bool, mix_args: list[str]) -> float:
    run = Path(tempfile.mkdtemp(prefix="wallflame-split-")) / "run"
    collect = [sys.executable, "-m", "wallflame", "collect", "-o", str(run), *extra]
    if attach:
        mix = subprocess.Popen([str(MIX), *mix_args, "--duration", "14"],
                               stdout=subprocess.PIPE, text=True)
        time.sleep(1)
        subprocess.run([*collect, "--pid", str(mix.pid), "--duration", "10"],
                       capture_output=True, text=True, check=True)
        out, _ = mix.communicate()
    else:
        out = subprocess.run([*collect, "--", str(MIX), *mix_args, "--duration", "8"],
                             capture_output=True, text=True, check=True).stdout
    truth = [json.loads(ln) for ln in out.splitlines() if ln.startswith("{")]
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
    ap = argparse.ArgumentParser(usage=__doc__.split("\n\n")[1] if __doc__ else None)
    ap.add_argument("runs", nargs="?", type=int, default=3)
    ap.add_argument("--attach", action="store_true")
    ap.add_argument("--mix", default="")
    a = ap.parse_args(args[:args.index("--")] if "--" in args else args)
    worst = [one(extra, a.attach, shlex.split(a.mix)) for _ in range(a.runs)]
    print(f"options {extra or '(defaults)'}{' attached' if a.attach else ''}"
          f"{' mix ' + a.mix if a.mix else ''}: worst class difference per run (points): "
          + ", ".join(f"{w:.1f}" for w in worst))
    if len(worst) > 1:
        print(f"median {statistics.median(worst):.1f}, largest {max(worst):.1f}")


if __name__ == "__main__":
    main()
