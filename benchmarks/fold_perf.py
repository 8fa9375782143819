#!/usr/bin/env python3
"""Benchmark: fold ~300 MB of ``perf script`` text with wallflame and with the reference tools.

Records a capture of a sample program on this machine (``perf record -F 4000 -g``), turns it
into text with ``perf script`` and repeats that text up to ``--size-mb``.  Then folds the file
with ``wallflame fold``, ``inferno-collapse-perf --nthreads 1``, inferno on all cores and
``stackcollapse-perf.pl`` (when on PATH), several runs each, and prints the median wall
time, MB/s, CPU time, peak RSS and the ratios to wallflame.  Finally it checks that folding
while ``perf script`` streams (``perf script | wallflame fold --format perf -``) is not slower
than ``perf script`` alone, for frame-pointer and DWARF call chains.

    python3 benchmarks/fold_perf.py                 # deep C++ stacks and mix, 300 MB each
    python3 benchmarks/fold_perf.py --program mix --size-mb 100 --runs 5

The machine may be shared: CPU time (user + sys of the process) is printed next to wall time
because it is much less sensitive to other load.  Needs perf (root or perf_event_paranoid
<= 1) and cargo (inferno is installed with ``cargo install inferno`` when missing).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "samples" / "bin"
PROGRAMS = {
    # name: (command, seconds recorded); the deep one has realistic stack depths (10-60
    # frames), mix has shallow ones (4-6 frames: the worst case per byte for a folder).
    "deep": ([str(BIN / "deep"), "--seconds", "6", "--threads", "2", "--depth", "40"], 6),
    "mix": ([str(BIN / "mix"), "--duration", "8"], 8),
}


@dataclass
class Run:
    wall: float
    cpu: float
    rss_mb: float


def run(cmd: list[str], stdin: int | None = None, stdout: int | None = None) -> Run:
    """Run ``cmd`` to completion; its own wall time, CPU time and peak RSS (``wait4``)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=stdin, stdout=stdout or subprocess.DEVNULL)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"benchmark: {cmd[0]} exited {proc.returncode}")
    return Run(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024)


def find_inferno() -> str:
    found = shutil.which("inferno-collapse-perf")
    cargo_bin = Path.home() / ".cargo" / "bin" / "inferno-collapse-perf"
    if found is None and cargo_bin.exists():
        found = str(cargo_bin)
    if found is None:
        print("installing inferno with cargo (a few minutes)...", file=sys.stderr)
        subprocess.run(["cargo", "install", "--locked", "inferno"], check=True)
        found = str(cargo_bin)
    return found


