#!/usr/bin/env python3
"""A range selected on the report page against ``report --from --to`` on a real run.

    .venv/bin/python benchmarks/lab/page_range.py RUN [--range 0.3,0.45]

Writes RUN's report page, opens it in Debian's chromium (Playwright, headless), selects a
range of the timeline (fractions of the window; default the whole window) and compares each
thread's blocked time per wait class, as the page's per-thread table and graphs have it
(``timeline.totals``), with what the command line gives for the same range
(``report.timerange.restrict``).  Prints the largest difference of any thread and class, in
points of that thread's blocked time, both sides' shares of every class, and how long the
page took to rebuild its graphs for the range.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from wallflame.profile import OFF, WAIT_CLASSES  # noqa: E402
from wallflame.report.timerange import restrict, window_range  # noqa: E402
from wallflame.rundir import load_run_dir  # noqa: E402
from wallflame.timeline import load as load_timeline  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
BLOCKED = [c for c in WAIT_CLASSES if c != "runnable"]
TIMES = """([a, b]) => {
  const t = window.wallflame.timeline, n = window.wallflame.graphs.off.tree.n;
  let s = performance.now(); t.selfs(a, b, n, t.tl.classes); const selfs = performance.now() - s;
  s = performance.now(); t.select(a, b); return [selfs, performance.now() - s]; }"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--range", default="0,1", help="fractions of the window: FROM,TO")
    args = ap.parse_args()
    lo, hi = (float(x) for x in args.range.split(","))
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="wallflame-page-range-") as tmp:
        page_file = Path(tmp) / "report.html"
        t = time.monotonic()
        subprocess.run([sys.executable, "-m", "wallflame", "report", str(args.run), "-o",
                        str(page_file)], check=True, cwd=ROOT, stderr=subprocess.DEVNULL)
        print(f"report written in {time.monotonic() - t:.1f} s, "
              f"{page_file.stat().st_size / 1e6:.1f} MB")
        tl = load_timeline(args.run)
        length = tl.t1 - tl.t0
        a, b = int(lo * length) // 1000 * 1000, int(hi * length) // 1000 * 1000
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM,
                                        args=["--disable-gpu", "--no-sandbox"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(page_file.as_uri(), timeout=300_000)
            page.wait_for_function("window.wallflame && window.wallflame.timeline",
                                   timeout=300_000)
            selfs_ms, select_ms = page.evaluate(TIMES, [a, b])
            shown = page.evaluate("([a, b]) => window.wallflame.timeline.totals(a, b)", [a, b])
            browser.close()
    want = restrict(load_run_dir(args.run), tl, window_range(tl, a / 1e9, b / 1e9))
    cli: dict[int, dict[str, int]] = {}
    for k, w in want.stacks.items():
        if k.state == OFF and k.wait in BLOCKED:
            by = cli.setdefault(k.tid, {})
            by[k.wait] = by.get(k.wait, 0) + w
    worst, page_sum, cli_sum = 0.0, dict.fromkeys(BLOCKED, 0.0), dict.fromkeys(BLOCKED, 0.0)
    for tid, row in shown.items():
        theirs = cli.get(int(tid), {})
        blocked = sum(theirs.values()) or 1
        for c in BLOCKED:
            mine = row.get(c, 0) + (row.get("unsampled", 0) if c == "other" else 0)
            worst = max(worst, abs(mine - theirs.get(c, 0)) / blocked * 100)
            page_sum[c] += mine
            cli_sum[c] += theirs.get(c, 0)
    print(f"range {a / 1e9:.3f}-{b / 1e9:.3f} s of {length / 1e9:.3f}; {len(shown)} threads; "
          f"the page's graphs rebuilt in {select_ms:.0f} ms (the split {selfs_ms:.0f} ms)")
    print(f"largest difference of a thread's class: {worst:.3f} points of its blocked time")
    sp, sc = sum(page_sum.values()) or 1, sum(cli_sum.values()) or 1
    print(f"{'class':8s} {'page':>7s} {'report --from --to':>19s}   "
          "(% of the threads' blocked time)")
    for c in BLOCKED:
        print(f"{c:8s} {100 * page_sum[c] / sp:7.2f} {100 * cli_sum[c] / sc:19.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
