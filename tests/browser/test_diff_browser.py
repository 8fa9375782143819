"""The diff page in a real browser (Debian's chromium driven by Playwright).

Built from hostile names, the page must load with no console error (a CSP violation is one),
no dialog and no network request, draw the union tree, switch view, shape, delta and
normalisation, show a vanished stack only when shaped like BEFORE (in blue), and keep its
numbers readable with JavaScript blocked.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wallflame.profile import Profile, StackKey
from wallflame.report.diff.compare import compare
from wallflame.report.diff.page import write_html

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
EVIL = '</script><img src=x onerror=alert(1)>'


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    pw = pytest.importorskip("playwright.sync_api")
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (apt-get install chromium)")
    with pw.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def pair() -> tuple[Profile, Profile]:
    a, b = Profile(), Profile()
    for p in (a, b):
        p.meta.unit = "samples"
    a.add(StackKey(("main", "work"), 1, "t1"), 600)
    a.add(StackKey(("main", "old_path", EVIL), 1, "t1"), 400)
    b.add(StackKey(("main", "work"), 1, "t1"), 600)
    b.add(StackKey(("main", "extra_work"), 1, "t1"), 400)
    return a, b


def open_page(browser: Any, path: Path, js: bool = True) -> tuple[Any, list[str]]:
    ctx = browser.new_context(viewport={"width": 1300, "height": 900}, java_script_enabled=js)
    page = ctx.new_page()
    url = path.resolve().as_uri()
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("dialog", lambda d: (problems.append("dialog " + d.message), d.dismiss()))
    page.on("request", lambda r: problems.append("request " + r.url) if r.url != url else None)
    page.goto(url)
    page.wait_for_load_state("load")
    return page, problems


NODE_OF = """(name) => {
  const d = window.wallflameDiff, t = d.tree;
  for (let i = 1; i < t.n; i++) if (t.names[t.nameId[i]] === name) return i;
  return -1;
}"""


def test_diff_page_draws_switches_and_shows_what_vanished(browser: Any, tmp_path: Path) -> None:
    path = tmp_path / "diff.html"
    write_html(compare(*pair()), str(path))
    page, problems = open_page(browser, path)
    assert page.text_content("#graph-status").startswith("drawn: ")
    gone, new = page.evaluate(NODE_OF, "old_path"), page.evaluate(NODE_OF, "extra_work")
    assert gone > 0 and new > 0
    width = "(n) => window.wallflameDiff.width(n)"
    assert page.evaluate(width, gone) == 0 and page.evaluate(width, new) == 400  # like AFTER
    assert page.evaluate("(n) => window.wallflameDiff.color(n)", new).startswith("rgb(255,")
    page.select_option("#c-shape", "before")
    assert page.evaluate(width, gone) == 400 and page.evaluate(width, new) == 0
    blue = page.evaluate("(n) => window.wallflameDiff.color(n)", gone)
    assert blue.startswith("rgb(") and blue.endswith(",255)")
    for sel, value in (("#c-view", "on"), ("#c-view", "off"), ("#c-delta", "self"),
                       ("#c-norm", "share"), ("#c-view", "all")):
        page.select_option(sel, value)
    page.fill("#c-search", "extra")
    assert "Matched" in page.text_content("#graph-status")
    page.mouse.click(200, page.locator("#flame canvas").bounding_box()["y"] + 20)
    assert problems == []


def test_diff_page_without_javascript_keeps_names_as_text(browser: Any, tmp_path: Path) -> None:
    path = tmp_path / "diff.html"
    write_html(compare(*pair()), str(path))
    page, problems = open_page(browser, path, js=False)
    cells = page.locator("td.name").all_text_contents()
    assert EVIL in cells and "extra_work" in cells
    assert page.locator("img").count() == 0
    assert problems == []
