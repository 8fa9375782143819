#!/usr/bin/env python3
"""Benchmark: fold ``perf script`` text with wallflame and with the reference tools.

Three captures like a user's, recorded on this machine and turned into text with
``perf script``:

* ``varied``: a generated C++ service (``benchmarks/varied_program.py``: about 200 functions, class
  template specialisations with long demangled names, template recursion, libstdc++ leaves,
  threads blocking on a mutex, a condition variable and a sleep), ``perf record -F 4000 -g``;
* ``dwarf``: the same program recorded with ``--call-graph dwarf`` (``-F 1000``), whose text
  has inlined frames and glibc callers;
* ``mix``: ``samples/bin/mix``, shallow stacks that repeat (the worst case per byte).

Each text is repeated up to ``--size-mb`` when the capture is smaller.  Every tool folds the
same file: ``wallflame fold --jobs 1`` and ``inferno-collapse-perf --nthreads 1`` (one thread
each), ``wallflame fold`` (one process per CPU) and inferno on all cores
and ``stackcollapse-perf.pl`` (when on PATH), in turn, several runs each; it prints the
median wall time, MB/s, CPU time and peak RSS, and for each capture the medians of the
run-by-run ratios to inferno.  Finally (unless ``--no-stream``) it checks that folding while
``perf script`` streams (``perf script | wallflame fold --format perf -``) is not slower than
``perf script`` alone, for frame-pointer and DWARF call chains.

    .venv/bin/python benchmarks/fold_perf.py                 # varied, dwarf and mix, 150 MB each
    .venv/bin/python benchmarks/fold_perf.py --program varied --size-mb 100 --runs 5

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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rows import Row, row, write_rows  # noqa: E402

BIN = ROOT / "samples" / "bin"
#: Filled in by ``main`` (the varied program is built in the work directory).
VARIED = Path("varied")
PROGRAMS: dict[str, tuple[Callable[[], list[str]], str]] = {
    # name: (command, call graph); varied has realistic C++ names and depths (15-70 frames),
    # deep is C++ recursion (10-60 frames), mix has shallow ones (4-6 frames: the worst case
    # per byte for a folder, because per-record costs dominate).
    "varied": (lambda: [str(VARIED), "--seconds", "8", "--threads", "3"], "fp"),
    "dwarf": (lambda: [str(VARIED), "--seconds", "8", "--threads", "3"], "dwarf"),
    "mix": (lambda: [str(BIN / "mix"), "--duration", "8"], "fp"),
    "deep": (lambda: [str(BIN / "deep"), "--seconds", "6", "--threads", "2", "--depth", "40"],
             "fp"),
}
DEFAULT = ["varied", "dwarf", "mix"]


@dataclass
class Run:
    wall: float
    cpu: float
    rss_mb: float


def run(cmd: list[str], stdin: int | None = None, stdout: int | None = None) -> Run:
    """Run ``cmd`` to completion; its own wall time, CPU time and peak RSS (``wait4``)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=stdin, stdout=stdout or subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
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


def build_varied(work: Path) -> Path:
    """The varied-stack program, generated and compiled in ``work`` (reused when present)."""
    exe = work / "varied"
    if exe.exists():
        return exe
    src = work / "varied.cc"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "varied_program.py")],
                   stdout=src.open("w"), check=True)
    subprocess.run(["g++", "-O1", "-g", "-fno-omit-frame-pointer", "-fno-inline", "-pthread",
                    "-std=c++17", "-o", str(exe), str(src)], check=True)
    return exe


