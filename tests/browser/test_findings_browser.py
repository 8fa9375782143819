"""The field cases' first finding on the page's first screen (Debian's chromium driven by
Playwright, a 1400x900 window): the list of findings opens the page, and its first item names
the diagnosis, with the function or lock it rests on, above the fold.

Built from the field cases' shapes (the stacks and the memory each sample's before variant
shows: tests/live/test_field_cases_live.py checks them live); and, with
``WALLFLAME_FIELD_RUNS=DIR``, from the run directories that test keeps there as well.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from unit.report.test_findings import ALLOC, GC, ICU, SPIN, memory, on_profile

from browser.test_report_browser import browser  # noqa: F401  (the fixture: one chromium)
from wallflame.profile import OFF, Profile, StackKey
from wallflame.report.exports import write_report
from wallflame.rundir import load_run_dir

pytestmark = pytest.mark.browser

WIDTH, HEIGHT = 1400, 900

#: Per field case: the first finding's heading and the words its text names.
EXPECTED = {
    "queue": ("Lock contention", ("g_mutex_queue", "MutexQueue::pop")),
    "normalizer": ("Costly library call", ("ICU", "icu_lower")),
    "proxy": ("Allocator time in new/delete", ("the allocator",)),
    "epoll": ("Busy polling", ("epoll_wait",)),
    "gc": ("Garbage collection", ("Go's garbage collector", "runtime.mallocgc")),
    "arenas": ("Retained memory", ("glibc malloc arenas", "looks like a leak")),
}




def _queue() -> Profile:
    """Eight consumers waiting on the queue's mutex in MutexQueue::pop, its holder in
    QueueStats::record."""
    p = on_profile([(("consumer_loop", "process_message", "fnv1a"), t, 0.5)
                    for t in range(1, 9)])
    for t in range(1, 9):
        p.add(StackKey(("clone3", "start_thread", "consumer_loop", "MutexQueue::pop",
                        "pthread_mutex_lock", "__lll_lock_wait"), t, f"consumer-{t}", 1, OFF,
                       "mutex", "0x55ab8e245328 <g_mutex_queue+0x28>"), 4 * 10**9)
        p.meta.threads[t] = f"consumer-{t}"
    return p


def _shaped(case: str) -> Profile:
    stacks = {"normalizer": ICU, "proxy": ALLOC, "epoll": SPIN, "gc": GC}.get(case)
    if stacks is not None:
        return on_profile(stacks)
    if case == "arenas":
        return on_profile([(("worker", "write_block", "memset"), 1, 2.0)],
                          memory(8, 480 * 1024, 483 * 1024))
    return _queue()


def pages(tmp: Path) -> list[tuple[str, Path, str, tuple[str, ...]]]:
    """``(case, page, heading, words)`` for every field case's shape, and every kept run
    directory: a run's page shows the first finding its ``summary.json`` holds (the live test
    judges which that is), in the same words."""
    out = []
    for case, (heading, words) in EXPECTED.items():
        page = tmp / f"{case}-shaped.html"
        write_report(_shaped(case), "html", str(page))
        out.append((case, page, heading, words))
    kept = os.environ.get("WALLFLAME_FIELD_RUNS")
    for case in EXPECTED if kept else ():
        run = Path(kept or "") / f"{case}-before"
        if run.is_dir():
            page = tmp / f"{case}-run.html"
            write_report(load_run_dir(run), "html", str(page))
            first = json.loads((run / "summary.json").read_text())["findings"][0]
            out.append((case, page, first["heading"], (first["text"][:60],)))
    return out


def test_the_first_finding_is_on_the_first_screen(
        tmp_path: Path, browser: Any) -> None:  # noqa: F811  (the imported fixture)
    ctx = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    errors: list[str] = []
    for case, path, heading, words in pages(tmp_path):
        page = ctx.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(path.resolve().as_uri())
        page.wait_for_load_state("load")
        first = page.locator("#findings li.finding").first
        box = first.bounding_box()
        assert box is not None, f"{case}: no finding on {path.name}"
        assert box["y"] >= 0 and box["y"] + min(box["height"], 60) <= HEIGHT, (case, box)
        assert first.is_visible()
        text = first.inner_text()
        assert text.startswith(f"{heading}:"), (case, path.name, text)
        for w in words:
            assert w in text, (case, path.name, w, text)
        page.close()
    assert errors == []
    ctx.close()


def test_the_shapes_are_the_field_cases() -> None:
    """The pages above are built from the shapes the findings' unit tests use: each holds its
    case's first finding (so the browser test fails for the page, not for the data)."""
    from wallflame.report.findings import summarize

    for case, (heading, words) in EXPECTED.items():
        first = summarize(_shaped(case))["findings"][0]
        assert first["heading"] == heading, (case, first)
        assert all(w in first["text"] for w in words), (case, first)
