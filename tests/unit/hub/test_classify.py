"""Wait classification: the rule table, its precedence, user rules, and real stacks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import FIXTURES
from hypothesis import given
from hypothesis import strategies as st

from wallflame.classify import (
    SCAN_DEPTH,
    Rules,
    _Prefix,
    classify,
    default_rules,
    find_rule,
    find_wait,
    load_rules,
    set_label_rules,
    wait_label,
)
from wallflame.errors import InputError
from wallflame.fold import gdb
from wallflame.fold.options import FoldOptions
from wallflame.profile import BLOCKED_CLASSES, OFF, WAIT_CLASSES, Profile

FIX = FIXTURES
THREAD = ("clone3", "start_thread", "worker_main", "worker_loop")


@pytest.mark.parametrize(("leaf", "cls"), [
    # glibc and libstdc++, as gdb / eu-stack / perf name them after normalization
    (("pthread_mutex_lock", "lll_mutex_lock_optimized", "__lll_lock_wait", "futex_wait"),
     "mutex"),
    (("std::mutex::lock", "__gthread_mutex_lock", "pthread_mutex_lock"), "mutex"),
    (("pthread_rwlock_rdlock", "__pthread_rwlock_rdlock_full64", "futex_wait"), "rwlock"),
    (("std::shared_mutex::lock_shared",), "rwlock"),
    (("pthread_cond_wait", "__pthread_cond_wait_common", "__futex_abstimed_wait_common"),
     "condvar"),
    (("std::condition_variable::wait", "pthread_cond_wait"), "condvar"),
    (("moodycamel::LightweightSemaphore::waitWithPartialSpinning",), "condvar"),
    (("sem_wait", "do_futex_wait"), "condvar"),
    (("nap", "nanosleep", "clock_nanosleep"), "sleep"),
    (("std::this_thread::sleep_for<long, std::ratio<1l, 1000l> >", "nanosleep"), "sleep"),
    (("Server::loop", "epoll_wait"), "poll"),
    (("poll",), "poll"),
    (("Conn::read", "read"), "io"),
    (("accept4",), "io"),
    (("io_getevents",), "io"),
    (("pthread_join", "__futex_abstimed_wait_common"), "other"),
    # kernel frames (perf sched / bcc), suffixed or not
    (("syscall", "-", "entry_SYSCALL_64_after_hwframe", "do_syscall_64", "__x64_sys_futex",
      "do_futex", "futex_wait", "futex_wait_queue", "schedule"), "other"),
    (("read", "ksys_read", "vfs_read", "pipe_read_[k]", "schedule_[k]"), "io"),
    (("do_epoll_wait_[k]", "ep_poll_[k]", "schedule_hrtimeout_range_[k]"), "poll"),
    # Go runtime
    (("main.worker", "sync.(*Mutex).Lock", "sync.(*Mutex).lockSlow",
      "sync.runtime_SemacquireMutex", "runtime.semacquire1", "runtime.gopark"), "mutex"),
    (("main.consume", "runtime.chanrecv1", "runtime.chanrecv", "runtime.gopark"), "condvar"),
    (("runtime.mstart", "runtime.schedule", "runtime.findRunnable", "runtime.netpoll",
      "runtime.epollwait"), "poll"),
    (("time.Sleep", "runtime.timeSleep"), "sleep"),
    # raw names from folded files still match
    (("__GI___clock_nanosleep",), "sleep"),
    (("pthread_cond_wait@@GLIBC_2.3.2",), "condvar"),
    (("__libc_read",), "io"),
])
def test_builtin_rules(leaf: tuple[str, ...], cls: str) -> None:
    assert classify(THREAD + leaf) == cls


def test_strong_rule_beats_a_weak_one_nearer_the_leaf() -> None:
    frames = (*THREAD, "pthread_mutex_lock", "__lll_lock_wait", "syscall", "futex_wait")
    assert find_wait(frames) == "mutex"
    assert classify((*THREAD, "syscall", "futex_wait")) == "other"  # only weak rules


def test_nearest_strong_rule_wins() -> None:
    # a condvar wait re-acquiring its mutex is a mutex wait at that instant
    frames = (*THREAD, "pthread_cond_wait", "__pthread_cond_wait_common",
              "__pthread_mutex_cond_lock", "__lll_lock_wait", "futex_wait")
    assert classify(frames) == "mutex"


def test_kernel_state() -> None:
    assert classify((*THREAD, "compute"), "D") == "io"
    assert classify((*THREAD, "syscall", "futex_wait"), "D") == "io"
    assert classify((*THREAD, "compute"), "S") == "other"
    assert classify((*THREAD, "nanosleep"), "D") == "sleep"


def test_running_stack_has_no_rule() -> None:
    assert find_wait((*THREAD, "spin_work", "mix_hash")) is None
    assert find_wait(()) is None
    assert classify(()) == "other"


def test_only_frames_near_the_leaf_count() -> None:
    deep = ("epoll_wait", *(f"f{i}" for i in range(SCAN_DEPTH)))
    assert find_wait(deep) is None
    near = ("epoll_wait", *(f"f{i}" for i in range(SCAN_DEPTH - 1)))
    assert find_wait(near) == "poll"


def test_ten_thousand_frames() -> None:
    frames = (*(f"f{i}" for i in range(10_000)), "read")
    assert classify(frames) == "io"


def test_user_rules_come_first(tmp_path: Path) -> None:
    path = tmp_path / "rules.tsv"
    path.write_text("# my rules\r\n"
                    "poll\tstrong\tname\tnanosleep\r\n"
                    "mutex\tweak\tregex\tMyGate::.*\n"
                    "io\tstrong\tprefix\tDisk::\n")
    rules = load_rules(str(path))
    assert classify((*THREAD, "nap", "nanosleep"), rules=rules) == "poll"
    assert classify((*THREAD, "MyGate::acquire", "spin"), rules=rules) == "mutex"
    # a weak rule nearer the leaf wins over a weak one further up
    assert classify((*THREAD, "MyGate::acquire", "syscall"), rules=rules) == "other"
    assert classify((*THREAD, "Disk::flush"), rules=rules) == "io"
    # the built-in rules are still there
    assert classify((*THREAD, "epoll_wait"), rules=rules) == "poll"


@pytest.mark.parametrize(("line", "message"), [
    ("mutex\tstrong\tname", "4 to 6 tab-separated columns"),
    ("mutex\tstrong\tname\tx\tlabel\tunder\textra", "4 to 6 tab-separated columns"),
    ("mutex\tstrong\tname\tx\tbad\x1b[label", "bad label"),
    ("mutex\tstrong\tname\tx\tok\t(", "bad regex"),
    ("waiting\tstrong\tname\tx", "unknown wait class"),
    ("mutex\tmaybe\tname\tx", "strength"),
    ("mutex\tstrong\tglob\tx", "match must be"),
    ("mutex\tstrong\tregex\t(", "bad regex"),
])
def test_bad_user_rules_are_clean_errors(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text("# ok\n" + line + "\n")
    with pytest.raises(InputError) as e:
        load_rules(str(path))
    assert message in e.value.format_message() and f"{path}:2" in e.value.format_message()


def test_missing_rules_file(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        load_rules(str(tmp_path / "absent.tsv"))


def test_builtin_table_is_consistent() -> None:
    r = default_rules()
    rules = [x for xs in r.names.values() for x in xs] + [x for _, x in r.patterns]
    # its expressions are compiled when first needed: each one must compile
    for rx in [rx for rx, _ in r.patterns] + [x.under for x in rules if x.under is not None]:
        re.compile(rx.pattern)
    assert {x.cls for x in rules} <= set(BLOCKED_CLASSES)
    assert {x.cls for x in rules} == set(BLOCKED_CLASSES)
    # a frame named by a weak rule is never also named by a stronger one without context
    for name, xs in r.names.items():
        plain = [x for x in xs if x.under is None]
        assert len({x.strength for x in plain}) <= 1, name


def test_real_gdb_dump_of_mix() -> None:
    """The classes of a real dump: three workers on shared_lock, the others asleep."""
    p = Profile()
    gdb.fold(str(FIX / "gdb" / "mix-bt.txt"), FoldOptions(snapshot_interval_ns=1), p)
    classes = p.per_class()
    assert classes == {**dict.fromkeys(("on", *WAIT_CLASSES), 0), "on": 1, "mutex": 3, "sleep": 2}
    assert all(k.lock.endswith("<shared_lock>") for k in p.stacks if k.wait == "mutex")


def test_real_pt_pmp_log_of_mix() -> None:
    p = Profile()
    gdb.fold(str(FIX / "gdb" / "mix-ptpmp-raw.txt"), FoldOptions(), p)
    off = {k.wait for k in p.stacks if k.state == OFF}
    assert off == {"mutex", "condvar", "sleep"}
    cond = [k for k in p.stacks if k.wait == "condvar"]
    assert all("wait_for_tick" in k.frames for k in cond)
    sleep = [k for k in p.stacks if k.wait == "sleep"]
    assert all("nap" in k.frames for k in sleep)


@given(st.lists(st.text(max_size=30), max_size=80), st.sampled_from(["", "R", "S", "D", "Z"]))
def test_total(frames: list[str], kstate: str) -> None:
    assert classify(frames, kstate) in WAIT_CLASSES


# ---- outer rules, context (under) and sub-labels ----


def test_outer_rule_decides_over_a_strong_one_nearer_the_leaf() -> None:
    # PostgreSQL's heavyweight lock waits on its latch, in epoll_wait (a strong poll rule)
    frames = (*THREAD, "LockAcquireExtended", "ProcSleep", "WaitLatch", "WaitEventSetWait",
              "epoll_wait", "entry_SYSCALL_64_after_hwframe", "do_epoll_wait_[k]", "ep_poll_[k]")
    assert find_rule(frames) == ("lock", "ProcSleep")
    # the nearest outer rule wins: the LWLock taken inside ProcSleep
    inner = (*THREAD, "ProcSleep", "LWLockAcquire", "PGSemaphoreLock", "sem_wait")
    assert find_rule(inner) == ("rwlock", "LWLock LockManager")
    # a thread stopped by a tracer inside ProcSleep is not waiting for the lock
    stopped = (*frames[:-2], "get_signal", "ptrace_stop", "schedule")
    assert classify(stopped) == "other"


def test_under_looks_at_named_callers_only() -> None:
    wal = ("main", "PostgresMain", "CommitTransactionCommand", "XLogFlush")
    assert find_rule((*wal, "[postgres]", "[postgres]", "fdatasync")) == ("io", "WAL flush")
    assert find_rule((*wal, "[unknown]", "LWLockAcquireOrWait", "PGSemaphoreLock",
                      "sem_wait")) == ("rwlock", "LWLock WALWrite")
    # beyond four named callers the context no longer counts
    far = (*wal, "a", "b", "c", "d", "fdatasync")
    assert find_rule(far) == ("io", "")
    assert find_rule(("main", "LWLockAcquire", "PGSemaphoreLock")) == ("rwlock", "LWLock")


def test_label_comes_from_a_rule_of_the_same_class_further_up() -> None:
    read = ("PostgresMain", "pq_getbyte", "[postgres]", "secure_read", "WaitEventSetWait",
            "epoll_wait", "do_epoll_wait_[k]")
    assert find_rule(read) == ("poll", "client read")
    idle = ("WalWriterMain", "WaitLatch", "WaitEventSetWait", "epoll_wait")
    assert find_rule(idle) == ("poll", "latch")
    # a labelled rule of another class does not lend its label
    assert find_rule(("secure_read", "nanosleep")) == ("sleep", "")


def test_bare_futex_syscall_under_a_lock_function() -> None:
    assert find_rule((*THREAD, "Store::lock_rows", "syscall", "futex_wait_[k]")) == \
        ("mutex", "futex lock")
    assert find_rule((*THREAD, "SpinMutex::wait", "syscall")) == ("mutex", "futex lock")
    assert find_rule((*THREAD, "RWLatch::rd_lock", "syscall")) == ("rwlock", "futex rwlock")
    # "block" and "clock" are not locks; an unnamed caller names nothing
    assert classify((*THREAD, "BlockQueue::pop", "syscall")) == "other"
    assert classify((*THREAD, "clock_tick", "syscall")) == "other"
    assert classify((*THREAD, "[mariadbd]", "syscall")) == "other"


def test_server_rules_with_symbols() -> None:
    """Names as MariaDB's sources give them (a build with debug symbols)."""
    sql = (*THREAD, "do_command", "mysql_update", "handler::ha_update_row",
           "ha_innobase::update_row", "row_update_for_mysql")
    assert find_rule((*sql, "lock_wait", "pthread_cond_timedwait",
                      "__pthread_cond_wait_common")) == ("lock", "InnoDB row lock")
    assert find_rule((*sql, "btr_cur_t::search_leaf", "ssux_lock_impl<true>::wr_wait",
                      "srw_mutex_impl<true>::wait", "syscall")) == ("rwlock", "srw_lock")
    assert find_rule((*sql, "ssux_lock_impl<true>::rd_wait", "syscall")) == \
        ("rwlock", "ssux_lock")
    assert find_rule((*THREAD, "ha_commit_trans", "innobase_commit", "log_write_up_to",
                      "group_commit_lock::acquire", "syscall")) == \
        ("condvar", "commit (redo flush)")


