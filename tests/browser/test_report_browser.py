"""The report page in a real browser (Debian's chromium driven by Playwright).

Pages built from hostile names (and a 10,000-frame stack) and from a real perf capture of
``samples/bin/mix`` must load with no console error, no dialog and no network request, show
every name as text, and answer clicks (zoom) and searches.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from unit.report.test_report_fixtures import HOSTILE, MS, demo_profile, hostile_profile

from wallflame.fold import load_inputs
from wallflame.profile import StackKey
from wallflame.report.diff.compare import compare
from wallflame.report.diff.page import write_html as write_diff_html
from wallflame.report.exports import write_report
from wallflame.report.tree import visible

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    pw = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (apt-get install chromium)")
    with pw.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@dataclass
class Loaded:
    page: Any
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def clean(self) -> None:
        assert self.errors == [], self.errors
        assert self.dialogs == [], self.dialogs
        assert self.requests == [], self.requests


def load(browser: Any, path: Path, js: bool = True) -> Loaded:
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000}, java_script_enabled=js)
    page = ctx.new_page()
    url = path.resolve().as_uri()
    got = Loaded(page)
    page.on("console", lambda m: got.errors.append(m.text) if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: got.errors.append(str(e)))

    def dialog(d: Any) -> None:
        got.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    page.on("request", lambda r: got.requests.append(r.url) if r.url != url else None)
    page.goto(url)
    page.wait_for_load_state("load")
    return got


def frame_point(page: Any, graph: str, names: list[str]) -> dict[str, float]:
    """Viewport coordinates of the middle of the frame at ``names`` (root first) in a graph."""
    point: dict[str, float] | None = page.evaluate(
        """([graph, names]) => {
          const g = window.wallflame.graphs[graph], t = g.tree, vis = g.vis;
          let node = 0;
          for (const name of names) {
            let found = -1;
            for (let j = g.kids.start[node]; j < g.kids.start[node + 1]; j++) {
              const c = g.kids.list[j];
              if (t.names[t.nameId[c]] === name && g.value[c] > 0) { found = c; break; }
            }
            if (found < 0) return null;
            node = found;
          }
          const i = vis.n.indexOf(node);
          if (i < 0) return null;
          g.scroll.scrollTop = Math.max(0, vis.d[i] * g.rowH - 40);
          const r = g.canvas.getBoundingClientRect();
          return {x: r.left + vis.x[i] + vis.w[i] / 2,
                  y: r.top + vis.d[i] * g.rowH - g.scroll.scrollTop + g.rowH / 2};
        }""", [graph, names])
    assert point is not None, names
    return point


#: Text only an escaping or rendering mistake puts in a table: an entity shown as text
#: (``&middot;``), a JSON or folded-stack escape, a value the page's code failed to fill in.
ARTEFACT = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]*|#[0-9]+|#[xX][0-9A-Fa-f]+);|\\u[0-9A-Fa-f]{4}"
                      r"|\\x[0-9A-Fa-f]{2}|\b(?:undefined|NaN|None|null)\b|\[object Object\]")


def table_cells(page: Any) -> list[tuple[str, str]]:
    """(table, rendered text) of every cell of every table on the page."""
    cells: list[tuple[str, str]] = page.evaluate(
        """() => Array.from(document.querySelectorAll('table')).flatMap((t, i) => {
             const where = t.id || (t.closest('[id]') || {}).id || 'table ' + i;
             return Array.from(t.querySelectorAll('caption, th, td'))
               .map(c => [where, c.innerText]);
           })""")
    return cells


def table_artefacts(page: Any) -> list[str]:
    return [f"{where}: {text!r}" for where, text in table_cells(page) if ARTEFACT.search(text)]


def search(page: Any, q: str) -> str:
    page.fill("#search", q)
    page.press("#search", "Enter")
    text: str = page.text_content("#search-out") or ""
    return text


def test_hostile_names_load_cleanly_and_show_as_text(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "hostile.html"
    write_report(hostile_profile(10_000), "html", str(out))
    got = load(browser, out)
    page = got.page
    text = page.inner_text("body")
    for raw in HOSTILE:
        assert visible(raw, 40)[:30] in text, raw
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    # every hostile name is a frame of the graph, held as text (never parsed as markup)
    names = page.evaluate("window.wallflame.graphs.main.tree.names")
    for raw in HOSTILE:
        assert visible(raw) in names
    # click-zoom into a hostile frame: the details pane shows its full name as text
    raw = HOSTILE[1]
    pt = frame_point(page, "main", [f"{visible(raw)} (101)", "main", visible(raw)])
    page.mouse.click(pt["x"], pt["y"])
    assert page.text_content("#det-name") == visible(raw)
    assert page.evaluate("window.wallflame.graphs.main.zoomNode") > 0
    assert "z=" in page.evaluate("location.hash")
    page.keyboard.press("Escape")
    assert page.evaluate("window.wallflame.graphs.main.zoomNode") == 0
    got.clean()


def test_ten_thousand_frames_zoom_and_search(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "deep.html"
    write_report(hostile_profile(10_000), "html", str(out))
    got = load(browser, out)
    page = got.page
    # nested matches count once: the 100 ms deep stack out of 1.22 s holds recurse_3 ~1,400x
    assert search(page, "recurse_3").startswith("Matched: 8.20% (100.00 ms)")
    assert search(page, "recurse_[0-6]|bottom").startswith("Matched: 8.20%")
    assert search(page, "(") == "invalid regular expression"
    # zoom into the 5,000th frame of the deep stack and reset
    t0 = time.monotonic()
    node = page.evaluate("window.wallflame.zoomPath(['deep (90)', 'main'].concat("
                         "Array.from({length: 5000}, (_, i) => 'recurse_' + (i % 7))))")
    assert node > 0 and time.monotonic() - t0 < 2
    assert page.evaluate("window.wallflame.graphs.main.vis.rows") >= 10_003
    page.press("#search", "Escape")  # leaves the search field; shortcuts apply again
    page.keyboard.press("r")
    assert page.evaluate("window.wallflame.graphs.main.zoomNode") == 0
    got.clean()


def test_state_is_restored_from_the_url(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "demo.html"
    write_report(demo_profile(), "html", str(out))
    got = load(browser, out)
    page = got.page
    page.check("input[name=threads][value=per]")
    pt = frame_point(page, "main", ["mix-2 (4244)", "clone3", "start_thread", "worker_main"])
    page.mouse.click(pt["x"], pt["y"])
    search(page, "mutex")
    page.check("input[name=view][value=off]")
    url = page.url
    again = load(browser, out)
    again.page.goto(url)
    again.page.reload()
    st = again.page.evaluate("window.wallflame.state")
    assert st["view"] == "off" and st["q"] == "mutex" and len(st["z"]) == 4
    assert st["threads"] == "per"
    assert again.page.text_content("#det-name") == "worker_main"
    # the off-CPU graph is zoomed to the same frame: only mix-2's waits, 1.05 s
    g = again.page.evaluate("(() => { const g = window.wallflame.graphs.off;"
                            " return g.value[g.zoomNode]; })()")
    assert g == 1050 * MS
    got.clean()
    again.clean()


def test_thread_grouping_and_views(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "demo.html"
    write_report(demo_profile(), "html", str(out))
    got = load(browser, out)
    page = got.page
    page.check("input[name=threads][value=group]")
    roots = page.evaluate("(() => { const g = window.wallflame.graphs.main, t = g.tree;"
                          " const r = []; for (let j = g.kids.start[0]; j < g.kids.start[1];"
                          " j++) r.push(t.names[t.nameId[g.kids.list[j]]]); return r; })()")
    assert "mix-* [4 threads]" in roots and "mix-ticker (4247)" in roots
    page.check("input[name=threads][value=merged]")
    assert page.evaluate("window.wallflame.graphs.main.tree.parent.length") < 60
    page.keyboard.press("2")
    total = page.evaluate("window.wallflame.graphs.main.total()")
    assert total == demo_profile().per_class()["on"]
    got.clean()


def test_page_informs_with_javascript_blocked(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "demo.html"
    write_report(demo_profile(), "html", str(out))
    got = load(browser, out, js=False)
    text = got.page.inner_text("body")
    assert "mix-* ×4" in text and "shared_lock" in text
    assert not got.page.is_visible('#threads tr[data-tid="4243"]')
    got.page.check("#threads-each")  # one click shows the threads one by one, without scripts
    assert got.page.is_visible('#threads tr[data-tid="4243"]')
    assert not got.page.is_visible("#threads tr.group")
    assert "910.00 ms" in got.page.inner_text("#threads")
    assert "JavaScript is off" in text
    got.clean()


@pytest.mark.parametrize("js", [True, False])
def test_every_table_reads_as_plain_text(browser: Any, tmp_path: Path, js: bool) -> None:
    out = tmp_path / "demo.html"
    write_report(demo_profile(), "html", str(out))
    got = load(browser, out, js=js)
    cells = table_cells(got.page)
    assert len({where for where, _ in cells}) >= 3, cells  # threads, top stacks, locks at least
    assert table_artefacts(got.page) == []
    # an empty cell of the per-thread table shows a middle dot
    assert "\u00b7" in [text.strip() for _, text in cells]
    got.clean()


def test_every_table_of_the_diff_page_reads_as_plain_text(browser: Any, tmp_path: Path) -> None:
    before, after = demo_profile(), demo_profile()
    after.add(StackKey(("clone3", "start_thread", "worker_main", "extra_work"), 4243, "mix-1",
                       4242), 400 * MS)
    out = tmp_path / "diff.html"
    write_diff_html(compare(before, after), str(out))
    for js in (True, False):
        got = load(browser, out, js=js)
        assert table_cells(got.page)
        assert table_artefacts(got.page) == []
        got.clean()


@pytest.fixture(scope="module")
def mix_capture(tmp_path_factory: pytest.TempPathFactory, sample_bin: Path,
                live: None) -> Path:
    """``perf script`` of a 2 s cpu-clock capture of mix (4 workers)."""
    d = tmp_path_factory.mktemp("mix")
    mix = subprocess.Popen([str(sample_bin / "mix"), "--threads", "4", "--duration", "4"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        r = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "997", "-g",
                            "-o", str(d / "perf.data"), "-p", str(mix.pid), "--", "sleep", "2"],
                           capture_output=True, timeout=60, check=False)
        assert (d / "perf.data").exists(), r.stderr
    finally:
        mix.terminate()
        mix.wait(timeout=10)
    script = d / "perf.txt"
    with open(script, "wb") as f:
        subprocess.run(["perf", "script", "-i", str(d / "perf.data")], stdout=f,
                       stderr=subprocess.DEVNULL, timeout=120, check=True)
    return script


@pytest.mark.live
def test_real_perf_capture_of_mix(browser: Any, mix_capture: Path, tmp_path: Path) -> None:
    profile = load_inputs([str(mix_capture)])
    out = tmp_path / "mix.html"
    write_report(profile, "html", str(out))
    got = load(browser, out)
    page = got.page
    page.check("#threads-each")  # the table's threads one by one, the graphs' one root each
    text = page.inner_text("body")
    for i in range(1, 5):
        assert f"mix-{i}" in text
    matched = search(page, "^mix_hash$")
    share = float(matched.split("Matched: ")[1].split("%")[0])
    assert share > 30, matched  # the workers spin in mix_hash most of their on-CPU time
    busiest = max(profile.per_thread(), key=lambda t: t.on)
    pt = frame_point(page, "main", [f"{busiest.name} ({busiest.tid})"])
    page.mouse.click(pt["x"], pt["y"])
    assert page.evaluate("window.wallflame.graphs.main.zoomNode") > 0
    assert page.text_content("#det-name") == f"{busiest.name} ({busiest.tid})"
    shots = Path(os.environ.get("WALLFLAME_SHOTS", tmp_path))
    page.screenshot(path=str(shots / "report-mix.png"), full_page=True)
    got.clean()


@pytest.fixture(scope="module")
def mix_run(tmp_path_factory: pytest.TempPathFactory, sample_bin: Path, live: None) -> Path:
    """A 3 s ``wallflame collect`` run directory of mix (4 workers contending on a mutex)."""
    run = tmp_path_factory.mktemp("collect") / "run"
    root = ROOT
    r = subprocess.run([sys.executable, "-m", "wallflame", "collect", "-o", str(run),
                        "--duration", "3", "--", str(sample_bin / "mix"), "--threads", "4",
                        "--duration", "3"], cwd=root, capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    return run


@pytest.mark.live
def test_real_collect_run_shows_the_mutex(browser: Any, mix_run: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "wallflame", "report", str(mix_run)],
                       cwd=ROOT, capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    got = load(browser, mix_run / "report.html")
    page = got.page
    assert "shared_lock" in page.inner_text("#locks")
    assert table_artefacts(page) == []
    names = page.evaluate("window.wallflame.graphs.off.tree.names")
    assert any(n.startswith("[mutex ") and "shared_lock" in n for n in names)
    matched = search(page, r"^\[mutex ")
    assert float(matched.split("Matched: ")[1].split("%")[0]) > 0
    page.screenshot(path=str(Path(os.environ.get("WALLFLAME_SHOTS", mix_run)) /
                             "report-collect.png"), full_page=True)
    got.clean()


def test_zoom_into_a_thread_group_survives_a_reload(browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "demo.html"
    write_report(demo_profile(), "html", str(out))
    got = load(browser, out)
    page = got.page
    page.check("input[name=threads][value=group]")
    pt = frame_point(page, "main", ["mix-* [4 threads]", "clone3"])
    page.mouse.click(pt["x"], pt["y"])
    again = load(browser, out)
    again.page.goto(page.url)
    again.page.reload()
    zoomed = again.page.evaluate("(() => { const g = window.wallflame.graphs.main;"
                                 " return [g.tree.names[g.tree.nameId[g.zoomNode]],"
                                 " g.value[g.zoomNode]]; })()")
    assert zoomed == ["clone3", sum(1950 + 10 * i for i in range(1, 5)) * MS]  # 4 workers
    got.clean()
    again.clean()


def _js_hash(name: str) -> float:
    """report.js's frame-name hash (FNV-1a over the first 64 UTF-16 code units)."""
    h = 2166136261
    units = name.encode("utf-16-le")
    for i in range(0, min(len(units), 128), 2):
        h = ((h ^ int.from_bytes(units[i:i + 2], "little")) * 16777619) & 0xFFFFFFFF
    return h / 4294967296


