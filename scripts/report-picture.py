#!/usr/bin/env python3
"""The README's pictures: the demo's report page and its diff, and a busy server's report,
drawn by Debian's chromium (Playwright).

    .venv/bin/python scripts/report-picture.py            # runs the demo, then draws its report
    .venv/bin/python scripts/report-picture.py DEMO_DIR   # draws DEMO_DIR's report and diff
    .venv/bin/python scripts/report-picture.py --busy-server           # MariaDB under sysbench
    .venv/bin/python scripts/report-picture.py --busy-server RUN_DIR   # draws RUN_DIR's report

Writes docs/images/report.png (the top of the report: its findings, the timeline, the merged
flamegraph) and docs/images/diff.png (the top of the diff: what changed, the flamegraph); with
--busy-server, docs/images/busy-server.png: a private MariaDB (benchmarks/servers.py) under
sysbench oltp_read_write with 32 clients, a default 20 s `wallflame collect` of it, the top of
its report (its findings: the connection threads waiting for a CPU).  Needs chromium
(`apt-get install chromium`, as ./scripts/test.sh does) and the test dependencies (`bash
scripts/setup.sh dev,test`); --busy-server needs mariadb-server and sysbench, and root (perf).
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


def busy_server_run() -> Path:
    """A default collect of MariaDB under 32 sysbench clients: its run directory."""
    import time

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from servers import MariaDB  # type: ignore[import-not-found]

    run = Path(tempfile.mkdtemp(prefix="wallflame-busy-")) / "run"
    with MariaDB(tables=4, table_size=10_000) as db:
        db.prepare()
        load = db.sysbench_start("oltp_read_write", threads=32, seconds=320)
        try:
            time.sleep(5)
            subprocess.run([sys.executable, "-m", "wallflame", "collect", "--pid", str(db.pid),
                            "-d", "20", "-o", str(run)], cwd=ROOT, check=True)
        finally:
            load.stop()
    return run


def busy_server(args: list[str]) -> int:
    run = Path(args[0]) if args else busy_server_run()
    page = run / "report.html"
    subprocess.run([sys.executable, "-m", "wallflame", "report", str(run), "-o", str(page)],
                   cwd=ROOT, check=True)
    out = IMAGES / "busy-server.png"
    draw(page, out)
    print(f"report-picture: wrote {out.relative_to(ROOT)} from {page}")
    return 0


def main() -> int:
    if not Path(CHROMIUM).exists():
        print(f"report-picture: {CHROMIUM} is missing (fix: apt-get install chromium)",
              file=sys.stderr)
        return 6
    if sys.argv[1:2] == ["--busy-server"]:
        return busy_server(sys.argv[2:])
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
