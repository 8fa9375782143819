"""Benchmark of ``wallflame report`` against ``inferno-flamegraph`` on the same folded input.

    .venv/bin/python benchmarks/report.py [--stacks 20000] [--runs 5] [--nodes 100000] [--pin CPU]

Prints, side by side in one run:
  * generation time (median of --runs) of the HTML page by ``wallflame report`` (a whole
    process, as a user runs it, and in-process) and of the SVG by ``inferno-flamegraph``
    (~/.cargo/bin; ``cargo install inferno``), and their ratio (target: within 1.5x).  The
    process is the ``wallflame`` command as installed: in a fresh virtual environment made
    by ``pip install`` of this checkout (what a user gets; ``--no-venv`` skips it), and in
    the interpreter running this script (whose ``site`` start-up may carry hooks of the
    machine's and an editable install's finder).  Both run with their modules' bytecode
    cached (in a private ``PYTHONPYCACHEPREFIX``, whatever ``PYTHONDONTWRITEBYTECODE`` says)
    and compiled templates cached (a private ``XDG_CACHE_HOME``); the first run fills both
    caches and is printed apart, and one more figure shows a run with neither cache;
  * the HTML file size (target: under 5 MB);
  * in headless Chromium (Debian's /usr/bin/chromium through Playwright): first contentful
    paint and the time until the three flame graphs are drawn (target: under 1 s);
  * for a profile of about --nodes flame-tree nodes: click-zoom (all three graphs re-laid out
    and redrawn) and regex search (matched share computed, all three redrawn), median of
    several, in the browser (target: under 100 ms).
The input is synthetic but shaped like a real profile (``tests/synthetic.py``).
"""

from __future__ import annotations

import argparse
import gc
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.rows import Row, row, write_rows  # noqa: E402
from tests.synthetic import synthetic_folded  # noqa: E402
from wallflame.fold import load_inputs  # noqa: E402
from wallflame.report.html import render_html  # noqa: E402
from wallflame.report.summary import build_summary  # noqa: E402
from wallflame.report.tree import build_tree  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def python_env(tmp: Path, cached: bool) -> dict[str, str]:
    """The environment of a ``wallflame`` process: with bytecode and template caches of its
    own (as an installed package has; filled by its first run), or with neither: the
    interpreter's own bytecode, wallflame's modules compiled on every run (unless a
    ``__pycache__`` is already beside them) and its templates too."""
    env = dict(os.environ)
    env["XDG_CACHE_HOME"] = str(tmp / "cache")
    if cached:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("WALLFLAME_NO_CACHE", None)
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    else:
        env.pop("PYTHONPYCACHEPREFIX", None)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["WALLFLAME_NO_CACHE"] = "1"
    return env


def wallflame_command(python: str) -> list[str]:
    """The ``wallflame`` entry point installed beside ``python`` (``python -m wallflame``
    when there is none)."""
    script = Path(python).parent / "wallflame"
    return [str(script)] if script.exists() else [python, "-m", "wallflame"]


