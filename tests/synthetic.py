"""Synthetic inputs shaped like real ones, for the tests and the report benchmark
(``benchmarks/report.py``)."""

from __future__ import annotations

import random
from pathlib import Path


def synthetic_folded(path: Path, stacks: int, seed: int = 4) -> None:
    """``stacks`` unique folded stacks, written sorted, shaped like a real program's: walks
    down a fixed call graph (each function calls 1-6 others), 8 to 40 frames below 10 threads'
    entry frames, that rarely branch near the root (3% per level) and often near the leaf (50%
    in the last 6 levels).  That gives about 4 flame-tree nodes per unique stack; the perf
    example shipped with FlameGraph has about 2, so this input is on the heavy side."""
    rng = random.Random(seed)
    names = [f"ns{i % 37}::Class{i % 211}::method{i}" for i in range(4000)]
    callees = [[rng.randrange(len(names)) for _ in range(rng.randint(1, 6))] for _ in names]
    threads = [f"worker-{i}" for i in range(1, 9)] + ["main", "io-loop"]
    seen: dict[str, int] = {}
    while len(seen) < stacks:
        t = rng.randrange(len(threads))
        frames = [threads[t], "start_thread", f"entry_{t}"]
        f, depth = t, rng.randint(8, 40)
        for level in range(depth):
            options = callees[f]
            branch = 0.5 if level >= depth - 6 else 0.03
            k = 0
            while k < len(options) - 1 and rng.random() < branch:
                k += 1
            f = options[k]
            frames.append(names[f])
        seen[";".join(frames)] = rng.randint(1, 500)
    with open(path, "w") as out:
        for s, n in sorted(seen.items()):
            out.write(f"{s} {n}\n")
