"""The ``lock`` wait class (a database's row, table or metadata lock) through the model, the
summary, the text report, the diff and the check."""

from __future__ import annotations

import io
from pathlib import Path

from click.testing import CliRunner

from wallflame.classify import set_label_rules
from wallflame.cli import cli
from wallflame.profile import OFF, WAIT_CLASSES, Profile, StackKey
from wallflame.report.diff.compare import compare
from wallflame.report.gate.check import FAIL, PASS, judge_profiles
from wallflame.report.gate.thresholds import Thresholds
from wallflame.report.summary import build_summary
from wallflame.report.text import write_text
from wallflame.report.tree import CLASSES, build_tree

MS = 1_000_000
BACKEND = ("main", "PostgresMain", "LockAcquireExtended", "ProcSleep", "WaitLatch",
           "WaitEventSetWait", "epoll_wait")


def backend(lock_ms: int) -> Profile:
    p = Profile()
    p.meta.window_ns = 5_000 * MS
    p.meta.rates = {"perf_hz": 999.0}
    p.meta.samples = {"perf": 5000, "snapshots": 100}
    for tid in (11, 12):
        p.add(StackKey(("main", "PostgresMain", "exec_simple_query"), tid, "postgres"),
              1_000 * MS)
        p.add(StackKey(BACKEND, tid, "postgres", 0, OFF, "lock"), lock_ms * MS)
        p.add(StackKey(("main", "PostgresMain", "pq_getbyte", "secure_read", "WaitEventSetWait",
                        "epoll_wait"), tid, "postgres", 0, OFF, "poll"),
              (4_000 - lock_ms) * MS // 4)
    return p


def test_lock_is_a_wait_class_with_its_own_column() -> None:
    assert WAIT_CLASSES.index("lock") == WAIT_CLASSES.index("rwlock") + 1
    p = backend(2_000)
    assert p.per_class()["lock"] == 4_000 * MS
    s = build_summary(p)
    assert s["totals"]["wait"]["lock"] == 4.0
    assert s["wait_labels"] == [{"class": "lock", "label": "ProcSleep", "s": 4.0},
                                {"class": "poll", "label": "client read", "s": 1.0}]
    tree = build_tree(p)
    assert "[lock: ProcSleep]" in tree.names
    lock_nodes = [i for i, sl in enumerate(tree.selfs) if sl and sl[CLASSES.index("lock")]]
    assert [tree.names[tree.name[i]] for i in lock_nodes] == ["[lock: ProcSleep]"] * 2


def test_text_report_shows_the_rule_and_the_users_frames_root_first() -> None:
    out = io.StringIO()
    write_text(backend(2_000), out)
    text = out.getvalue()
    head = next(ln for ln in text.splitlines() if ln.startswith("thread "))
    assert head.split() == ["thread", "tid", "on-CPU", "blocked", "lock", "poll", "runnable",
                            "cover"]
    assert "  lock: ProcSleep                               4.000  80.0% of off-CPU\n" in text
    # the two backends' identical stacks are one row (threads grouped by name)
    assert (" 57.1%     4.000s  lock: ProcSleep  postgres ×2\n"
            "    main > PostgresMain > LockAcquireExtended > ProcSleep > WaitLatch > "
            "WaitEventSetWait >\n"
            "    epoll_wait > [lock: ProcSleep]\n") in text
    assert all(len(line) <= 100 for line in text.splitlines())


def test_diff_and_check_see_lock_waits_grow() -> None:
    before, after = backend(500), backend(2_500)
    changes = {c.name: c for c in compare(before, after).class_changes()}
    assert changes["lock"].delta > 0 and changes["poll"].delta < 0
    t = Thresholds()
    t.set("wait_classes", ["lock"], "test")
    v = judge_profiles(before, after, t)
    assert {r.name: r.status for r in v.results}["wait_lock"] == FAIL
    same = judge_profiles(before, backend(500), t)
    assert {r.name: r.status for r in same.results}["wait_lock"] == PASS


def test_report_rules_option_classifies_and_labels(tmp_path: Path) -> None:
    capture = tmp_path / "offcpu.folded"
    capture.write_text("svc;start_thread;RowStore::wait_row;pthread_cond_wait;-;"
                       "entry_SYSCALL_64_after_hwframe;do_syscall_64;futex_wait;schedule 3000000\n"
                       "svc;start_thread;serve;epoll_wait;-;do_epoll_wait;schedule 1000000\n")
    rules = tmp_path / "rules.tsv"
    rules.write_text("lock\touter\tprefix\tRowStore::wait\trow lock\n")
    out = tmp_path / "out.txt"
    try:
        r = CliRunner().invoke(cli, ["report", str(capture), "--unit", "us", "--rules",
                                     str(rules), "-o", str(out)])
        assert r.exit_code == 0, r.output
        text = out.read_text()
        assert "  lock: row lock " in text and "[kernel 4: lock: row lock]" in text
        r = CliRunner().invoke(cli, ["report", str(capture), "--unit", "us", "-o", str(out)])
        assert r.exit_code == 0, r.output
        assert "row lock" not in out.read_text() and "condvar" in out.read_text()
    finally:
        set_label_rules(None)


def test_html_page_names_the_rule_and_the_tracer_stops() -> None:
    from wallflame import stops
    from wallflame.report.html import render_html

    p = backend(2_000)
    stopped = ("main", "PostgresMain", "LockAcquireExtended", "ProcSleep", "WaitLatch",
               "epoll_wait", "exit_to_user_mode_loop", "get_signal", "ptrace_stop", "schedule")
    p.add(StackKey(stopped, 11, "postgres", 0, OFF, "other"), 5 * MS)
    p.meta.extra["pause"] = {"snapshots": 3, "median_ms": 0.1, "max_ms": 0.2, "total_ms": 0.3}
    stops.separate(p, "wallflame")
    page = render_html(p)
    assert 'class="c-lock"' in page  # the legend's swatch
    assert "lock: ProcSleep" in page  # the top stacks table and the flame tree's names
    assert "<dt>Stopped by wallflame</dt><dd>5.00 ms over 1 threads in ptrace stops" in page
    assert "the snapshot loop measured 300.0 µs of pauses" in page