def fresh_venv(tmp: Path) -> str | None:
    """The Python of a new virtual environment with this checkout installed by pip (not in
    editable mode), or None when it cannot be made (no network for the dependencies)."""
    env = tmp / "venv"
    try:
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True,
                       capture_output=True)
        python = str(env / "bin" / "python")
        subprocess.run([python, "-m", "pip", "install", "-q", str(ROOT)], check=True,
                       capture_output=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:
        print(f"fresh virtual environment not made ({e}): figure skipped")
        return None
    return python


def timed(cmd: list[str], out: Path, runs: int,
          env: dict[str, str] | None = None) -> tuple[list[float], list[float]]:
    """Wall-clock and CPU (user + system) seconds of each run of ``cmd``.  On a shared
    machine the CPU time is the steadier figure; both are printed."""
    wall, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        with open(out, "wb") as f:
            subprocess.run(cmd, stdout=f, stderr=subprocess.DEVNULL, check=True, env=env,
                           cwd=ROOT)
        wall.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return wall, cpu


def in_process(folded: Path, runs: int) -> dict[str, float]:
    """Median seconds of each step of ``wallflame report`` inside one process."""
    steps: dict[str, list[float]] = {"load": [], "tree": [], "summary": [], "page": []}
    gc.disable()  # as ``wallflame report`` runs
    for _ in range(runs):
        t0 = time.perf_counter()
        profile = load_inputs([str(folded)])
        t1 = time.perf_counter()
        build_tree(profile)
        t2 = time.perf_counter()
        build_summary(profile)
        t3 = time.perf_counter()
        render_html(profile)
        t4 = time.perf_counter()
        steps["load"].append(t1 - t0)
        steps["tree"].append(t2 - t1)
        steps["summary"].append(t3 - t2)
        steps["page"].append(t4 - t3)
    gc.enable()
    return {k: statistics.median(v) for k, v in steps.items()}


def page_ms(page: Any, i: int, call: str, before: str = "") -> float:
    """Milliseconds the browser page takes to run the JavaScript ``call``, with ``i`` bound
    to the argument; the statements ``before`` run first, untimed."""
    return page.evaluate(f"""(i) => {{{before}
      const t0 = performance.now();
      {call};
      return performance.now() - t0;
    }}""", i)


def browser_figures(page_path: Path, big_path: Path,
                    deep_path: Path | None = None) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    out: dict[str, float] = {}
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = b.new_page(viewport={"width": 1400, "height": 1000})
        fcp, drawn = [], []
        for _ in range(5):
            page.goto(page_path.resolve().as_uri())
            page.wait_for_function("window.wallflame !== undefined")
            fcp.append(page.evaluate(
                "performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? -1"))
            drawn.append(page.evaluate(
                "performance.getEntriesByName('wf-drawn')[0]?.startTime ?? -1"))
        out["fcp_ms"] = statistics.median(fcp)
        out["drawn_ms"] = statistics.median(drawn)
        page.goto(big_path.resolve().as_uri())
        page.wait_for_function("window.wallflame !== undefined")
        out["big_drawn_ms"] = page.evaluate(
            "performance.getEntriesByName('wf-drawn')[0]?.startTime ?? -1")
        out["big_nodes"] = page.evaluate("window.wallflame.graphs.main.tree.n")
        zoom, search = [], []
        for i in range(7):
            zoom.append(page_ms(page, i, "window.wallflame.zoomPath(path)", """
              const g = window.wallflame.graphs.main, t = g.tree, k = g.kids;
              let node = k.list[k.start[0] + (i % (k.start[1] - k.start[0]))];
              const path = [];
              while (node > 0 && path.length < 3) {
                path.push(t.names[t.nameId[node]]);
                const c = k.start[node + 1] - k.start[node];
                if (!c) break;
                node = k.list[k.start[node] + (i % c)];
              }"""))
            search.append(page_ms(
                page, i, "window.wallflame.search('method' + (100 + i * 37) + '$|Class1' + i)"))
            page.evaluate("window.wallflame.search('')")
        out["zoom_ms"] = statistics.median(zoom)
        out["search_ms"] = statistics.median(search)
        if deep_path is not None:
            page.goto(deep_path.resolve().as_uri())
            page.wait_for_function("window.wallflame !== undefined")
            dz, ds = [], []
            for i in range(5):
                dz.append(page_ms(page, i, "window.wallflame.zoomPath(path)", """
                  const path = ['deep', 'main'].concat(
                    Array.from({length: 5000 + i}, (_, k) => 'recurse_' + (k % 7)));"""))
                ds.append(page_ms(page, i, "window.wallflame.search('recurse_' + (i % 7))"))
            out["deep_zoom_ms"] = statistics.median(dz)
            out["deep_search_ms"] = statistics.median(ds)
        b.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--stacks", type=int, default=20_000)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--pin", type=int, metavar="CPU",
                    help="run the timed processes on this CPU only (taskset): steadier figures "
                         "on a shared machine")
    ap.add_argument("--no-venv", action="store_true",
                    help="do not time wallflame installed in a fresh virtual environment")
    ap.add_argument("--json", type=Path, help="also write the headline rows here (run.py)")
    args = ap.parse_args()
    pin = ["taskset", "-c", str(args.pin)] if args.pin is not None else []
    inferno = shutil.which("inferno-flamegraph") or os.path.expanduser(
        "~/.cargo/bin/inferno-flamegraph")
    with tempfile.TemporaryDirectory(prefix="wf-bench-") as tmp:
        d = Path(tmp)
        folded = d / "in.folded"
        synthetic_folded(folded, args.stacks)
        nodes = len(build_tree(load_inputs([str(folded)])))
        print(f"input: {args.stacks} unique stacks, {folded.stat().st_size / 1e6:.1f} MB "
              f"folded, {nodes} flame-tree nodes")
        med = statistics.median
        env = python_env(d, cached=True)
        venv = None if args.no_venv else fresh_venv(d)
        here = wallflame_command(sys.executable)
        report = [*pin, *here, "report", str(folded), "-o", str(d / "wf.html")]
        first, first_cpu = timed(report, d / "wf.log", 1, env)  # fills the caches
        start, start_cpu = timed([*pin, *here, "report", "--help"], d / "help", args.runs, env)
        bare, bare_cpu = timed([*pin, sys.executable, "-c", "pass"], d / "pass", args.runs, env)
        bare_s, _ = timed([*pin, sys.executable, "-S", "-c", "pass"], d / "pass", args.runs, env)
        fresh = None
        if venv is not None:
            fresh = [*pin, *wallflame_command(venv), "report", str(folded), "-o",
                     str(d / "venv.html")]
            timed(fresh, d / "venv.log", 1, env)  # fills its caches
            venv_bare, _ = timed([*pin, venv, "-c", "pass"], d / "pass", args.runs, env)
        # wallflame and inferno in turn, so that both meet the same load on a shared machine
        have_inferno = os.path.exists(inferno)
        wf: list[float] = []
        wf_cpu: list[float] = []
        vf: list[float] = []
        vf_cpu: list[float] = []
        inf: list[float] = []
        inf_cpu: list[float] = []
        for _ in range(args.runs):
            if fresh is not None:
                w, c = timed(fresh, d / "venv.log", 1, env)
                vf += w
                vf_cpu += c
            w, c = timed(report, d / "wf.log", 1, env)
            wf += w
            wf_cpu += c
            if have_inferno:
                w, c = timed([*pin, inferno, str(folded)], d / "inferno.svg", 1)
                inf += w
                inf_cpu += c
        cold, cold_cpu = timed(report, d / "wf.log", args.runs, python_env(d, cached=False))
        steps = in_process(folded, args.runs)
        size = (d / "wf.html").stat().st_size
        if fresh is not None:
            print(f"wallflame report, fresh venv median {med(vf):.3f} s wall, {med(vf_cpu):.3f} s "
                  f"CPU  (wall runs: "
                  f"{', '.join(f'{t:.2f}' for t in vf)}; its python -c pass "
                  f"{med(venv_bare):.3f} s)")
        print(f"wallflame report, here      median {med(wf):.3f} s wall, {med(wf_cpu):.3f} s "
              f"CPU  (wall runs: {', '.join(f'{t:.2f}' for t in wf)}; {' '.join(here)})")
        print(f"  first run                 {first[0]:.3f} s wall, {first_cpu[0]:.3f} s CPU "
              "(fills the bytecode cache, standard library included, and the template cache)")
        print(f"  without either cache      median {med(cold):.3f} s wall, "
              f"{med(cold_cpu):.3f} s CPU")
        print(f"  of which CLI start-up     {med(start):.3f} s wall, {med(start_cpu):.3f} s CPU "
              "(wallflame report --help)")
        print(f"  of which Python start-up  {med(bare):.3f} s wall, {med(bare_cpu):.3f} s CPU "
              f"(python -c pass; {med(bare_s):.3f} s with -S, without site hooks)")
        print("  in-process steps          " + ", ".join(f"{k} {v:.3f} s"
                                                          for k, v in steps.items()))
        rows: list[Row] = []
        if have_inferno:
            rows.append(row("page, wall", med(wf), med(inf), "inferno-flamegraph",
                            ratio=med([w / i for w, i in zip(wf, inf, strict=True)])))
            rows.append(row("page, CPU", med(wf_cpu), med(inf_cpu), "inferno-flamegraph"))
            if fresh is not None:
                rows.append(row("page, fresh venv, wall", med(vf), med(inf),
                                "inferno-flamegraph",
                                ratio=med([w / i for w, i in zip(vf, inf, strict=True)])))
            rows.append(row("output size", size / 1e6,
                            (d / "inferno.svg").stat().st_size / 1e6, "inferno-flamegraph",
                            unit="MB"))
            print(f"inferno-flamegraph          median {med(inf):.3f} s wall, "
                  f"{med(inf_cpu):.3f} s CPU  "
                  f"(svg {(d / 'inferno.svg').stat().st_size / 1e6:.1f} MB)")
            if fresh is not None:
                paired = med([w / i for w, i in zip(vf, inf, strict=True)])
                print(f"ratio, fresh venv/inferno   {med(vf) / med(inf):.2f}x wall, "
                      f"{med(vf_cpu) / med(inf_cpu):.2f}x CPU, {paired:.2f}x median of the "
                      "run-by-run wall ratios  (target <= 1.5x)")
            paired = med([w / i for w, i in zip(wf, inf, strict=True)])
            print(f"ratio wallflame/inferno     {med(wf) / med(inf):.2f}x wall, "
                  f"{med(wf_cpu) / med(inf_cpu):.2f}x CPU, {paired:.2f}x median of the "
                  "run-by-run wall ratios  (target <= 1.5x)")
        else:
            print("inferno-flamegraph not found (cargo install inferno): ratio not measured")
        perl = shutil.which("flamegraph.pl")
        if perl:
            fg, fg_cpu = timed([perl, str(folded)], d / "fg.svg", min(args.runs, 3))
            print(f"flamegraph.pl               median {med(fg):.3f} s wall, "
                  f"{med(fg_cpu):.3f} s CPU")
        print(f"HTML size                   {size / 1e6:.2f} MB  (target < 5 MB)")
        big = d / "big.folded"
        n, got = args.stacks, nodes
        for _ in range(4):  # a few proportional steps bring the tree near --nodes
            n = max(int(n * args.nodes / got), 1)
            synthetic_folded(big, n, seed=9)
            got = len(build_tree(load_inputs([str(big)])))
            if abs(got - args.nodes) < args.nodes * 0.05:
                break
        subprocess.run([sys.executable, "-m", "wallflame", "report", str(big), "-o",
                        str(d / "big.html")], stderr=subprocess.DEVNULL, check=True, env=env,
                       cwd=ROOT)
        print(f"big profile: {n} stacks, {got} nodes, HTML "
              f"{(d / 'big.html').stat().st_size / 1e6:.2f} MB")
        if not os.path.exists(CHROMIUM):
            print("chromium not installed: browser figures not measured")
            if args.json:
                write_rows(args.json, rows)
            return
        deep = d / "deep.folded"
        # (the short line first: format detection reads the first 64 KiB)
        deep.write_text("other;main;work 50\ndeep;main;"
                        + ";".join(f"recurse_{k % 7}" for k in range(10_000)) + ";bottom 100\n")
        subprocess.run([sys.executable, "-m", "wallflame", "report", str(deep), "-o",
                        str(d / "deep.html")], stderr=subprocess.DEVNULL, check=True, env=env,
                       cwd=ROOT)
        b = browser_figures(d / "wf.html", d / "big.html", d / "deep.html")
        print(f"first contentful paint      {b['fcp_ms']:.0f} ms  (target < 1000 ms)")
        print(f"graphs drawn                {b['drawn_ms']:.0f} ms after navigation start "
              "(median of 5 loads)")
        print(f"big: graphs drawn           {b['big_drawn_ms']:.0f} ms "
              f"({b['big_nodes']:.0f} nodes)")
        print(f"big: click-zoom             {b['zoom_ms']:.1f} ms median  (target < 100 ms)")
        print(f"big: regex search           {b['search_ms']:.1f} ms median  (target < 100 ms)")
        print(f"10,000-frame stack: zoom    {b['deep_zoom_ms']:.1f} ms, search "
              f"{b['deep_search_ms']:.1f} ms (medians)")
        if args.json:
            write_rows(args.json, [*rows, row("first contentful paint", b["fcp_ms"], unit="ms"),
                                   row(f"click-zoom, {b['big_nodes']:.0f} nodes",
                                       b["zoom_ms"], unit="ms"),
                                   row(f"regex search, {b['big_nodes']:.0f} nodes",
                                       b["search_ms"], unit="ms")])


if __name__ == "__main__":
    main()
