#!/usr/bin/env python3
"""Benchmark: each native hot path (``wallflame._speedups``) against its Python reference
(``tests/unit/hub/reference_*.py``, put in place by ``reference_report.use_references``),
inside the command a user runs on a big input.

    .venv/bin/python benchmarks/native_pure.py report FOLDED [--runs 3] # wallflame report
    .venv/bin/python benchmarks/native_pure.py finish RUN_DIR [--runs 3] # wallflame finish (a copy)

Each run is a fresh process, native then with the references in turn.  In it the functions
that call a native path (``PARTS``: the path's caller, which the reference replaces, so both
ways are timed at the same place) are wrapped with a CPU timer (the process's user + sys: a
shared machine's load moves it less than wall time).  Printed: the command's wall and CPU time
(its children's included), and per part the median CPU time native and with the reference,
their ratio and the part's share of the native command's CPU time.  A path is measured here
when ``use_references`` has a reference for it.

Inputs like a user's: ``benchmarks/report.py``'s ``synthetic_folded`` with 500,000 stacks
(``--make-folded 500000``); the run directory of a 20 s ``wallflame collect --off-cpu sched
--sched-stack-hz 10`` of ``samples/bin/queue --threads 16`` (stacks sampled, as a busy
server's are).  The machine may be shared: the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.rows import row, write_rows

#: The tests' folder, whose ``unit.hub.reference_report`` holds the references.
TESTS = Path(__file__).resolve().parent.parent / "tests"

#: Per command: (module, attribute) of each function that calls a native path, by the native
#: entry points it stands for.
PARTS: dict[str, dict[str, list[str]]] = {
    "report": {
        "Interner.fold_plain, Interner.split": ["wallflame.fold.foreign_folded:fold",
                                                "wallflame.folded:read_annotated"],
        "grow_stacks, grow, tree_rows": ["wallflame.report.tree:_grow_sorted",
                                         "wallflame.report.tree:tree_rows",
                                         "wallflame.report.tree:_grow"],
        "group_weights": ["wallflame.profile:Profile.grouped"],
        "frame_names, stacks_naming": ["wallflame.report.summary:on_cpu_in"],
        "frame_weights": ["wallflame.report.summary:stack_weights"],
    },
    "finish": {
        "span_rows": ["wallflame.timebuild:add_spans"],
        "ints_json (timeline)": ["wallflame.timeline:json_text"],
        "group_weights": ["wallflame.profile:Profile.grouped"],
        "Interner.split": ["wallflame.folded:read_annotated"],
    },
}


def _wrap(spec: str, acc: dict[str, float]) -> None:
    mod_name, _, attr = spec.partition(":")
    owner: Any = importlib.import_module(mod_name)
    *path, name = attr.split(".")
    for p in path:
        owner = getattr(owner, p)
    inner = getattr(owner, name)
    depth = [0]

    def timed(*args: Any, **kwargs: Any) -> Any:
        depth[0] += 1
        t = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            depth[0] -= 1
            if not depth[0]:
                acc[spec] = acc.get(spec, 0.0) + time.process_time() - t

    setattr(owner, name, timed)


def child(command: str, argv: list[str]) -> None:
    """One run in this process: the command's figures as JSON on the last line.  The
    references go in first, so that the timers wrap them."""
    if os.environ.get("NATIVE_PURE_REFERENCES") == "1":
        sys.path.insert(0, str(TESTS))
        import pytest
        from unit.hub.reference_report import use_references

        use_references(pytest.MonkeyPatch())
    acc: dict[str, float] = {}
    for specs in PARTS[command].values():
        for spec in specs:
            _wrap(spec, acc)
    from wallflame.entry import main

    def cpu() -> float:
        return sum(r.ru_utime + r.ru_stime for r in (
            resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))

    c0 = cpu()
    t0 = time.perf_counter()
    real_exit = os._exit

    def figures() -> None:
        wall = time.perf_counter() - t0
        print(json.dumps({"wall": wall, "cpu": cpu() - c0, "parts": acc}), flush=True)

    def exit_after(code: int) -> None:  # a report ends with ``os._exit`` (``quick_exit``)
        if not code:
            figures()
        real_exit(code)

    os._exit = exit_after  # type: ignore[assignment]
    sys.argv = ["wallflame", *argv]
    try:
        main()
    except SystemExit as e:
        if e.code:
            raise
    figures()


def argv_of(command: str, path: Path, out: Path) -> list[str]:
    if command == "report":
        return ["report", str(path), "-o", str(out / "report.html")]
    run = out / "run"
    shutil.copytree(path, run)
    return ["finish", str(run)]


def one(command: str, path: Path, ref: bool) -> dict[str, Any]:
    env = {**os.environ, "NATIVE_PURE_REFERENCES": "1" if ref else ""}
    with tempfile.TemporaryDirectory(prefix="wallflame-np-") as tmp:
        argv = argv_of(command, path, Path(tmp))
        out = subprocess.run([sys.executable, __file__, "--child", command, "--", *argv],
                             env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=list(PARTS))
    ap.add_argument("path", type=Path, nargs="?")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--make-folded", type=int, metavar="STACKS",
                    help="write benchmarks/report.py's synthetic folded file to PATH first")
    ap.add_argument("--json", type=Path, help="also write the headline rows here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.command, [str(a.path), *a.rest] if a.path else a.rest)
        return
    assert a.path is not None
    if a.make_folded:
        sys.path.insert(0, str(Path(__file__).parent))
        from report import synthetic_folded

        synthetic_folded(a.path, a.make_folded)
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    loads = []
    for _ in range(a.runs):
        for ref in (False, True):
            loads.append(os.getloadavg()[0])
            runs[ref].append(one(a.command, a.path, ref))
    med = statistics.median

    def part(ref: bool, specs: list[str]) -> float:
        return med(sum(r["parts"].get(s, 0.0) for s in specs) for r in runs[ref])

    size = a.path.stat().st_size if a.path.is_file() else sum(
        p.stat().st_size for p in a.path.rglob("*") if p.is_file())
    print(f"{a.command} {a.path} ({size / 1e6:.0f} MB), medians of {a.runs} runs, load "
          f"{min(loads):.2f}-{max(loads):.2f}")
    for ref in (False, True):
        print(f"  {'reference' if ref else 'native'}: wall "
              f"{med(r['wall'] for r in runs[ref]):.2f} s, CPU "
              f"{med(r['cpu'] for r in runs[ref]):.2f} s")
    total = med(r["cpu"] for r in runs[False])
    if a.json:
        twin = "Python references (tests/unit/hub/reference_*.py)"
        write_rows(a.json, [
            row(f"{a.command}: whole command, CPU", total, med(r["cpu"] for r in runs[True]),
                twin),
            *(row(f"{a.command}: {name}, CPU", part(False, specs), part(True, specs), twin)
              for name, specs in PARTS[a.command].items())])
    print(f"  {'entry points (CPU s)':44} {'native':>9} {'reference':>9} {'ratio':>6} "
          f"{'share':>6}")
    for name, specs in PARTS[a.command].items():
        n, p = part(False, specs), part(True, specs)
        print(f"  {name:44} {n:9.3f} {p:9.3f} {p / n if n else 0:6.1f} "
              f"{n / total if total else 0:6.1%}")


if __name__ == "__main__":
    main()