def test_wait_label_of_a_classified_stack() -> None:
    frames = (*THREAD, "ProcSleep", "WaitLatch", "epoll_wait")
    assert wait_label(frames, "lock") == "ProcSleep"
    # a stack classified otherwise (a user's rule, the kernel state) has no label
    assert wait_label(frames, "io") == ""
    assert wait_label((*THREAD, "compute"), "other") == ""


def test_user_rule_with_label_and_context(tmp_path: Path) -> None:
    path = tmp_path / "rules.tsv"
    path.write_text("lock\touter\tprefix\tRowStore::wait\trow lock\n"
                    "io\tstrong\tname\tfsync\tjournal\tJournal::\n"
                    "poll\tstrong\tname\tIdle::park\t-\n")
    rules = load_rules(str(path))
    assert find_rule((*THREAD, "RowStore::wait_row", "pthread_cond_wait"), rules) == \
        ("lock", "row lock")
    assert find_rule((*THREAD, "Journal::commit", "fsync"), rules) == ("io", "journal")
    assert find_rule((*THREAD, "Table::flush", "fsync"), rules) == ("io", "")
    assert find_rule((*THREAD, "Idle::park"), rules) == ("poll", "")
    set_label_rules(rules)
    try:
        assert wait_label((*THREAD, "RowStore::wait", "futex_wait"), "lock") == "row lock"
    finally:
        set_label_rules(None)
    assert wait_label((*THREAD, "RowStore::wait", "futex_wait"), "lock") == ""


