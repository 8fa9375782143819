#!/usr/bin/env python3
"""A run's blocked time per class, from its own profile (``offcpu.folded``) and from a range
over its whole window (``report --from --to``, built from the timeline), side by side.

    .venv/bin/python benchmarks/lab/range_split.py RUN [RUN...]

With a stack at every switch the two are the same by construction; with sampled stacks the
range redoes the whole window's split from the timeline's spans, and this prints how far the
two are apart (points of the threads' off-CPU time, per class, and the largest).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from wallflame.profile import OFF, Profile  # noqa: E402
from wallflame.report.timerange import restrict, window_range  # noqa: E402
from wallflame.rundir import load_run_dir  # noqa: E402
from wallflame.timeline import load as load_timeline  # noqa: E402


def per_class(p: Profile) -> dict[str, float]:
    out: dict[str, int] = {}
    for k, w in p.stacks.items():
        if k.state == OFF:
            out[k.wait] = out.get(k.wait, 0) + w
    total = sum(out.values()) or 1
    return {c: 100 * w / total for c, w in sorted(out.items())}


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    for run in sys.argv[1:]:
        full = load_run_dir(run)
        tl = load_timeline(run)
        ranged = restrict(load_run_dir(run), tl, window_range(tl, None, None))
        a, b = per_class(full), per_class(ranged)
        print(run)
        print("  class      whole window   range over it")
        for c in sorted({*a, *b}):
            print(f"  {c:<10} {a.get(c, 0):12.2f} {b.get(c, 0):15.2f}")
        print(f"  largest difference: {max(abs(a.get(c, 0) - b.get(c, 0)) for c in {*a, *b}):.2f}"
              " points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
