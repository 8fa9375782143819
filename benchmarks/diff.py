"""Benchmark: diffing two profiles of ~20,000 unique stacks each, HTML included.

Generates two plain folded files (seeded, so every run measures the same input): stacks are
random walks down a call graph of 2,000 functions, 4 to 40 frames deep, over 8 threads; AFTER
rescales a tenth of BEFORE's stacks, drops 5% and adds 5% new ones.  Then times, in the same
run, the median of ``--repeat`` runs of:

* ``wallflame diff A B -o diff.html`` as a command (interpreter start-up included), and the
  same work in-process (fold both files, compare, write the page);
* ``inferno-diff-folded A B | inferno-flamegraph > diff.svg`` (``~/.cargo/bin``), if present;
* ``difffolded.pl A B | flamegraph.pl > diff.svg`` (FlameGraph), if present.

Usage: .venv/bin/python benchmarks/diff.py [--stacks 20000] [--repeat 5] [--keep DIR]
                                  [--flamegraph-dir DIR]   (where difffolded.pl lives)
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rows import row, write_rows  # noqa: E402

BUDGET_S = 1.0


def make_inputs(folder: Path, n_stacks: int, seed: int = 5) -> tuple[Path, Path]:
    rng = random.Random(seed)
    funcs = [f"ns{i % 37}::Module{i % 101}::function_{i}" for i in range(2000)]
    callees = {f: rng.sample(funcs, 6) for f in funcs}
    roots = rng.sample(funcs, 20)
    stacks: dict[str, int] = {}
    while len(stacks) < n_stacks:
        thread = f"worker-{rng.randrange(8)}"
        frames = [thread, "start_thread", rng.choice(roots)]
        for _ in range(rng.randint(2, 38)):
            frames.append(rng.choice(callees[frames[-1]]))
        stacks[";".join(frames)] = rng.randint(1, 5000)
    after: dict[str, int] = {}
    for s, w in stacks.items():
        r = rng.random()
        if r < 0.05:
            continue  # removed
        after[s] = max(1, int(w * rng.uniform(0.2, 3.0))) if r < 0.15 else w
    keys = list(stacks)
    while len(after) < n_stacks:
        s = rng.choice(keys) + ";" + rng.choice(funcs) + "_new"
        after[s] = rng.randint(1, 5000)
    a, b = folder / "before.folded", folder / "after.folded"
    for path, data in ((a, stacks), (b, after)):
        path.write_text("".join(f"{s} {w}\n" for s, w in sorted(data.items())),
                        encoding="utf-8")
    return a, b


def cpu_now() -> float:
    """CPU seconds used by this process and its finished children (user + system)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn: Callable[[], None], repeat: int) -> tuple[float, float]:
    """Median wall and CPU seconds (CPU is the fairer number on a shared, loaded machine)."""
    walls, cpus = [], []
    for _ in range(repeat):
        c0, t0 = cpu_now(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(cpu_now() - c0)
    return statistics.median(walls), statistics.median(cpus)


def shell(cmd: str) -> Callable[[], None]:
    def run() -> None:
        subprocess.run(["bash", "-o", "pipefail", "-c", cmd], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return run


def in_process(a: Path, b: Path, out: Path) -> Callable[[], None]:
    from wallflame.fold import load_inputs
    from wallflame.report.diff.compare import compare
    from wallflame.report.diff.page import write_html

    def run() -> None:
        gc.disable()  # as the command does
        try:
            write_html(compare(load_inputs([str(a)]), load_inputs([str(b)])), str(out))
        finally:
            gc.enable()
            gc.collect()
    return run


def tool(name: str, folder: Path | None = None) -> str | None:
    extra = os.pathsep.join([*([str(folder)] if folder else []),
                             str(Path.home() / ".cargo" / "bin"), "/usr/share/flamegraph",
                             "/opt/FlameGraph", os.environ.get("PATH", "")])
    return shutil.which(name, path=extra)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stacks", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", type=Path, default=None, help="keep inputs and outputs here")
    ap.add_argument("--flamegraph-dir", type=Path, default=None,
                    help="folder holding FlameGraph's difffolded.pl and flamegraph.pl")
    ap.add_argument("--json", type=Path, help="also write the headline rows here (run.py)")
    args = ap.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="wallflame-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    a, b = make_inputs(folder, args.stacks)
    print(f"inputs: {args.stacks} unique stacks each ({a.stat().st_size // 1024} KiB, "
          f"{b.stat().st_size // 1024} KiB), median of {args.repeat} runs")
    results: dict[str, tuple[float, float]] = {}
    cli = f"{sys.executable} -m wallflame diff {a} {b} -o {folder / 'diff.html'}"
    results["wallflame diff (command)"] = timed(shell(cli), args.repeat)
    results["wallflame diff (in-process)"] = timed(in_process(a, b, folder / "diff2.html"),
                                                   args.repeat)
    diff_folded, flamegraph = tool("inferno-diff-folded"), tool("inferno-flamegraph")
    if diff_folded and flamegraph:
        results["inferno-diff-folded + inferno-flamegraph"] = timed(shell(
            f"{diff_folded} {a} {b} | {flamegraph} > {folder / 'inferno.svg'}"), args.repeat)
    else:
        print("inferno-diff-folded / inferno-flamegraph: not found (cargo install inferno)")
    pl_diff = tool("difffolded.pl", args.flamegraph_dir)
    pl_flame = tool("flamegraph.pl", args.flamegraph_dir)
    if pl_diff and pl_flame:
        results["difffolded.pl + flamegraph.pl"] = timed(shell(
            f"{pl_diff} {a} {b} | {pl_flame} > {folder / 'fg.svg'}"), args.repeat)
    else:
        print("difffolded.pl / flamegraph.pl: not found (FlameGraph not installed)")
    ours = results["wallflame diff (command)"]
    print(f"{'':<45} {'wall':>8}   {'cpu':>8}   ratio (wall, cpu) to wallflame diff")
    for name, (wall, cpu) in results.items():
        print(f"{name:<45} {wall:8.3f} s {cpu:8.3f} s   x{wall / ours[0]:5.2f}  "
              f"x{cpu / ours[1]:5.2f}")
    html = (folder / "diff.html").stat().st_size
    met = min(ours) < BUDGET_S
    print(f"diff.html: {html / 1e6:.1f} MB; load average {os.getloadavg()[0]:.1f}; "
          f"budget {BUDGET_S:.1f} s (wall or cpu): {'met' if met else 'MISSED'}")
    peer = results.get("inferno-diff-folded + inferno-flamegraph")
    if args.json:
        tool_name = "inferno-diff-folded | inferno-flamegraph"
        write_rows(args.json, [
            row("diff page, wall", ours[0], peer[0] if peer else None, tool_name),
            row("diff page, CPU", ours[1], peer[1] if peer else None, tool_name)])
    if args.keep is None:
        shutil.rmtree(folder, ignore_errors=True)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