def test_frame_colours_labels_and_amounts_are_the_pythons(browser: Any, tmp_path: Path) -> None:
    """The script draws each class in the table's colour and names it with the table's label,
    though it holds no copy of either, and writes amounts as ``amounts.readable`` does: a frame
    of each class (weights from 1 ns to 150 s), read back from the page."""
    from unit.hub.test_waitclasses import SPREAD, every_class_profile

    from wallflame.amounts import readable
    from wallflame.profile import UNIT_NS
    from wallflame.report.palette import rgb
    from wallflame.waitclasses import BY_NAME

    out = tmp_path / "classes.html"
    write_report(every_class_profile(SPREAD), "html", str(out))
    got = load(browser, out)
    page = got.page
    drawn = page.evaluate(
        """() => {
          const g = window.wallflame.graphs.main, t = g.tree, out = {};
          for (let n = 1; n < t.parent.length; n++) {
            const name = t.names[t.nameId[n]];
            if (!name.startsWith("f_")) continue;
            out[name] = [g.opts.color(n), g.opts.tooltip(g, n), g.value[n]];
          }
          return out;
        }""")
    assert set(drawn) == {f"f_{c}" for c in BY_NAME}
    for cls, c in BY_NAME.items():
        name = f"f_{cls}"
        want = "rgb({},{},{})".format(*rgb(cls, _js_hash(name), _js_hash(name + "\u0001")))
        colour, tip, weight = drawn[name]
        assert colour == want, cls
        amount = readable(weight, UNIT_NS)
        assert tip[1].startswith(amount + " \u2014 "), (cls, tip)
        assert tip[2] == f"{c.label} {amount} (100%)", (cls, tip)
    got.clean()


def test_blame_graph_of_a_run_directory(browser: Any, tmp_path: Path) -> None:
    """A run directory's critical path (``blame.folded``) is a flame graph of its own on the
    page: hostile names as text, the width the time waited, the search applied to it."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "blame.folded").write_text(
        f"consumer-*;mutex g_lock;woken by consumer-*;[on-CPU];main;{HOSTILE[1]} 3000000\n"
        "consumer-*;mutex g_lock;woken by consumer-*;[waiting for a CPU];main 1000000\n"
        "producer;sleep;woken by a timer 500000\n", encoding="utf-8")
    profile = demo_profile()
    profile.meta.extra["run_dir"] = str(run)
    out = tmp_path / "report.html"
    write_report(profile, "html", str(out))
    got = load(browser, out)
    page = got.page
    assert page.is_visible("#fg-blame")
    assert page.evaluate("window.wallflame.blame.total()") == 4_500_000
    assert visible(HOSTILE[1]) in page.evaluate("window.wallflame.blame.tree.names")
    assert "4.50 ms" in (page.text_content("#tot-blame") or "")
    page.evaluate("window.wallflame.search('fnv|waiting for a CPU')")
    assert page.evaluate("window.wallflame.blame.match !== null")
    got.clean()
