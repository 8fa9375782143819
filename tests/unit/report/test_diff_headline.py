"""The diff's first lines: what grew, shrank and vanished, by class, lock and user function,
in words; kernel and runtime frames never named."""

from __future__ import annotations

from wallflame.profile import OFF, Profile, StackKey
from wallflame.report.diff.compare import compare
from wallflame.report.diff.headline import headline

S = 1_000_000_000
LOCK = "0x55ab8e245328 <g_mutex_queue+0x28>"


def run(stacks: list[tuple[tuple[str, ...], str, str, int]], n: int = 5000) -> Profile:
    """A 10 s run of 4 threads: ``(frames, wait, lock, seconds)`` each, on-CPU when wait is
    empty; ``n`` samples a side, so a change of a tenth of a second per second is beyond the
    noise floor."""
    p = Profile()
    p.meta.unit = "ns"
    p.meta.window_ns = 10 * S
    p.meta.samples["perf"] = n
    p.meta.samples["sched"] = n
    for frames, wait, lock, s in stacks:
        if wait:
            p.add(StackKey(frames, 1, "w-1", 1, OFF, wait, lock), s * S)
        else:
            p.add(StackKey(frames, 1, "w-1"), s * S)
    return p


ROOT = ("clone3", "start_thread", "worker")
KERNEL = ("entry_SYSCALL_64", "do_syscall_64", "__x64_sys_futex", "futex_wait")


def test_a_lock_that_vanished_and_the_code_that_got_faster() -> None:
    before = run([((*ROOT, "Queue::pop", "pthread_mutex_lock", *KERNEL), "mutex", LOCK, 20),
                  ((*ROOT, "hash"), "", "", 10), ((*ROOT, "write", *KERNEL), "", "", 2),
                  ((*ROOT, "nanosleep"), "sleep", "", 8)])
    after = run([((*ROOT, "hash"), "", "", 5), ((*ROOT, "write", *KERNEL), "", "", 2),
                 ((*ROOT, "nanosleep"), "sleep", "", 33)])
    lines = headline(compare(before, after))
    assert lines == [
        "mutex wait vanished (2.00 s/s before)",
        "sleep wait grew 312% (0.80 s/s → 3.30 s/s)",
        "on-CPU time shrank 42% (1.20 s/s → 0.70 s/s)",
        "wait on lock g_mutex_queue+0x28 vanished (2.00 s/s before)",
        "on-CPU time in hash shrank 50% (1.00 s/s → 0.50 s/s)",
    ]
    assert not any(k in line for line in lines for k in (*KERNEL, "clone3", "start_thread"))


def test_no_change_no_statement() -> None:
    same = [((*ROOT, "hash"), "", "", 10), ((*ROOT, "nanosleep"), "sleep", "", 30)]
    assert headline(compare(run(same), run(same))) == []


def test_a_change_within_the_noise_floor_is_not_stated() -> None:
    before = run([((*ROOT, "hash"), "", "", 10)], n=20)
    after = run([((*ROOT, "hash"), "", "", 11)], n=20)
    assert headline(compare(before, after)) == []


def test_a_wait_that_vanished_leads_a_larger_one_that_grew() -> None:
    """The lock-free queue: the mutex wait vanished (2 s/s), and the freed threads wait for a
    CPU more (3 s/s more): the wait that vanished is the change made, and leads."""
    before = run([((*ROOT, "Queue::pop", "pthread_mutex_lock", *KERNEL), "mutex", LOCK, 20),
                  ((*ROOT, "Queue::pop"), "runnable", "", 10), ((*ROOT, "hash"), "", "", 10)])
    after = run([((*ROOT, "Queue::pop"), "runnable", "", 40), ((*ROOT, "hash"), "", "", 10)])
    lines = headline(compare(before, after))
    assert lines[0] == "mutex wait vanished (2.00 s/s before)", lines
    assert lines[1].startswith("waiting for a CPU grew"), lines