def record(name: str, work: Path, call_graph: str = "fp") -> Path:
    """perf.data of one sample program (reused when present)."""
    program = "varied" if name == "dwarf" else name
    data = work / f"{program}-{call_graph}.data"
    if data.exists():
        return data
    cmd = PROGRAMS[program][0]()
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
        subprocess.run(["perf", "script", "-i", str(record(name, work, PROGRAMS[name][1]))],
                       stdout=f, stderr=subprocess.DEVNULL, check=True)
    chunk = one.read_bytes()
    if not chunk.endswith(b"\n\n"):
        chunk = chunk.rstrip(b"\n") + b"\n\n"
    with out.open("wb") as f:
        written = 0
        while written < size_mb * 1_000_000:
            f.write(chunk)
            written += len(chunk)
    return out


def describe(path: Path) -> str:
    """Records, distinct stacks and distinct functions of one copy of a capture's text."""
    one = path.with_name(path.name.split("-")[0] + "-once.txt")
    if path.name.startswith("dwarf"):
        one = path.with_name("dwarf-once.txt")
    text = one.read_bytes() if one.exists() else path.read_bytes()[:50_000_000]
    recs = [r for r in text.split(b"\n\n") if r.strip()]
    stacks = set()
    funcs = set()
    for r in recs:
        frames = []
        for line in r.split(b"\n")[1:]:
            sym = line.strip().partition(b" ")[2].rsplit(b"+0x", 1)[0]
            frames.append(sym)
            funcs.add(sym)
        stacks.add(tuple(frames))
    return (f"one capture: {len(text) / 1e6:.0f} MB, {len(recs)} records, {len(stacks)} "
            f"distinct stacks, {len(funcs)} distinct functions")


def table(path: Path, runs: int, inferno: str) -> dict[str, float]:
    size = path.stat().st_size / 1e6
    cores = os.cpu_count()
    tools = {
        "wallflame fold --jobs 1": [sys.executable, "-m", "wallflame", "fold", "--jobs", "1",
                                    str(path)],
        "inferno --nthreads 1": [inferno, "--nthreads", "1", str(path)],
        f"wallflame fold ({cores} jobs)": [sys.executable, "-m", "wallflame", "fold",
                                           str(path)],
        f"inferno ({cores} threads)": [inferno, str(path)],
    }
    perl = shutil.which("stackcollapse-perf.pl")
    if perl:
        tools["stackcollapse-perf.pl"] = [perl, str(path)]
    results: dict[str, list[Run]] = {t: [] for t in tools}
    for _ in range(runs):  # interleaved, so that load from others hits every tool alike
        for t, cmd in tools.items():
            results[t].append(run(cmd))
    ours = statistics.median(r.wall for r in results["wallflame fold --jobs 1"])
    ours_cpu = statistics.median(r.cpu for r in results["wallflame fold --jobs 1"])
    about = subprocess.run([sys.executable, __file__, "--describe", str(path)],
                           capture_output=True, text=True, check=True).stdout.strip()
    print(f"\n{path.name}: {size:.0f} MB, {runs} runs each, medians; {about}")
    print(f"{'tool':24} {'wall s':>8} {'MB/s':>7} {'cpu s':>7} {'cpu MB/s':>9} {'peak MB':>8}"
          f" {'wall ratio':>10} {'cpu ratio':>9}")
    for t, rs in results.items():
        wall = statistics.median(r.wall for r in rs)
        cpu = statistics.median(r.cpu for r in rs)
        rss = max(r.rss_mb for r in rs)
        print(f"{t:24} {wall:8.2f} {size / wall:7.0f} {cpu:7.2f} {size / cpu:9.0f} {rss:8.0f}"
              f" {wall / ours:10.2f} {cpu / ours_cpu:9.2f}")
    ours_runs = results["wallflame fold --jobs 1"]
    ours_every = results[f"wallflame fold ({cores} jobs)"]
    one = results["inferno --nthreads 1"]
    every = results[f"inferno ({cores} threads)"]
    def paired(mine: list[Run], theirs: list[Run], cpu: bool) -> float:
        return statistics.median((t.cpu / m.cpu) if cpu else (t.wall / m.wall)
                                 for m, t in zip(mine, theirs, strict=True))

    ratios = {"single_cpu": paired(ours_runs, one, True),
              "single_wall": paired(ours_runs, one, False),
              "all_wall": paired(ours_every, every, False),
              # the medians behind them, for the suite's rows (``--json``)
              "ours_cpu": ours_cpu, "inferno_cpu": statistics.median(r.cpu for r in one),
              "ours_all_wall": statistics.median(r.wall for r in ours_every),
              "inferno_all_wall": statistics.median(r.wall for r in every),
              "all_wall_inv": statistics.median(m.wall / t.wall
                                                for m, t in zip(ours_every, every, strict=True)),
              "single_cpu_inv": statistics.median(m.cpu / t.cpu
                                                  for m, t in zip(ours_runs, one, strict=True))}
    print("(ratio = tool time / `wallflame fold --jobs 1` time: above 1 means wallflame is "
          "faster)")
    print(f"RATIO {path.name}: inferno --nthreads 1 / wallflame --jobs 1, CPU time "
          f"{ratios['single_cpu']:.2f}, wall {ratios['single_wall']:.2f}; inferno on "
          f"{cores} cores / wallflame on {cores} cores, wall {ratios['all_wall']:.2f} (medians "
          "of run-by-run ratios; >= 1.0: wallflame at least as fast)")
    return ratios


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