@given(st.one_of(st.sampled_from(["pthread_cond_wait", "__pthread_cond_timedwait", "srw_lock",
                                  "vio_read_buff", "epoll_wait", "main", "__lll_lock_wait",
                                  "rw_lock_x_lock_func", "ssux_lock_impl<true>::rd_wait"]),
                 st.text(max_size=30)))
def test_the_joined_patterns_match_what_each_pattern_matches(name: str) -> None:
    """Names are screened by every pattern joined in one expression before each is tried:
    the rules a name gets are those the patterns one by one give it."""
    r = default_rules()
    one_by_one = [rule for rx, rule in r.patterns if rx.match(name)]
    got = [rule for rule in r._name_rules(name) if rule not in r.names.get(name, [])]
    assert sorted(got, key=lambda x: x.order) == sorted(one_by_one, key=lambda x: x.order)


NAMES = st.one_of(
    st.sampled_from(["pthread_cond_wait", "__pthread_cond_timedwait", "srw_lock", "main",
                     "__GI___pthread_mutex_lock", "read@@GLIBC_2.2.5", "futex_wait_[k]",
                     "epoll_wait+0x1f", "__lll_lock_wait_[i]", "[unknown]", "operator[]",
                     "vio_read_buff", "std::mutex::lock()", "__libc_read", "ProcSleep",
                     "rw_lock_x_lock_func", "ssux_lock_impl<true>::rd_wait", "", " "]),
    st.text(max_size=30))


