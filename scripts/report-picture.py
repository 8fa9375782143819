#!/usr/bin/env python3
"""The README's pictures: the demo's report page and its diff, drawn by Debian's chromium
(Playwright).

    .venv/bin/python scripts/report-picture.py            # runs the demo, then draws its report
    .venv/bin/python scripts/report-picture.py DEMO_DIR   # draws DEMO_DIR's report and diff

Writes docs/images/report.png (the top of the report: its findings, the timeline, the merged
flamegraph) and docs/images/diff.png (the top of the diff: what changed, the flamegraph).
Needs chromium (`apt-get install chromium`, as ./scripts/test.sh does) and the test
dependencies (`bash scripts/setup.sh dev,test`).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMAGES = ROOT / "docs" / "images"
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
#: The page's size in CSS pixels, and the device scale (a sharp picture on a high-DPI screen).
VIEWPORT = {"width": 1280, "height": 860}
SCALE = 1


def draw(page_path: Path, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport=VIEWPORT, device_scale_factor=SCALE)
        page.goto(page_path.resolve().as_uri())
        page.wait_for_load_state("load")
        page.wait_for_timeout(500)  # the flamegraph is drawn after load
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out))
        browser.close()


def main() -> int:
    if not Path(CHROMIUM).exists():
        print(f"report-picture: {CHROMIUM} is missing (fix: apt-get install chromium)",
              file=sys.stderr)
        return 6
    if len(sys.argv) > 1:
        demo = Path(sys.argv[1])
    else:
        demo = Path(tempfile.mkdtemp(prefix="wallflame-demo-")) / "demo"
        subprocess.run([sys.executable, "-m", "wallflame", "demo", "-o", str(demo)], check=True)
    for page, name in ((demo / "before" / "report.html", "report.png"),
                       (demo / "diff.html", "diff.png")):
        if not page.exists():
            print(f"report-picture: {page} is missing (fix: wallflame demo -o {demo})",
                  file=sys.stderr)
            return 3
        draw(page, IMAGES / name)
        print(f"report-picture: wrote {(IMAGES / name).relative_to(ROOT)} from {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
