#!/usr/bin/env python3
"""What the owner sampler costs a program that convoys on one lock, by the program's own count.

``samples/bin/queue --queue=mutex --threads 32``: 32 consumers on one mutex-guarded queue, on
this machine's CPUs, printing its running total of messages every 0.1 s (``CLOCK_MONOTONIC``,
the clock of a collect's window bounds).  Windows of ``--window`` seconds alternate, in the
same order every round, between no collect and one ``wallflame collect --pid`` per variant:

* ``noowners``: ``--off-cpu pmp --pmp-rate 1 --owner-rate 0`` (the light collect);
* ``nostop``: the same with the owner sampler at 5 rounds a second, ``--no-holder-stacks``
  (owners named from ``/proc``, no thread stopped);
* ``stop``: the owner sampler at 5/s stopping each owner it finds (holder stacks).
* ``base`` (with ``--base CHECKOUT``): ``nostop``'s options run from another checkout, to
  compare a variant of the sampler's code in the same run.

Each window's rate is the program's messages over the collect's own window (``meta.json``).
Prints each round, then per variant the median and the loss against the median with none, and
the holder stops the ``stop`` collects made (from their owner logs).

    .venv/bin/python benchmarks/lab/owner_cost.py [--window 10] [--rounds 8] [--threads 32]

Needs root (ptrace) and ``make -C samples``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.servers import progress_rate, wallflame_env  # noqa: E402

LIGHT = ["--off-cpu", "pmp", "--pmp-rate", "1"]
VARIANTS = {"noowners": [*LIGHT, "--owner-rate", "0"],
            "nostop": [*LIGHT, "--owner-rate", "5", "--no-holder-stacks"],
            "stop": [*LIGHT, "--owner-rate", "5"]}


def rate(progress: Path, a_ns: int, b_ns: int) -> float:
    """Messages a second between the first and the last progress line inside [a, b]."""
    r = progress_rate(progress.read_text(errors="replace").splitlines(), a_ns, b_ns)
    if r is None:
        raise RuntimeError(f"no progress lines inside the window in {progress}")
    return r


def stops(run: Path) -> int:
    """Threads the run's holder probes stopped (a probe is shared by the waiters of one lock
    in one round)."""
    seen: set[tuple[str, int, int]] = set()
    for log in (run / "raw").glob("owners*"):
        for line in log.read_text(errors="replace").splitlines():
            rec = json.loads(line)
            h = rec.get("holder")
            if isinstance(h, dict):
                seen.update((log.name, rec["t_ns"], int(t)) for t, *_ in h.get("stops") or [])
    return len(seen)


def collect(root: Path, pid: int, window: float, out: Path, args: list[str]) -> tuple[int, int]:
    """One collect of ``window`` s from the checkout ``root``: its window's bounds."""
    env = dict(wallflame_env(), PYTHONPATH=str(root))
    r = subprocess.run([sys.executable, "-m", "wallflame", "collect", "--pid", str(pid),
                        "--duration", f"{window:g}", "-o", str(out), *args], cwd=root, env=env,
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"collect failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    w = json.loads((out / "meta.json").read_text())["window"]
    return int(w["mono_start_ns"]), int(w["mono_end_ns"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--base", type=Path, default=None)
    a = ap.parse_args()
    queue = ROOT / "samples" / "bin" / "queue"
    if not queue.exists():
        print("owner_cost.py: samples/bin/queue is missing: run make -C samples",
              file=sys.stderr)
        return 6
    variants = {k: (ROOT, v) for k, v in VARIANTS.items()}
    if a.base is not None:
        variants["base"] = (a.base.resolve(), VARIANTS["nostop"])
    work = Path(tempfile.mkdtemp(prefix="wallflame-owner-cost-"))
    progress = work / "queue.out"
    res: dict[str, list[float]] = {"none": [], **{k: [] for k in variants}}
    n_stops: list[int] = []
    with open(progress, "w") as out:
        tgt = subprocess.Popen([str(queue), "--queue=mutex", "--threads", str(a.threads),
                                "--duration", "86400", "--progress-ms", "100"], stdout=out)
    try:
        time.sleep(3)
        for r in range(a.rounds):
            for k in res:
                if k == "none":
                    lo = time.monotonic_ns()
                    time.sleep(a.window)
                    hi = time.monotonic_ns()
                else:
                    root, args = variants[k]
                    run = work / f"{k}-{r}"
                    lo, hi = collect(root, tgt.pid, a.window, run, args)
                    if k == "stop":
                        n_stops.append(stops(run))
                    shutil.rmtree(run, ignore_errors=True)
                res[k].append(rate(progress, lo, hi))
                time.sleep(1)
            print(f"round {r}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in res.items()),
                  flush=True)
    finally:
        tgt.terminate()
        tgt.wait()
        shutil.rmtree(work, ignore_errors=True)
    none = statistics.median(res["none"])
    print(f"samples/bin/queue --queue=mutex --threads {a.threads}, {a.rounds} rounds of "
          f"{a.window:g} s, messages a second")
    for k, v in res.items():
        med = statistics.median(v)
        loss = "" if k == "none" else f"  loss {100 * (1 - med / none):+.1f}%"
        print(f"{k:9} median {med:10,.0f}{loss}   rounds: " + ", ".join(f"{x:,.0f}" for x in v))
    if n_stops:
        print(f"holder stops a stop collect made: {', '.join(map(str, n_stops))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
