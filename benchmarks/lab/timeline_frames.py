#!/usr/bin/env python3
"""How fast the report page's timeline draws, pans and zooms in chromium.

    .venv/bin/python benchmarks/lab/timeline_frames.py RUN [RUNS]

Writes RUN's report page (``wallflame report RUN``), opens it RUNS times (default 5) in
Debian's chromium (Playwright, headless, 1400x1000) and prints, per load: the time to the
page's ``wf-drawn`` mark (the page parsed, every graph and the timeline drawn), the
timeline's first draw, then 240 animation frames driven by ``requestAnimationFrame``, each
zooming or panning the timeline (zoom in 60 frames, pan 60, zoom out 60, pan back 60): the
timeline's own draw time per frame and the interval between frames (60 fps is 16.7 ms).
Medians over the loads at the end.  Use a run of 64 threads over 60 s
(``benchmarks/lab/timeline_size.py`` makes one).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
STEPS = """async () => {
  const t = window.wallflame.timeline, draw = [], gaps = [];
  const steps = [];
  for (let i = 0; i < 60; i++) steps.push(() => t.zoom(0.93, t.cols / 2 + 150));
  for (let i = 0; i < 60; i++) steps.push(() => t.pan(12));
  for (let i = 0; i < 60; i++) steps.push(() => t.zoom(1 / 0.93, t.cols / 2 + 150));
  for (let i = 0; i < 60; i++) steps.push(() => t.pan(-12));
  let last = performance.now();
  for (const step of steps) {
    await new Promise(r => requestAnimationFrame(() => {
      const a = performance.now(); step(); draw.push(performance.now() - a);
      gaps.push(a - last); last = a; r();
    }));
  }
  return [draw, gaps.slice(1)];
}"""


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def one(browser: Any, page_path: Path) -> dict[str, float]:
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.goto(page_path.resolve().as_uri())
    page.wait_for_load_state("load")
    drawn = page.evaluate("performance.getEntriesByName('wf-drawn')[0].startTime")
    first = page.evaluate("window.wallflame.timeline.frameTimes[0]")
    rows = page.evaluate("window.wallflame.timeline.rows.length")
    draw, gaps = page.evaluate(STEPS)
    page.context.close()
    return {"rows": rows, "drawn_ms": drawn, "first_ms": first,
            "draw_median_ms": statistics.median(draw), "draw_p95_ms": pct(draw, 0.95),
            "draw_max_ms": max(draw), "frame_median_ms": statistics.median(gaps),
            "frame_p95_ms": pct(gaps, 0.95)}


def main() -> None:
    from playwright.sync_api import sync_playwright

    run = Path(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    out = run / "report.html"
    subprocess.run([sys.executable, "-m", "wallflame", "report", str(run), "-o", str(out)],
                   check=True)
    print(f"page: {out} ({out.stat().st_size / 1e6:.1f} MB)")
    results = []
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM,
                              args=["--headless", "--no-sandbox", "--disable-gpu"])
        for _ in range(runs):
            r = one(b, out)
            results.append(r)
            print(" ".join(f"{k}={v:.1f}" for k, v in r.items()))
        b.close()
    print("median: " + " ".join(f"{k}={statistics.median(r[k] for r in results):.1f}"
                                for k in results[0]))


if __name__ == "__main__":
    main()
