#!/usr/bin/env python3
"""The size of a run's timeline (``RUN/timeline.json.gz``) on a busy run.

    .venv/bin/python benchmarks/lab/timeline_size.py [THREADS] [SECONDS]

Collects ``samples/bin/mix --threads THREADS`` (default 64) for SECONDS (default 60) with the
default options (on-CPU at 499 Hz, a stack at every switch) and prints the timeline's size
against the run's other files, its counts (samples, spans, distinct stacks and frames), the
bytes per event, and how long ``wallflame finish`` took to build it (the finish is run again
on the same raw/ to time the timeline alone against the rest).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIX = Path(__file__).resolve().parents[2] / "samples" / "bin" / "mix"


def main() -> None:
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
    run = Path(tempfile.mkdtemp(prefix="wallflame-tlsize-")) / "run"
    subprocess.run([sys.executable, "-m", "wallflame", "collect", "-o", str(run),
                    "--duration", f"{seconds:g}", "--", str(MIX), "--threads", str(threads),
                    "--duration", f"{seconds + 30:g}"],
                   check=True, capture_output=True)
    tl_path = run / "timeline.json.gz"
    d = json.loads(gzip.decompress(tl_path.read_bytes()))
    samples = sum(len(t["samples"]["t"]) for t in d["threads"])
    spans = sum(len(t["spans"]["t"]) for t in d["threads"])
    size = tl_path.stat().st_size
    print(f"run: {run}")
    print(f"threads in the timeline: {len(d['threads'])}, window "
          f"{(d['t1_ns'] - d['t0_ns']) / 1e9:.1f} s")
    print(f"on-CPU samples: {samples:,}, spans: {spans:,}, stacks: {len(d['nodes']) // 2:,}, "
          f"frames: {len(d['frames']):,}")
    print(f"timeline.json.gz: {size / 1e6:.2f} MB ({size / max(1, samples + spans):.1f} bytes "
          f"per event; {len(gzip.decompress(tl_path.read_bytes())) / 1e6:.1f} MB unpacked)")
    for name in ("oncpu.folded", "offcpu.folded", "summary.json", "slices.json"):
        p = run / name
        if p.exists():
            print(f"{name}: {p.stat().st_size / 1e6:.2f} MB")
    raw = sum(p.stat().st_size for p in (run / "raw").iterdir() if p.is_file())
    print(f"raw/: {raw / 1e6:.1f} MB")
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "wallflame", "finish", str(run)], check=True,
                   capture_output=True)
    print(f"wallflame finish again: {time.monotonic() - t0:.1f} s")
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import sys; from wallflame import timeline; "
                    "timeline.load(sys.argv[1])", str(run)], check=True)
    print(f"loading the timeline: {time.monotonic() - t0:.2f} s")


if __name__ == "__main__":
    main()
