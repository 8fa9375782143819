"""Idle threads: the rules' ``idle`` rows name a wait for work, whatever its wait class; a
thread that mostly waits for work is left out of the findings and the top stacks, and named
once, by role."""

from __future__ import annotations

from pathlib import Path

import pytest

from wallflame.classify import idle_label, idle_thread, load_rules
from wallflame.errors import InputError
from wallflame.profile import OFF, ON, Meta, Profile, StackKey
from wallflame.report.findings import findings, idle_tids, summarize
from wallflame.report.summary import build_summary
from wallflame.report.topstacks import top_rows
from wallflame.threadgroups import display_names

GLIBC_WAIT = ("__pthread_cond_wait_common", "__futex_abstimed_wait_common", "futex_wait_[k]")
POOL = ("clone3", "start_thread", "[libstdc++.so.6]", "tpool::thread_pool_generic::worker_main",
        "tpool::thread_pool_generic::get_task", "tpool::thread_pool_generic::wait_for_tasks",
        "___pthread_cond_clockwait64", *GLIBC_WAIT)
CONN = ("clone3", "start_thread", "[mariadbd]", "handle_one_connection",
        "do_handle_one_connection")


@pytest.mark.parametrize(("frames", "label"), [
    # InnoDB's task pool worker waiting for a task
    (POOL, "task pool"),
    # the manager thread between its rounds
    (("clone3", "start_thread", "[mariadbd]", "handle_manager", "pthread_cond_wait",
      *GLIBC_WAIT), "manager"),
    # a connection thread in the thread cache: its wait called from do_handle_one_connection
    ((*CONN, "___pthread_cond_timedwait64", *GLIBC_WAIT), "thread cache"),
    # ... but a wait deeper in a statement is not (more than 4 named callers below it)
    ((*CONN, "do_command", "dispatch_command", "mysql_execute_command", "lock_tables",
      "MDL_wait::timed_wait", "pthread_cond_timedwait", *GLIBC_WAIT), None),
    # a connection thread's commit wait: not idle
    ((*CONN, "do_command", "dispatch_command", "Protocol::end_statement", "net_flush",
      "net_real_write", "pthread_cond_wait", *GLIBC_WAIT), None),
    # the timer thread (named with debug symbols)
    (("clone3", "start_thread", "timer_handler", "pthread_cond_timedwait", *GLIBC_WAIT), "timer"),
    # the replication deadlock killer between its jobs
    (("clone3", "start_thread", "[mariadbd]", "slave_deadlock_handler", "pthread_cond_wait",
      *GLIBC_WAIT), "background thread"),
    # a distribution's binary: a static thread function's condvar wait, known by its root
    (("clone3", "start_thread", "[mariadbd]", "[mariadbd]", "___pthread_cond_timedwait64",
      *GLIBC_WAIT), "background thread"),
    (("clone3", "start_thread", "[libstdc++.so.6.0.30]", "[mariadbd]", "pthread_cond_wait",
      *GLIBC_WAIT), "background thread"),
    # ... and InnoDB's io_uring thread waiting for completions
    (("clone3", "start_thread", "[libstdc++.so.6.0.30]", "[mariadbd]", "__io_uring_get_cqe",
      "[liburing.so.2.3]", "io_cqring_wait_[k]"), "aio completions"),
    # ... but not a named function's wait, nor another binary's
    (("clone3", "start_thread", "[mariadbd]", "handle_one_connection", "pthread_cond_wait",
      *GLIBC_WAIT), None),
    (("clone3", "start_thread", "[myapp]", "pthread_cond_wait", *GLIBC_WAIT), None),
    # a plain condvar wait
    (("main", "worker", "pthread_cond_wait", *GLIBC_WAIT), None),
])
def test_the_idle_rows_name_waits_for_work(frames: tuple[str, ...], label: str | None) -> None:
    assert idle_label(frames) == label


@pytest.mark.parametrize(("name", "label"), [
    ("iou-wrk-27110", "io_uring worker"),  # the kernel's io_uring workers
    ("iou-sqp-4", "io_uring worker"),
    ("iou-wrk-27110x", None),
    ("mariadbd", None),
])
def test_the_idle_rows_on_thread_names(name: str, label: str | None) -> None:
    assert idle_thread(name) == label


def test_a_user_rules_file_adds_idle_rows(tmp_path: Path) -> None:
    path = tmp_path / "rules.tsv"
    path.write_text("idle\touter\tname\tQueue::wait_for_job\tjob queue\n")
    rules = load_rules(str(path))
    assert idle_label(("main", "Queue::wait_for_job", "pthread_cond_wait"), rules) == "job queue"
    assert idle_label(POOL, rules) == "task pool"  # the built-in rows as well
    # an idle row classifies nothing
    assert rules.frame_class("Queue::wait_for_job") is None