def headline(summary: dict[str, dict[str, float]]) -> list[Row]:
    """Per capture: one thread's CPU time against ``inferno --nthreads 1``, and the wall time
    on every core against inferno's (ratios: medians of the run-by-run ratios)."""
    cores = os.cpu_count()
    rows = []
    for name, r in summary.items():
        rows.append(row(f"{name}: one thread, CPU", r["ours_cpu"], r["inferno_cpu"],
                        "inferno-collapse-perf --nthreads 1", ratio=r["single_cpu_inv"]))
        rows.append(row(f"{name}: {cores} cores, wall", r["ours_all_wall"],
                        r["inferno_all_wall"], "inferno-collapse-perf",
                        ratio=r["all_wall_inv"]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--program", choices=[*PROGRAMS, "all"], default="all",
                    help=f"all: {', '.join(DEFAULT)}")
    ap.add_argument("--size-mb", type=int, default=150)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/wallflame-bench"),
                    help="where captures and texts are kept (reused by later runs)")
    ap.add_argument("--stream-mb", type=int, default=150,
                    help="text streamed through the pipe in the streaming check")
    ap.add_argument("--no-stream", action="store_true", help="skip the streaming check")
    ap.add_argument("--stream-only", action="store_true", help="only the streaming check")
    ap.add_argument("--json", type=Path, help="also write the headline rows here (run.py)")
    ap.add_argument("--describe", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.describe:  # (in its own process, so that the tools' peak RSS is theirs)
        print(describe(args.describe))
        return
    global VARIED
    os.chdir(ROOT)
    names = DEFAULT if args.program == "all" else [args.program]
    subprocess.run(["make", "-s", "-C", "samples", "bin/mix"], check=True)
    if "deep" in names:
        subprocess.run(["make", "-s", "-C", "samples/fixtures"], check=True)
    args.work.mkdir(parents=True, exist_ok=True)
    VARIED = build_varied(args.work)
    inferno = find_inferno()
    summary = {}
    for name in [] if args.stream_only else names:
        summary[name] = table(big_text(name, args.work, args.size_mb), args.runs, inferno)
    if summary:
        print()
        for name, r in summary.items():
            print(f"{name:7} one thread (CPU time): {r['single_cpu']:.2f}x inferno --nthreads 1"
                  f" | all cores (wall time): {r['all_wall']:.2f}x inferno on all cores")
    if args.json:
        write_rows(args.json, headline(summary))
    if not args.no_stream:
        print()
        for name in names:
            if name == "dwarf":
                continue
            for graph in ("fp", "dwarf"):
                streaming(name, args.work, graph, args.runs, args.stream_mb)


if __name__ == "__main__":
    main()
