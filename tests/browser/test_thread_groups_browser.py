"""The report page's threads grouped by default: the per-thread bars one row per name pattern
or role (``consumer-* ×8``, ``mariadbd: handle_one_connection ×4``) and the flame graph's
roots grouped the same way; one click shows them one by one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from unit.report.test_report_fixtures import demo_profile

from browser.test_report_browser import browser, load  # noqa: F401 (the fixture)
from wallflame.profile import OFF, ON, Meta, Profile, StackKey
from wallflame.report.exports import write_report

pytestmark = pytest.mark.browser

S = 10**9


def mariadb() -> Profile:
    """Fifty threads' worth of a server that names none of its threads, in small: four
    connection threads, two pool workers, the listener."""
    p = Profile(meta=Meta(unit="ns", window_ns=10 * S))
    conn = ("clone3", "start_thread", "[mariadbd]", "handle_one_connection", "do_command")
    pool = ("clone3", "start_thread", "[libstdc++.so.6]", "tpool::thread_pool_generic::worker_main",
            "tpool::thread_pool_generic::wait_for_tasks", "pthread_cond_wait")
    for tid in (10, 11, 12, 13):
        p.add(StackKey(conn, tid, "mariadbd", 1, ON), 4 * S)
        p.add(StackKey(conn, tid, "mariadbd", 1, OFF, "runnable"), 6 * S)
    for tid in (20, 21):
        p.add(StackKey(pool, tid, "mariadbd", 1, OFF, "condvar"), 10 * S)
    p.add(StackKey(("_start", "mysqld_main", "poll"), 1, "mariadbd", 1, OFF, "poll"), 10 * S)
    return p


def roots(page: Any) -> list[str]:
    names: list[str] = page.evaluate(
        "(() => { const g = window.wallflame.graphs.main, t = g.tree; const r = [];"
        " for (let j = g.kids.start[0]; j < g.kids.start[1]; j++)"
        " r.push(t.names[t.nameId[g.kids.list[j]]]); return r; })()")
    return names


@pytest.mark.parametrize(("profile", "group", "member", "root", "one"), [
    (demo_profile, "mix-* ×4", "4243", "mix-* [4 threads]", "mix-1 (4243)"),
    (mariadb, "mariadbd: handle_one_connection ×4", "10",
     "mariadbd: handle_one_connection [4 threads]", "mariadbd (10)"),
])
def test_threads_are_grouped_by_default_and_one_click_shows_each(
        browser: Any, tmp_path: Path, profile: Any, group: str, member: str,  # noqa: F811
        root: str, one: str) -> None:
    out = tmp_path / "page.html"
    write_report(profile(), "html", str(out))
    got = load(browser, out)
    page = got.page
    # grouped: the table's group row with its bar, its members hidden; the graph's roots
    assert page.is_visible("#threads tr.group")
    assert group in page.inner_text("#threads tr.group")
    assert page.is_visible("#threads tr.group svg.bar rect")
    assert not page.is_visible(f'#threads tr[data-tid="{member}"]')
    assert page.evaluate("window.wallflame.state.threads") == "group"
    assert root in roots(page) and one not in roots(page)
    # one click: each thread its row and its root
    page.check("#threads-each")
    assert page.is_visible(f'#threads tr[data-tid="{member}"]')
    assert not page.is_visible("#threads tr.group")
    assert page.evaluate("window.wallflame.state.threads") == "per"
    assert one in roots(page) and root not in roots(page)
    # and back
    page.check("input[name=threads][value=group]")
    assert not page.is_visible(f'#threads tr[data-tid="{member}"]')
    assert not page.is_checked("#threads-each")
    got.clean()