@given(st.sets(NAMES, max_size=25), st.booleans())
def test_named_is_the_names_frame_rules_gives_rules(names: set[str], joinable: bool) -> None:
    """``Rules.named`` (every name at once) finds the names ``frame_rules`` (one name at a
    time) gives rules for: exact names, patterns, marked names and raw names under their
    collector-independent form, with the patterns joined and, when they cannot be, one by
    one."""
    r = load_rules()
    if not joinable:
        r.add_line("mutex\tstrong\tregex\t(?P<x>a)lock", "t:1")
        r.add_line("condvar\tstrong\tregex\t(?P<x>b)wait", "t:2")
        names |= {"alock", "bwait_[k]"}
    assert r.named(names) == {n for n in names if r.frame_rules(n)}
    assert r.named(iter(names)) == r.named(names)
    assert (r._joined() is None) is not joinable


PREFIXES = [str(rx) for rx, _ in default_rules().patterns if isinstance(rx, _Prefix)]


@given(st.one_of(st.sampled_from(PREFIXES), st.text(max_size=8)),
       st.one_of(st.sampled_from(PREFIXES), st.text(max_size=12)), st.text(max_size=6))
def test_a_prefix_matches_as_its_escaped_expression_did(prefix: str, name: str,
                                                        tail: str) -> None:
    """A ``prefix`` rule matched by ``str.startswith`` matches the names the expression of the
    escaped prefix matched, metacharacters included (``sync.(*Mutex).``), and its ``pattern``
    is that expression."""
    rx = _Prefix(prefix)
    for n in (name, prefix + tail, name + prefix):
        assert rx.match(n) == (re.compile(re.escape(prefix)).match(n) is not None)
    assert rx.pattern == re.escape(prefix)


def test_rules_are_numbered_in_file_order() -> None:
    """Each rule's ``order`` is its place among the rules read (user rules first)."""
    r = load_rules()
    rules = [x for xs in r.names.values() for x in xs] + [x for _, x in r.patterns]
    assert sorted(x.order for x in rules) == list(range(len(rules)))
    assert len(PREFIXES) == len(r._prefixes) > 0


def test_patterns_that_cannot_be_joined_are_tried_one_by_one() -> None:
    r = Rules()
    r.add_line("mutex\tstrong\tregex\t(?P<x>a)lock", "t:1")
    r.add_line("condvar\tstrong\tregex\t(?P<x>b)wait", "t:2")
    assert [x.cls for x in r._name_rules("bwait")] == ["condvar"]
    assert [x.cls for x in r._name_rules("alock")] == ["mutex"]
