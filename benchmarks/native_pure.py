#!/usr/bin/env python3
"""Benchmark: each native hot path (``wallflame._speedups``) against its pure-Python twin
(``WALLFLAME_PURE=1``), inside the command a user runs on a big input.

    .venv/bin/python benchmarks/native_pure.py fold TEXT [--runs 3]     # wallflame fold --jobs 1
    .venv/bin/python benchmarks/native_pure.py report FOLDED [--runs 3] # wallflame report
    .venv/bin/python benchmarks/native_pure.py finish RUN_DIR [--runs 3] # wallflame finish (a copy)

Each run is a fresh process, native then pure in turn.  In it the functions that hold a
native branch (``PARTS``: the branch's caller, so both ways are timed at the same place) are
wrapped with a CPU timer (the process's user + sys: a shared machine's load moves it less
than wall time).  Printed: the command's wall and CPU time (its children's included), and
per part the median CPU time native and pure, their ratio and the part's share of the native
command's CPU time.  ``--off module:attr,...`` adds a third way, native with those paths off
(for a part whose pure twin runs partly in a child process, as ``perf script``).

Inputs like a user's: ``benchmarks/fold_perf.py``'s ``varied`` text of 100 MB or more;
``benchmarks/report.py``'s ``synthetic_folded`` with 500,000 stacks (``--make-folded
500000``); the run directory of a 20 s ``wallflame collect --off-cpu sched --sched-stack-hz
10`` of ``samples/bin/queue --threads 16`` (stacks sampled, as a busy server's are).  The
machine may be shared: the load average is printed with the figures.
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
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rows import row, write_rows  # noqa: E402

#: Per command: (module, attribute) of each function holding a native branch, by the native
#: entry points it stands for.
PARTS: dict[str, dict[str, list[str]]] = {
    "fold": {
        "PerfFolder": ["wallflame.fold.perf.reader:_fold_into"],
    },
    "report": {
        "Interner.fold_plain, Interner.split": ["wallflame.fold.foreign_folded:fold",
                                                "wallflame.folded:read_annotated"],
        "grow_stacks, grow, tree_rows": ["wallflame.report.tree:_grow_sorted",
                                         "wallflame.report.tree:tree_rows"],
        "self_triples": ["wallflame.report.tree:FlameTree.to_json"],
        "group_weights": ["wallflame.profile:Profile.grouped"],
        "frame_names, stacks_naming": ["wallflame.report.summary:on_cpu_in"],
        "frame_weights": ["wallflame.report.summary:stack_weights"],
        "ints_json (page)": ["wallflame.report.html:tojson"],
    },
    "finish": {
        "SwitchTracker, switch_lines, perf_switches": [
            "wallflame.fold.perf.sampled_switches:SampledSched.feed"],
        "wake_run": ["wallflame.fold.perf.sampled_switches:SampledSched.feed_wakes"],
        "wake_split": ["wallflame.fold.perf.sampled_switches:SampledSched._apply_wakes"],
        "apply_lag": ["wallflame.fold.perf.sampled_switches:SampledSched._switch_in_lag"],
        "in_caps": ["wallflame.fold.perf.sampled_switches:SampledSched._in_caps"],
        "clip_log": ["wallflame.fold.perf.sampled_switches:SampledSched._clip"],
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


def _off(spec: str) -> None:
    """Turn one native path off: a Python function (a reader of the native module's) returns
    ``None``, anything else (the native function or type) becomes ``None``."""
    mod_name, _, attr = spec.partition(":")
    mod = importlib.import_module(mod_name)
    was = getattr(mod, attr)
    setattr(mod, attr, (lambda *a, **k: None) if isinstance(was, types.FunctionType) else None)


def child(command: str, argv: list[str]) -> None:
    """One run in this process: the command's figures as JSON on the last line."""
    for spec in filter(None, os.environ.get("NATIVE_PURE_OFF", "").split(",")):
        _off(spec)
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
    if command == "fold":
        return ["fold", "--jobs", "1", str(path), "-o", str(out / "out.folded")]
    if command == "report":
        return ["report", str(path), "-o", str(out / "report.html")]
    run = out / "run"
    shutil.copytree(path, run)
    return ["finish", str(run)]


def one(command: str, path: Path, pure: bool, off: str = "") -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("WALLFLAME_PURE", None)
    env["NATIVE_PURE_OFF"] = off
    if pure:
        env["WALLFLAME_PURE"] = "1"
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
    ap.add_argument("--off", default="",
                    help="module:attr,...: a third way, native with these paths off")
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
    offs: list[dict[str, Any]] = []
    loads = []
    for _ in range(a.runs):
        for pure in (False, True):
            loads.append(os.getloadavg()[0])
            runs[pure].append(one(a.command, a.path, pure))
        if a.off:
            offs.append(one(a.command, a.path, False, a.off))
    med = statistics.median

    def part(pure: bool, specs: list[str]) -> float:
        return med(sum(r["parts"].get(s, 0.0) for s in specs) for r in runs[pure])

    size = a.path.stat().st_size if a.path.is_file() else sum(
        p.stat().st_size for p in a.path.rglob("*") if p.is_file())
    print(f"{a.command} {a.path} ({size / 1e6:.0f} MB), medians of {a.runs} runs, load "
          f"{min(loads):.2f}-{max(loads):.2f}")
    for pure in (False, True):
        print(f"  {'pure' if pure else 'native'}: wall {med(r['wall'] for r in runs[pure]):.2f} s"
              f", CPU {med(r['cpu'] for r in runs[pure]):.2f} s")
    if offs:
        print(f"  native without {a.off}: wall {med(r['wall'] for r in offs):.2f} s, CPU "
              f"{med(r['cpu'] for r in offs):.2f} s")
    total = med(r["cpu"] for r in runs[False])
    if a.json:
        twin = "pure Python (WALLFLAME_PURE=1)"
        write_rows(a.json, [
            row(f"{a.command}: whole command, CPU", total, med(r["cpu"] for r in runs[True]),
                twin),
            *(row(f"{a.command}: {name}, CPU", part(False, specs), part(True, specs), twin)
              for name, specs in PARTS[a.command].items())])
    print(f"  {'entry points (CPU s)':44} {'native':>9} {'pure':>9} {'ratio':>6} {'share':>6}")
    for name, specs in PARTS[a.command].items():
        n, p = part(False, specs), part(True, specs)
        print(f"  {name:44} {n:9.3f} {p:9.3f} {p / n if n else 0:6.1f} "
              f"{n / total if total else 0:6.1%}")


if __name__ == "__main__":
    main()
