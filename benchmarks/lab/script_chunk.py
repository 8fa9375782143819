#!/usr/bin/env python3
"""What one chunk's ``perf script`` costs, with the kernel's symbols read from the run's copy
(``raw/kallsyms``, what a collect does) and from ``/proc/kallsyms`` (what perf does by itself).

    .venv/bin/python benchmarks/lab/script_chunk.py RUN [--runs 5]

RUN is a run directory written by ``wallflame collect`` (its ``raw/`` keeps the chunks and the
copy).  For the first chunk of each recorder (on-CPU ``perf``, ``sched``, ``wake``) it runs the
command the collect ran, as recorded in ``meta.json`` ``commands``, ``--runs`` times with the
copy and as many without, in turn, and prints the median CPU time (user + system, from
``wait4``) of each and whether the two texts are the same byte for byte.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from wallflame.collect.packed import unpacked  # noqa: E402
from wallflame.collect.perf import data_chunks, script_command  # noqa: E402


def timed(cmd: list[str]) -> tuple[float, bytes]:
    before = os.times()
    out = subprocess.run(cmd, capture_output=True, check=False).stdout
    after = os.times()
    return (after.children_user - before.children_user
            + after.children_system - before.children_system), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    raw = a.run / "raw"
    try:
        pid = int(json.loads((a.run / "meta.json").read_text())["target"]["pid"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"{a.run}: not a run directory wallflame collect wrote ({e}): give one",
              file=sys.stderr)
        return 2
    if not (raw / "kallsyms").is_file():
        print(f"{raw}: no kallsyms copy (collected by an older wallflame, or the kernel hid "
              "its addresses)", file=sys.stderr)
        return 2
    print(f"{a.run}: median CPU seconds of one chunk's perf script, {a.runs} runs each")
    print(f"{'chunk':28s} {'MB':>6s} {'raw/kallsyms':>13s} {'/proc/kallsyms':>15s} same text")
    for stem in ("perf", "sched", "wake"):
        chunks = data_chunks(raw, stem)
        if not chunks:
            continue
        with unpacked(chunks[0]) as chunk:  # kept compressed once read (collect.packed)
            report(stem, chunk, pid, a.runs)
    return 0


def report(stem: str, chunk: Path, pid: int, runs: int) -> None:
    """One line: ``chunk``'s perf script CPU with and without the kernel's symbols copy."""
    cmd = script_command(chunk, stem == "sched", pid if stem == "perf" else None,
                         kallsyms=True)
    plain = [x for x in cmd if not x.startswith("--kallsyms=")]
    with_copy, without = [], []
    texts: set[bytes] = set()
    for _ in range(runs):
        for c, into in ((cmd, with_copy), (plain, without)):
            cpu, out = timed(c)
            into.append(cpu)
            texts.add(out)
    print(f"{chunk.name:28s} {chunk.stat().st_size / 1e6:6.1f} "
          f"{statistics.median(with_copy):13.3f} {statistics.median(without):15.3f} "
          f"{'yes' if len(texts) == 1 else 'NO'}")


if __name__ == "__main__":
    sys.exit(main())
