"""Release sites: futex wakes read from ``perf script`` text, tied to the observed locks by
address, each named by the frame above the unlock machinery."""

from __future__ import annotations

from pathlib import Path

from wallflame.locks.releasesites import attach, read_wakes, release_site
from wallflame.profile import OFF, Profile, StackKey

LOCK = "0x5591fb231328 <g_mutex_queue+0x28>"
RW = "0x7000 <table_lock>"

#: The rest of a sys_enter_futex line, as perf prints it.
TAIL = ", utime: 0x00000000, uaddr2: 0x00000000, val3: 0x00000000"
EV = ": syscalls:sys_enter_futex: uaddr: "
OP = ", op: 0x00000081, val: 0x00000001" + TAIL

SCRIPT = """\
consumer-2 18748 1234.500000{EV}0x5591fb231328{OP}
\tffffffff9a001234 do_syscall_64
\t    7f1c2a4a1e2f __lll_lock_wake
\t    7f1c2a4a5a10 pthread_mutex_unlock@@GLIBC_2.2.5
\t    5591fb0a1234 MutexQueue::pop(Message*, unsigned long, long&, long&)
\t    5591fb0a2234 consumer_loop(int, bool, ConsumerTotals&)

producer 18755 1234.600000{EV}0x5591fb231328{OP}
\t    7f1c2a4a1e2f __lll_lock_wake
\t    7f1c2a4a5a10 pthread_mutex_unlock
\t    5591fb0a3234 std::lock_guard<std::mutex>::~lock_guard()
\t    5591fb0a4234 MutexQueue::push_batch(std::vector<Message, std::allocator<Message> >&)

consumer-3 18749 1234.700000{EV}0x5591fb231400{OP}
\t    7f1c2a4a1e2f pthread_cond_signal
\t    5591fb0a2234 consumer_loop(int, bool, ConsumerTotals&)

w 9 1234.800000{EV}0x700c{OP}
\t    7f1c2a4a1e2f __pthread_rwlock_unlock
\t    5591fb0a2234 update_table
""".replace("{EV}", EV).replace("{OP}", OP)


def test_read_wakes_skips_kernel_frames(tmp_path: Path) -> None:
    p = tmp_path / "releases.script"
    p.write_text(SCRIPT, encoding="utf-8")
    wakes = read_wakes(p)
    assert [(t, hex(a)) for t, a, _ in wakes] == [
        (18748, "0x5591fb231328"), (18755, "0x5591fb231328"), (18749, "0x5591fb231400"),
        (9, "0x700c")]
    assert wakes[0][2][0] == "__lll_lock_wake" and "do_syscall_64" not in wakes[0][2]


def test_release_site_is_above_the_unlock() -> None:
    assert release_site(("__lll_lock_wake", "pthread_mutex_unlock", "MutexQueue::pop",
                         "consumer_loop")) == 2
    assert release_site(("__lll_lock_wake", "pthread_mutex_unlock",
                         "std::lock_guard<std::mutex>::~lock_guard", "MutexQueue::push_batch")) \
        == 3
    assert release_site(("__lll_lock_wake", "lll_mutex_unlock_optimized",
                         "__pthread_mutex_unlock_usercnt", "MutexQueue::pop")) == 3
    assert release_site(("pthread_cond_signal", "consumer_loop")) == -1


def test_attach_by_address(tmp_path: Path) -> None:
    p = tmp_path / "releases.script"
    p.write_text(SCRIPT, encoding="utf-8")
    prof = Profile()
    prof.add(StackKey(("a",), 1, "t", 1, OFF, "mutex", LOCK), 10)
    prof.add(StackKey(("b",), 1, "t", 1, OFF, "rwlock", RW), 10)
    prof.meta.extra["lock_evidence"] = {RW: {"kind": "rwlock:prefer-reader"}}
    attach(prof, p)
    rel = prof.meta.extra["lock_releases"]
    # the condition variable's wake (another address) belongs to no lock
    assert rel[LOCK]["count"] == 2
    assert [r[:2] for r in rel[LOCK]["sites"]] == [["MutexQueue::pop", 1],
                                                   ["MutexQueue::push_batch", 1]]
    assert rel[LOCK]["sites"][0][2] == "consumer_loop;MutexQueue::pop"
    # an rwlock's wake on one of its futex words (base + 12)
    assert rel[RW]["count"] == 1 and rel[RW]["sites"][0][0] == "update_table"
