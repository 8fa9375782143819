"""Wait classification: the rule table, its precedence, user rules, and real stacks."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wallflame.classify import SCAN_DEPTH, classify, default_rules, find_wait, load_rules
from wallflame.errors import InputError
from wallflame.fold import gdb
from wallflame.fold.options import FoldOptions
from wallflame.profile import OFF, WAIT_CLASSES, Profile

FIX = Path(__file__).parent / "fixtures"
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
                    "mutex\tweak\tregex\tMyLock::.*\n"
                    "io\tstrong\tprefix\tDisk::\n")
    rules = load_rules(str(path))
    assert classify((*THREAD, "nap", "nanosleep"), rules=rules) == "poll"
    assert classify((*THREAD, "MyLock::acquire", "spin"), rules=rules) == "mutex"
    # a weak rule nearer the leaf wins over a weak one further up
    assert classify((*THREAD, "MyLock::acquire", "syscall"), rules=rules) == "other"
    assert classify((*THREAD, "Disk::flush"), rules=rules) == "io"
    # the built-in rules are still there
    assert classify((*THREAD, "epoll_wait"), rules=rules) == "poll"


@pytest.mark.parametrize(("line", "message"), [
    ("mutex\tstrong\tname", "4 tab-separated columns"),
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
    for names in (r.strong_names, r.weak_names):
        assert set(names.values()) <= set(WAIT_CLASSES)
    assert not set(r.strong_names) & set(r.weak_names)


def test_real_gdb_dump_of_mix() -> None:
    """The classes of a real dump: three workers on shared_lock, the others asleep."""
    p = Profile()
    gdb.fold(str(FIX / "gdb" / "mix-bt.txt"), FoldOptions(snapshot_interval_ns=1), p)
    classes = p.per_class()
    assert classes == {"on": 1, "mutex": 3, "rwlock": 0, "condvar": 0, "io": 0, "poll": 0,
                       "sleep": 2, "other": 0}
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
