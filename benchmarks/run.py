#!/usr/bin/env python3
"""Run the benchmark suite: each comparison against its peer tool, one table of ratios.

    .venv/bin/python benchmarks/run.py [NAME...] [--quick] [--out DIR]

Each benchmark is its own script, run here as a subprocess with this interpreter and its
``--json FILE`` option (its headline rows: ``benchmarks/rows.py``).  The table printed at the
end sets wallflame's figure against the peer tool's, measured in the same run; the rows, the
machine and the exact commands run are written to ``DIR/<UTC date>-<hostname>.json``.  A
benchmark whose peer tool is missing is skipped with one line saying so; the others still run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: Where a peer tool installed by ``cargo install`` lives when it is not on PATH.
CARGO_BIN = Path.home() / ".cargo" / "bin"


@dataclass(frozen=True)
class Benchmark:
    """One suite script: its arguments for a quick run and for a full one (``{work}`` is a
    scratch folder of the run's own), and the tools it cannot run without."""

    script: str
    about: str
    quick: list[str]
    full: list[str]
    needs: list[str] = field(default_factory=list)


SUITE: dict[str, Benchmark] = {
    "fold": Benchmark(
        "fold_perf.py", "wallflame fold against inferno-collapse-perf, one thread and all cores",
        ["--program", "varied", "--size-mb", "10", "--runs", "3", "--no-stream",
         "--work", "{work}/fold"],
        ["--work", "{work}/fold"],
        ["perf", "inferno-collapse-perf"]),
    "report": Benchmark(
        "report.py", "wallflame report against inferno-flamegraph on the same folded input",
        ["--stacks", "2000", "--nodes", "10000", "--runs", "3", "--no-venv"], [],
        ["inferno-flamegraph"]),
    "diff": Benchmark(
        "diff.py", "wallflame diff against inferno-diff-folded | inferno-flamegraph",
        ["--stacks", "2000", "--repeat", "3"], [],
        ["inferno-diff-folded", "inferno-flamegraph"]),
    "overhead": Benchmark(
        "overhead.py", "what a collect costs a CPU-bound program, against pt-pmp",
        ["--runs", "1", "--seconds", "3", "--only",
         "collect (defaults),pmp libdw,pt-pmp --interval 0"], [],
        ["perf", "pt-pmp"]),
    "wakers": Benchmark(
        "wakers_cost.py", "what recording the wakers costs programs that switch often",
        ["--runs", "2", "--seconds", "3"], [], ["perf"]),
    "gate": Benchmark(
        "check_gate.py", "wallflame check's false alarms and catches; no peer tool",
        ["--rounds", "3", "--seconds", "4", "--round-pause", "0", "--out", "{work}/gate"],
        ["--out", "{work}/gate"],
        ["perf"]),
    "ab": Benchmark(
        "ab_power.py", "wallflame ab's catches and false alarms without work reporting; no "
        "peer tool",
        ["--slower", "1", "--unchanged", "1", "--rounds", "1", "--duration", "3", "--pause",
         "0", "--out", "{work}/ab"],
        ["--out", "{work}/ab"],
        ["perf"]),
    "server": Benchmark(
        "server_collect.py", "a busy MariaDB under a minute's collect; no peer tool",
        ["--tests", "oltp_read_write", "--window", "10", "--rounds", "1",
         "--reference-window", "0"], [],
        ["perf", "mariadbd", "mariadb-install-db", "sysbench"]),
}
#: Run when no NAME is given: every benchmark but ``server`` (MariaDB, sysbench, minutes) and
#: ``ab`` (30 A/Bs of 3 + 3 runs, about 50 minutes).
DEFAULT = [n for n in SUITE if n not in ("server", "ab")]


def find_tool(name: str, path: str | None = None) -> str | None:
    """``name`` on PATH (or ``path``), else in ``~/.cargo/bin``; None when neither has it."""
    return shutil.which(name, path=path) or shutil.which(name, path=str(CARGO_BIN))


def missing_tools(bench: Benchmark, path: str | None = None) -> list[str]:
    return [t for t in bench.needs if find_tool(t, path) is None]


def command(bench: Benchmark, quick: bool, work: Path, json_out: Path) -> list[str]:
    """The exact command line of one benchmark."""
    args = [a.replace("{work}", str(work)) for a in (bench.quick if quick else bench.full)]
    return [sys.executable, str(HERE / bench.script), *args, "--json", str(json_out)]


def tool_version(name: str) -> str | None:
    """The first line of ``NAME --version``, or None when the tool is missing or says nothing."""
    exe = find_tool(name)
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30,
                             check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[0].strip() if lines else None


def cargo_version(crate: str) -> str | None:
    """The version ``cargo install`` recorded for ``crate`` (inferno's tools have no
    ``--version``), or None."""
    cargo = find_tool("cargo")
    if cargo is None:
        return None
    try:
        out = subprocess.run([cargo, "install", "--list"], capture_output=True, text=True,
                             timeout=60, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return next((line.rstrip(":") for line in out.splitlines()
                 if line.startswith(f"{crate} v")), None)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    model = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    return {"cpu_model": model, "cores": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version(), "load_average": os.getloadavg()[0],
            "tools": {"perf": tool_version("perf"), "inferno": cargo_version("inferno"),
                      "pt-pmp": tool_version("pt-pmp")}}


def result_path(out: Path, when: datetime, host: str) -> Path:
    return out / f"{when.astimezone(UTC):%Y-%m-%d}-{host}.json"


def number(value: float | None, unit: str = "") -> str:
    """A figure as the table prints it: three significant digits or more, no exponent."""
    if value is None:
        return "-"
    size = abs(value)
    digits = 0 if size >= 100 else 1 if size >= 10 else 2 if size >= 1 or not size \
        else min(2 - math.floor(math.log10(size)), 9)
    text = f"{value:.{digits}f}"
    return f"{text} {unit}" if unit else text


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as one aligned text table: benchmark, measure, wallflame, peer tool, peer,
    ratio (wallflame over the peer; a measure where higher is better says so)."""
    head = ["benchmark", "measure", "wallflame", "peer tool", "peer", "ratio"]
    body = []
    for r in rows:
        measure = r["name"] + (" (higher is better)" if r.get("better") == "higher" else "")
        body.append([r.get("benchmark", ""), measure, number(r["wallflame"], r["unit"]),
                     r.get("peer_tool") or "-", number(r["peer"], r["unit"]),
                     number(r["ratio"])])
    widths = [max(len(line[i]) for line in [head, *body]) for i in range(len(head))]
    right = {2, 4, 5}
    out = []
    for line in [head, *body]:
        cells = [c.rjust(w) if i in right else c.ljust(w)
                 for i, (c, w) in enumerate(zip(line, widths, strict=True))]
        out.append("  ".join(cells).rstrip())
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def write_results(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


def run_one(name: str, bench: Benchmark, quick: bool, work: Path) -> dict[str, Any]:
    """Run one benchmark (its output goes to this process's); its record and rows."""
    json_out = work / f"{name}.json"
    cmd = command(bench, quick, work, json_out)
    print(f"\n== {name}: {' '.join(cmd)}", flush=True)
    t0 = time.monotonic()
    code = subprocess.run(cmd, cwd=ROOT, check=False).returncode
    seconds = time.monotonic() - t0
    rows = json.loads(json_out.read_text()) if json_out.exists() else []
    status = "ok" if code == 0 else f"exit {code}"
    print(f"== {name}: {status} in {seconds:.0f} s, {len(rows)} rows", flush=True)
    return {"name": name, "status": status, "seconds": round(seconds, 1), "command": cmd,
            "rows": [{"benchmark": name, **r} for r in rows]}


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="NAMEs: " + "; ".join(f"{n} ({b.about})" for n, b in SUITE.items())
        + ". Default: all but server, which needs MariaDB and sysbench and takes minutes even "
        "with --quick, and ab, which takes about 50 minutes in full.")
    ap.add_argument("names", nargs="*", metavar="NAME",
                    help="benchmarks to run (default: " + " ".join(DEFAULT) + ")")
    ap.add_argument("--quick", action="store_true",
                    help="small inputs and few runs: a check that the suite works, with rough "
                         "figures (all but server: under 10 minutes on 2 cores)")
    ap.add_argument("--out", type=Path, default=HERE / "results",
                    help="folder of the results file (default: benchmarks/results)")
    args = ap.parse_args(argv)
    unknown = [n for n in args.names if n not in SUITE]
    if unknown:
        ap.error(f"unknown benchmark {', '.join(unknown)} (choose from {', '.join(SUITE)})")
    args.names = list(dict.fromkeys(args.names)) or DEFAULT
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    started = datetime.now(UTC)
    t0 = time.monotonic()
    done: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="wallflame-suite-") as tmp:
        for name in args.names:
            bench = SUITE[name]
            missing = missing_tools(bench)
            if missing:
                print(f"\n== {name}: skipped: {', '.join(missing)} not found"
                      + (" (cargo install inferno)" if any("inferno" in m for m in missing)
                         else ""), flush=True)
                done.append({"name": name, "status": f"skipped: {', '.join(missing)} not found",
                             "seconds": 0.0, "command": None, "rows": []})
                continue
            done.append(run_one(name, bench, args.quick, Path(tmp)))
    rows = [r for d in done for r in d["rows"]]
    wall = time.monotonic() - t0
    print(f"\n{table(rows)}\n\nratio: wallflame / peer (lower is better unless marked); "
          f"{'quick' if args.quick else 'full'} run, {wall:.0f} s")
    for d in done:
        if d["status"] != "ok":
            print(f"{d['name']}: {d['status']}")
    path = result_path(args.out, started, socket.gethostname())
    write_results(path, {
        "date": started.strftime("%Y-%m-%dT%H:%M:%SZ"), "host": socket.gethostname(),
        "quick": args.quick, "wall_s": round(wall, 1), "machine": machine(),
        "runner": [sys.executable, *sys.argv],
        "benchmarks": [{k: d[k] for k in ("name", "status", "seconds", "command")}
                       for d in done],
        "rows": rows})
    print(f"results: {path}")
    return 0 if all(d["status"] == "ok" or d["status"].startswith("skipped") for d in done) \
        else 1


if __name__ == "__main__":
    sys.exit(main())