def test_a_user_rules_file_adds_idle_roots(tmp_path: Path) -> None:
    path = tmp_path / "rules.tsv"
    path.write_text("idle\touter\troot\tstart_thread;\\[myapp\\];pthread_cond_wait\tpool\n")
    rules = load_rules(str(path))
    assert idle_label(("start_thread", "[myapp]", "pthread_cond_wait"), rules) == "pool"
    assert idle_label(("main", "start_thread", "[myapp]", "pthread_cond_wait"), rules) is None


@pytest.mark.parametrize(("line", "message"), [
    ("idle\tstrong\tname\tQueue::wait_for_job", "outer"),
    ("idle\touter\troot\t(unclosed", "bad regex"),
    ("idle\touter\troot\tstart_thread\ta;b", "bad label"),
    ("mutex\tstrong\troot\tstart_thread", "match must be"),  # roots are for idle rows only
])
def test_bad_idle_rows(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "rules.tsv"
    path.write_text(line + "\n")
    with pytest.raises(InputError, match=message):
        load_rules(str(path))


S = 10**9


def server() -> Profile:
    """A MariaDB-like server of threads all named ``mariadbd``: three connection threads
    waiting for a CPU, three pool workers waiting for a task, a manager and a listener."""
    p = Profile(meta=Meta(unit="ns", window_ns=10 * S))
    for tid in (10, 11, 12):
        p.add(StackKey((*CONN, "do_command", "dispatch_command"), tid, "mariadbd", 1, ON), 3 * S)
        p.add(StackKey((*CONN, "do_command", "dispatch_command"), tid, "mariadbd", 1, OFF,
                       "runnable"), 7 * S)
    for tid in (20, 21, 22):
        p.add(StackKey(POOL, tid, "mariadbd", 1, OFF, "condvar"), 10 * S)
    p.add(StackKey(("clone3", "start_thread", "[mariadbd]", "handle_manager",
                    "pthread_cond_wait", *GLIBC_WAIT), 30, "mariadbd", 1, OFF, "condvar"), 10 * S)
    p.add(StackKey(("_start", "mysqld_main", "handle_connections_sockets", "poll"), 1,
                   "mariadbd", 1, OFF, "poll"), 10 * S)
    p.add(StackKey(("[ld-linux-x86-64.so.2]", "[mariadbd]", "[unknown]"), 40, "iou-wrk-2", 1,
                   OFF, "other"), 10 * S)
    return p


@pytest.mark.parametrize(("tid", "idle_s", "idle"), [
    (10, None, False),  # a connection thread waiting for a CPU: busy
    (20, 10.0, True),  # a pool worker: its condvar wait is a wait for work
    (30, 10.0, True),  # the manager
    (1, None, True),  # the listener: an idle poll (the poll class, no idle_s of its own)
    (40, 10.0, True),  # the kernel's io_uring worker, by its name
])
def test_the_summary_counts_each_threads_wait_for_work(tid: int, idle_s: float | None,
                                                       idle: bool) -> None:
    s = build_summary(server())
    r = next(r for r in s["threads"] if r["tid"] == tid)
    assert r.get("idle_s") == idle_s
    assert (tid in idle_tids(s["threads"])) == idle


def test_idle_threads_are_left_out_and_named_once_by_role() -> None:
    p = server()
    s = summarize(p)
    found = findings(s, p)
    assert [f.kind for f in found] == ["cpu", "hot", "idle"]
    assert "mariadbd: handle_one_connection ×3" in found[0].text
    idle = found[-1].text
    assert "mariadbd: tpool::thread_pool_generic::worker_main ×3" in idle
    assert "mariadbd: handle_manager" in idle and "iou-wrk-2" in idle and "1 more" in idle
    rows = top_rows(p, 10, idle_tids(s["threads"]), display_names(s["threads"]))
    assert {r.threads for r in rows} == {"mariadbd: handle_one_connection ×3"}


def conn(tid: int, poll: float, runnable: float = 8.0, role: str = "handle_one_connection"
         ) -> dict[str, object]:
    other = 20.0 - poll - runnable
    return {"tid": tid, "name": "mariadbd", "role": role, "on_cpu_s": 0.0, "runnable_s": runnable,
            "off_cpu_s": poll + other, "wait": {"poll": poll, "condvar": other}}


@pytest.mark.parametrize(("rows", "idle"), [
    # connection threads waiting for a CPU: one of them waited on its client for 51% of its
    # time (a light collect's few snapshots), the group for 30%: none is idle
    ([conn(1, 10.2), conn(2, 5.0), conn(3, 3.0)], set()),
    # ... but a thread of the group that only waited for work is (the thread cache)
    ([conn(1, 10.2), conn(2, 5.0), conn(3, 3.0), conn(4, 19.0, runnable=0.0)], {4}),
    # a group that mostly waited for work: all of it, a busier member too
    ([conn(1, 15.0, 1.0), conn(2, 9.0, 1.0)], {1, 2}),
    # a thread alone: its own share
    ([conn(1, 10.2, role="signal_hand")], {1}),
    ([conn(1, 9.8, role="signal_hand")], set()),
])
def test_idle_is_decided_per_group(rows: list[dict[str, object]], idle: set[int]) -> None:
    assert idle_tids(rows) == idle