def record(name: str, work: Path, call_graph: str = "fp") -> Path:
    """perf.data of one sample program (reused when present)."""
    data = work / f"{name}-{call_graph}.data"
    if data.exists():
        return data
    cmd, _ = PROGRAMS[name]
    graph = ["-g"] if call_graph == "fp" else ["--call-graph", "dwarf"]
    freq = "4000" if call_graph == "fp" else "1000"
    subprocess.run(["perf", "record", "-q", "-F", freq, *graph, "-e", "cpu-clock", "-o",
                    str(data), "--", *cmd], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return data


def big_text(name: str, work: Path, size_mb: int) -> Path:
    """``perf script`` text of the capture, repeated up to ``size_mb`` (reused when present)."""
    out = work / f"{name}-{size_mb}mb.txt"
    if out.exists():
        return out
    one = work / f"{name}-once.txt"
    with one.open("wb") as f:
        subprocess.run(["perf", "script", "-i", str(record(name, work))], stdout=f,
                       stderr=subprocess.DEVNULL, check=True)
    chunk = one.read_bytes()
    if not chunk.endswith(b"\n\n"):
        chunk = chunk.rstrip(b"\n") + b"\n\n"
    with out.open("wb") as f:
        written = 0
        while written < size_mb * 1_000_000:
            f.write(chunk)
            written += len(chunk)
    return out


def table(path: Path, runs: int, inferno: str) -> None:
    size = path.stat().st_size / 1e6
    library = ("import sys; from wallflame.fold import perf; from wallflame.fold.options import "
               "FoldOptions; from wallflame.profile import Profile; "
               "perf.fold(sys.argv[1], FoldOptions(), Profile())")
    tools = {
        "wallflame fold": [sys.executable, "-m", "wallflame", "fold", str(path)],
        "wallflame library call": [sys.executable, "-c", library, str(path)],
        "inferno --nthreads 1": [inferno, "--nthreads", "1", str(path)],
        f"inferno ({os.cpu_count()} threads)": [inferno, str(path)],
    }
    perl = shutil.which("stackcollapse-perf.pl")
    if perl:
        tools["stackcollapse-perf.pl"] = [perl, str(path)]
    results: dict[str, list[Run]] = {t: [] for t in tools}
    for _ in range(runs):  # interleaved, so that load from others hits every tool alike
        for t, cmd in tools.items():
            results[t].append(run(cmd))
    ours = statistics.median(r.wall for r in results["wallflame fold"])
    ours_cpu = statistics.median(r.cpu for r in results["wallflame fold"])
    print(f"\n{path.name}: {size:.0f} MB, {runs} runs each, medians")
    print(f"{'tool':24} {'wall s':>8} {'MB/s':>7} {'cpu s':>7} {'cpu MB/s':>9} {'peak MB':>8}"
          f" {'wall ratio':>10} {'cpu ratio':>9}")
    for t, rs in results.items():
        wall = statistics.median(r.wall for r in rs)
        cpu = statistics.median(r.cpu for r in rs)
        rss = max(r.rss_mb for r in rs)
        print(f"{t:24} {wall:8.2f} {size / wall:7.0f} {cpu:7.2f} {size / cpu:9.0f} {rss:8.0f}"
              f" {wall / ours:10.2f} {cpu / ours_cpu:9.2f}")
    print("(ratio = tool time / `wallflame fold` time: above 1 means wallflame is faster; the "
          "library call is fold_stream without the CLI's start-up and output)")


def streaming(name: str, work: Path, call_graph: str, runs: int, stream_mb: int) -> None:
    """``perf script`` alone against ``perf script | wallflame fold -``.

    ``perf script`` runs back to back on the same capture until about ``stream_mb`` of text
    has gone through the pipe, so that start-up costs do not decide the comparison."""
    data = record(name, work, call_graph)
    one = subprocess.run(["perf", "script", "-i", str(data)], capture_output=True, check=True)
    reps = max(1, round(stream_mb * 1_000_000 / max(len(one.stdout), 1)))
    size = reps * len(one.stdout) / 1e6
    producer = ["bash", "-c", f'for i in $(seq {reps}); do perf script -i "$0" 2>/dev/null; done',
                str(data)]
    alone: list[float] = []
    piped: list[float] = []
    for _ in range(runs):
        alone.append(run(producer).wall)
        t0 = time.perf_counter()
        prod = subprocess.Popen(producer, stdout=subprocess.PIPE)
        assert prod.stdout is not None
        run([sys.executable, "-m", "wallflame", "fold", "--format", "perf", "-", "-o",
             os.devnull], stdin=prod.stdout.fileno())
        prod.stdout.close()
        prod.wait()
        piped.append(time.perf_counter() - t0)
    a, p = statistics.median(alone), statistics.median(piped)
    print(f"{name} {call_graph} ({size:.0f} MB of text, perf script x{reps}): alone {a:.2f} s "
          f"({size / a:.0f} MB/s), | wallflame fold - {p:.2f} s (ratio {p / a:.2f}; ~1.0 means "
          "folding keeps up with perf script)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--program", choices=[*PROGRAMS, "all"], default="all")
    ap.add_argument("--size-mb", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/wallflame-bench"),
                    help="where captures and texts are kept (reused by later runs)")
    ap.add_argument("--stream-mb", type=int, default=150,
                    help="text streamed through the pipe in the streaming check")
    ap.add_argument("--no-stream", action="store_true", help="skip the streaming check")
    ap.add_argument("--stream-only", action="store_true", help="only the streaming check")
    args = ap.parse_args()
    os.chdir(ROOT)
    subprocess.run(["make", "-s", "-C", "samples", "bin/mix"], check=True)
    subprocess.run(["make", "-s", "-C", "samples/fixtures"], check=True)
    args.work.mkdir(parents=True, exist_ok=True)
    inferno = find_inferno()
    names = list(PROGRAMS) if args.program == "all" else [args.program]
    for name in [] if args.stream_only else names:
        table(big_text(name, args.work, args.size_mb), args.runs, inferno)
    if not args.no_stream:
        print()
        for name in names:
            for graph in ("fp", "dwarf"):
                streaming(name, args.work, graph, args.runs, args.stream_mb)


if __name__ == "__main__":
    main()
