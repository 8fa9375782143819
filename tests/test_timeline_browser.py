"""The report page's timeline in a real browser (Debian's chromium driven by Playwright): it
draws, hovering shows the stack (and outlines a lock's holder), a range selection restricts
the flame graphs to the figures ``report --from --to`` gives and is kept in the URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_browser import browser, load  # noqa: F401 (the fixture)
from test_perfetto import _run_dir, _with_samples
from test_timeline import HOSTILE, S

from wallflame.profile import OFF, HolderKey
from wallflame.report.exports import add_run_facts, write_report
from wallflame.report.timerange import restrict, window_range
from wallflame.rundir import load_run_dir
from wallflame.timeline import load as load_timeline

LOCK = "0x10 <g_lock>"


def _page(tmp_path: Path) -> tuple[Path, Path]:
    """A run directory (the capture of ``test_timeline``: thread 1 waits on a mutex
    1.0-1.3 s, is runnable 1.5-1.6 s, waits on a condvar 2.0-2.8 s; hostile names) whose
    mutex wait has a lock and a confirmed holder, thread 2, and its page."""
    tl, p = _with_samples()
    ref = tl.lock_set({LOCK: 5})
    tl.threads[1].p_locks[0] = ref
    for k in [k for k in p.stacks if k.state == OFF and k.wait == "mutex"]:
        p.stacks[k._replace(lock=LOCK)] = p.stacks.pop(k)
    p.add_holder(HolderKey(LOCK, 2, "v", ("main", "hold")), 1000)
    run = _run_dir(tmp_path, tl, p)
    out = tmp_path / "report.html"
    profile = load_run_dir(run)
    add_run_facts(profile, [str(run)])
    write_report(profile, "html", str(out))
    return run, out


def _x(page: Any, ns_from_start: float) -> float:
    x: float = page.evaluate("t => window.wallflame.timeline.x(t)", ns_from_start)
    return x


def _row_y(page: Any, tid: int) -> float:
    y: float = page.evaluate("tid => 18 + window.wallflame.timeline.rowOf(tid) * 14 + 6", tid)
    return y


def _canvas(page: Any) -> dict[str, float]:
    box: dict[str, float] = page.locator("#tl-host canvas.tl-top").bounding_box()
    return box


def test_the_timeline_draws_every_thread(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    _, out = _page(tmp_path)
    got = load(browser, out)
    page = got.page
    assert page.is_visible("#timeline")
    rows = page.evaluate("window.wallflame.timeline.rows.map(r => r.tid)")
    assert sorted(rows) == [1, 2]
    # Pixels coloured in each row where the thread had events (mutex on thread 1 at 1.1 s).
    colour = page.evaluate(
        """([x, y]) => { const c = window.wallflame.timeline.base, g = c.getContext('2d'),
             d = window.devicePixelRatio || 1; return Array.from(g.getImageData(
             Math.round(x * d), Math.round(y * d), 1, 1).data); }""",
        [_x(page, S // 10), _row_y(page, 1)])
    assert colour[3] == 255, colour
    got.clean()


def test_hover_shows_the_stack_and_the_holder(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    _, out = _page(tmp_path)
    got = load(browser, out)
    page = got.page
    box = _canvas(page)
    page.mouse.move(box["x"] + _x(page, S // 10), box["y"] + _row_y(page, 1))
    tip = page.inner_text("#wf-tip")
    assert "mutex" in tip and LOCK in tip, tip
    assert "__lll_lock_wait" in tip and "take" in tip, tip
    assert "held (confirmed) by thread 2" in tip, tip
    assert page.evaluate("window.wallflame.timeline.hover.holders") == [2]
    # The thread's hostile name is text in the tooltip, not markup.
    assert HOSTILE[0] in tip
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    # Between spans the thread ran: the nearest on-CPU sample's stack.
    page.mouse.move(box["x"] + _x(page, 4 * S // 10), box["y"] + _row_y(page, 1))
    tip = page.inner_text("#wf-tip")
    assert "on-CPU" in tip and HOSTILE[1].split("\n")[0] in tip, tip
    got.clean()


def _totals(page: Any) -> tuple[float, float]:
    on, off = page.evaluate("[window.wallflame.graphs.on.total(), "
                            "window.wallflame.graphs.off.total()]")
    return float(on), float(off)


def test_a_range_restricts_the_graphs_and_stays_in_the_url(browser: Any,  # noqa: F811
                                                           tmp_path: Path) -> None:
    run, out = _page(tmp_path)
    got = load(browser, out)
    page = got.page
    whole = _totals(page)
    box = _canvas(page)
    y = box["y"] + _row_y(page, 1)
    page.mouse.move(box["x"] + _x(page, 0.05 * S), y)
    page.mouse.down()
    page.mouse.move(box["x"] + _x(page, 0.55 * S), y, steps=4)
    page.mouse.up()
    a, b = page.evaluate("window.wallflame.state.range")
    assert 0.04 * S < a < 0.06 * S and 0.54 * S < b < 0.56 * S, (a, b)
    assert "range=" in page.url
    got_on, got_off = _totals(page)
    assert (got_on, got_off) != whole
    # The same range on the command line's side.
    tl = load_timeline(run)
    want = restrict(load_run_dir(run), tl, window_range(tl, a / 1e9, b / 1e9))
    want_on = sum(w for k, w in want.stacks.items() if k.state != OFF)
    want_off = sum(w for k, w in want.stacks.items() if k.state == OFF)
    assert got_on == pytest.approx(want_on, rel=0.01)
    assert got_off == pytest.approx(want_off, rel=0.01)
    # The mutex wait of thread 1 (1.0-1.3 s) is in the range, the condvar (2.0-2.8 s) not.
    assert "condvar" not in page.evaluate(
        "(() => { const g = window.wallflame.graphs.off, t = g.tree; const out = [];"
        " for (let i = 0; i < t.n; i++) if (g.value[i] > 0) out.push(t.names[t.nameId[i]]);"
        " return out.join('|'); })()")
    # The per-thread table shows the range too, and its whole-window figures come back.
    cell = '#threads tr[data-tid="1"] [data-k="%s"]'
    range_mutex = page.inner_text(cell % "mutex")
    assert page.inner_text(cell % "mutex") == f"{(3 * S // 10 - a) / 1e6:.2f} ms"
    assert page.inner_text(cell % "condvar") == "\u00b7"
    assert page.inner_text(cell % "runnable") == f"{(b - S // 2) / 1e6:.2f} ms"
    # Reloading the address restores the range; clearing it restores the whole window.
    url = page.url
    again = load(browser, out)
    again.page.goto(url)
    again.page.wait_for_load_state("load")
    assert _totals(again.page) == pytest.approx((got_on, got_off))
    again.page.click("#tl-clear")
    assert _totals(again.page) == pytest.approx(whole)
    assert again.page.inner_text(cell % "mutex") != range_mutex
    assert again.page.inner_text(cell % "mutex") == "300.00 ms"
    assert "range=" not in again.page.url
    got.clean()
    again.clean()


KERNEL = ("entry_SYSCALL_64_after_hwframe", "do_syscall_64", "__x64_sys_futex", "do_futex",
          "futex_wait", "schedule", "__schedule")


def _names(page: Any) -> set[str]:
    names: list[str] = page.evaluate(
        "(() => { const g = window.wallflame.graphs.main, t = g.tree; const out = [];"
        " for (let i = 0; i < t.n; i++) if (g.value[i] > 0) out.push(t.names[t.nameId[i]]);"
        " return out; })()")
    return set(names)


def test_kernel_frames_fold_into_one_and_expand(browser: Any, tmp_path: Path) -> None:  # noqa: F811
    from wallflame.profile import ON, Profile, StackKey

    p = Profile()
    p.add(StackKey(("main", "take", "__lll_lock_wait", *KERNEL), 1, "w", 9, OFF, "mutex"), 300)
    p.add(StackKey(("main", "nap", "clock_nanosleep", "entry_SYSCALL_64_after_hwframe",
                    "do_syscall_64", "__x64_sys_clock_nanosleep", "hrtimer_nanosleep",
                    "do_nanosleep", "schedule"), 1, "w", 9, OFF, "sleep"), 200)
    p.add(StackKey(("main", "work"), 1, "w", 9, ON), 100)
    out = tmp_path / "k.html"
    write_report(p, "html", str(out))
    got = load(browser, out)
    page = got.page
    total = page.evaluate("window.wallflame.graphs.main.total()")
    names = _names(page)
    assert "[kernel] futex_wait (futex)" in names, names
    assert "[kernel] do_nanosleep (clock_nanosleep)" in names, names
    assert not names & set(KERNEL), names
    assert "[mutex]" in names and "__lll_lock_wait" in names  # the wait and the user's frames
    page.keyboard.press("k")
    names = _names(page)
    assert set(KERNEL) <= names and not any(n.startswith("[kernel]") for n in names)
    assert "kernel=1" in page.url
    assert page.evaluate("window.wallflame.graphs.main.total()") == total
    got.clean()
    # The folded export keeps every frame.
    folded = tmp_path / "k.folded"
    write_report(p, "folded", str(folded))
    assert ";".join(KERNEL) in folded.read_text()
