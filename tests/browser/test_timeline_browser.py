"""The report page's timeline in a real browser (Debian's chromium driven by Playwright): it
draws, hovering shows the stack (and outlines a lock's holder), a range selection restricts
the flame graphs to the figures ``report --from --to`` gives and is kept in the URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from unit.report.test_perfetto import _run_dir, _with_samples
from unit.report.test_timeline import HOSTILE, S

from browser.test_report_browser import browser, load  # noqa: F401 (the fixture)
from wallflame.profile import OFF, HolderKey
from wallflame.report.exports import add_run_facts, write_report
from wallflame.report.timerange import restrict, window_range
from wallflame.rundir import load_run_dir
from wallflame.timeline import load as load_timeline

pytestmark = pytest.mark.browser

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
    return _write_page(tmp_path, tl, p)


def _write_page(tmp_path: Path, tl: Any, p: Any) -> tuple[Path, Path]:
    """The run directory of ``tl`` and ``p``, and its page."""
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


def _sampled_page(tmp_path: Path) -> tuple[Path, Path]:
    """A run whose switches carried a stack one time in ten (a data budget): thread 7 sleeps
    300 ms a second (two of those sleeps a snapshot's stop showed: their stack, period 0; the
    rest with no stack) and waits 2 ms on a condition variable five times a second (one wait
    in ten sampled, period 10); thread 8 waits 500 ms a second and none of its switches was
    sampled (its stacks of the whole window are the snapshots': ``poll``).  The run's profile
    is the whole window's split (``report.timerange``, as ``finish`` splits it)."""
    from wallflame.profile import Profile, StackKey
    from wallflame.report.timerange import Range
    from wallflame.timeline import KINDS, Timeline

    ms = S // 1000
    tl = Timeline(t0=0, t1=10 * S, off_source="sched")
    sleep = tl.stacks.intern(("start_thread", "worker", "nanosleep"))
    cond = tl.stacks.intern(("start_thread", "worker", "pthread_cond_wait"))
    u = KINDS.index("unsampled")
    one, two = tl.thread(7, 100, "worker"), tl.thread(8, 100, "poller")
    n = 0
    for sec in range(10):
        spans = [(sec * S + 100 * ms, 300 * ms, *((KINDS.index("sleep"), sleep, 0)
                                                 if sec in (2, 6) else (u, 0, 1)))]
        for j in range(5):
            n += 1
            spans.append((sec * S + (500 + 20 * j) * ms, 2 * ms,
                          *((KINDS.index("condvar"), cond, 10) if n % 10 == 0 else (u, 0, 1))))
        for span in spans:
            one.span(*span)
        two.span(sec * S + 200 * ms, 500 * ms, u)
    seed = Profile()
    seed.meta.threads.update({7: "worker", 8: "poller"})
    seed.add(StackKey(("start_thread", "poller", "poll"), 8, "poller", 100, OFF, "poll"), 1)
    return _write_page(tmp_path, tl, restrict(seed, tl, Range(0, 10 * S)))


def test_a_range_of_a_sampled_run_splits_its_waits_as_the_command_line_does(
        browser: Any, tmp_path: Path) -> None:  # noqa: F811
    """With one switch in ten carrying a stack, a range selected in the page gives each
    thread's blocked time the classes ``report --from --to`` gives it (the waits with no
    stack split by the strata of their durations), in the flame graphs and in the per-thread
    table: not the sampled waits' own time with the rest as ``other``."""
    run, out = _sampled_page(tmp_path)
    got = load(browser, out)
    page = got.page
    a, b = int(1.05 * S), int(7.55 * S)
    page.evaluate("([a, b]) => window.wallflame.timeline.select(a, b)", [a, b])
    assert page.evaluate("window.wallflame.state.range") == [a, b]
    tl = load_timeline(run)
    want = restrict(load_run_dir(run), tl, window_range(tl, a / 1e9, b / 1e9))
    by: dict[tuple[int, str], int] = {}
    for k, w in want.stacks.items():
        if k.state == OFF:
            by[(k.tid, k.wait)] = by.get((k.tid, k.wait), 0) + w
    # What the command line gives: the unsampled sleeps take the shown sleeps' stack, the
    # poller its whole-window poll; nothing is left as "other".
    assert set(by) == {(7, "sleep"), (7, "condvar"), (8, "poll")}, by
    totals = page.evaluate("([a, b]) => window.wallflame.timeline.totals(a, b)", [a, b])
    for (tid, wait), ns in by.items():
        assert totals[str(tid)][wait] == pytest.approx(ns, rel=1e-6), (tid, wait, totals)
        assert totals[str(tid)]["other"] == pytest.approx(0, abs=1), totals
    # The off-CPU graph holds the same time under the same frames.
    off = page.evaluate(
        "(() => { const g = window.wallflame.graphs.off, t = g.tree, out = {};"
        " for (let i = 0; i < t.n; i++) { const k = t.names[t.nameId[i]];"
        " if (g.value[i] > 0) out[k] = (out[k] || 0) + g.value[i]; } return out; })()")
    assert off["nanosleep"] == pytest.approx(by[(7, "sleep")], rel=1e-6), off
    assert off["pthread_cond_wait"] == pytest.approx(by[(7, "condvar")], rel=1e-6), off
    assert off["poll"] == pytest.approx(by[(8, "poll")], rel=1e-6), off
    cell = '#threads tr[data-tid="7"] [data-k="%s"]'
    assert page.inner_text(cell % "sleep") == f"{by[(7, 'sleep')] / 1e9:.3f} s"
    assert page.inner_text(cell % "other") == "\u00b7"
    got.clean()


def _random_capture(rnd: Any) -> Any:
    """A timeline of 1-3 threads whose blocked spans have random classes, stacks, lengths
    (1 us to 1 s: many strata), periods (0: shown by a stop; 1, 10, 37: sampled) or no stack,
    some cut by the window's edges, with runnable spans between; and the seed profile of a
    thread's whole-window stacks (the snapshots')."""
    from wallflame.profile import Profile, StackKey
    from wallflame.timeline import KINDS, Timeline

    tl = Timeline(t0=S, t1=5 * S, off_source="sched")
    u, rq = KINDS.index("unsampled"), KINDS.index("runnable")
    classes = ["mutex", "condvar", "io", "poll", "sleep"]
    seed = Profile()
    for tid in range(1, rnd.randint(2, 4)):
        name = f"t{tid}"
        seed.meta.threads[tid] = name
        th = tl.thread(tid, 100, name)
        stacks = [tl.stacks.intern(("main", name, f"f{j}")) for j in range(rnd.randint(1, 4))]
        t = rnd.randint(0, S)
        while t < 6 * S:
            dur = int(10 ** rnd.uniform(3, 9))
            if rnd.random() < 0.15:
                th.span(t, dur, rq)
            elif rnd.random() < 0.6:
                th.span(t, dur, u)
            else:
                th.span(t, dur, KINDS.index(rnd.choice(classes)), rnd.choice(stacks),
                        rnd.choice([0, 1, 10, 37]))
            t += dur + rnd.randint(1000, 10**7)
        if rnd.random() < 0.5:
            seed.add(StackKey(("main", name, "snap"), tid, name, 100, OFF, "poll"), 3)
    return tl, seed


def test_the_page_splits_any_range_as_the_command_line_does(browser: Any,  # noqa: F811
                                                             tmp_path: Path) -> None:
    """Random captures and ranges: every thread's blocked time per class on the page (its
    per-thread table and graphs: ``timeline.totals``) is what ``report --from --to`` gives,
    to a nanosecond per part (the page shares in floating point, the command line rounds
    to whole nanoseconds)."""
    import random

    from wallflame.report.timerange import Range

    rnd = random.Random(20261127)
    for case in range(12):
        tl, seed = _random_capture(rnd)
        (tmp_path / f"c{case}").mkdir()
        run, out = _write_page(tmp_path / f"c{case}", tl,
                               restrict(seed, tl, Range(tl.t0, tl.t1)))
        got = load(browser, out)
        for _ in range(3):
            a = rnd.randint(0, 3 * S) // 1000 * 1000
            b = min(4 * S, a + rnd.randint(1, 3 * S)) // 1000 * 1000
            shown = got.page.evaluate("([a, b]) => window.wallflame.timeline.totals(a, b)",
                                      [a, b])
            want = restrict(load_run_dir(run), tl, window_range(tl, a / 1e9, b / 1e9))
            by: dict[tuple[int, str], int] = {}
            for k, w in want.stacks.items():
                if k.state == OFF and k.wait != "runnable":
                    by[(k.tid, k.wait)] = by.get((k.tid, k.wait), 0) + w
            for tid, row in shown.items():
                for wait in ("mutex", "condvar", "io", "poll", "sleep", "other"):
                    mine = row[wait] + (row["unsampled"] if wait == "other" else 0)
                    assert mine == pytest.approx(by.get((int(tid), wait), 0), abs=64), (
                        case, a, b, tid, wait)
        got.clean()
