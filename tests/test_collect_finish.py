"""finish: exact scheduler waits attributed to locks and holders from /proc samples."""

from __future__ import annotations

from wallflame.finish import LockSamples, split_locks
from wallflame.profile import OFF, HolderKey, Profile, StackKey

BASE = ("clone3", "start_thread", "worker_main", "worker_loop")
SHARED = (*BASE, "pthread_mutex_lock", "__lll_lock_wait", "schedule")
RELOCK = (*BASE, "wait_for_tick", "pthread_cond_wait", "__pthread_mutex_cond_lock",
          "__lll_lock_wait", "schedule")
TICK_LOCK = (*BASE, "wait_for_tick", "pthread_mutex_lock", "__lll_lock_wait", "schedule")
LOCK = "0x1000 <shared_lock>"


def _sched() -> Profile:
    p = Profile()
    for frames, w in ((SHARED, 600), (RELOCK, 300), (TICK_LOCK, 100)):
        p.add(StackKey(frames, 11, "w-1", 10, OFF, "mutex"), w)
    p.meta.threads = {11: "w-1", 12: "w-2", 13: "w-3"}
    return p


def _samples(sites: bool) -> LockSamples:
    s = LockSamples()
    for owner, n in ((12, 3), (13, 1)):
        for _ in range(n):
            s.add({"tid": 11, "lock": LOCK, "owner": owner,
                   **({"sites": ["pthread_mutex_lock@@GLIBC_2.2.5", "worker_loop"]}
                      if sites else {})})
    s.holders[HolderKey(LOCK, 12, "w-2", (*BASE, "critical_section"))] = 2
    return s


def test_waits_split_by_owner_and_matched_by_call_site() -> None:
    out = split_locks(_sched(), _samples(sites=True))
    by = {(k.frames, k.lock, k.holder): w for k, w in out.stacks.items()}
    # The wait at worker_loop -> pthread_mutex_lock is shared_lock's, split 3:1 by owner.
    assert by[(SHARED, LOCK, 12)] == 450 and by[(SHARED, LOCK, 13)] == 150
    # The condition variable's relock and the lock taken in wait_for_tick are other mutexes.
    assert by[(RELOCK, "", 0)] == 300
    assert by[(TICK_LOCK, "", 0)] == 100
    assert out.total() == 1000
    holders = {(h.tid, h.frames): w for h, w in out.holders.items()}
    assert holders[(12, (*BASE, "critical_section"))] == 450  # stack from a dump
    assert holders[(13, ())] == 150  # never caught in a dump: no stack


def test_without_call_sites_the_thread_proportions_are_used() -> None:
    out = split_locks(_sched(), _samples(sites=False))
    locked = sum(w for k, w in out.stacks.items() if k.lock == LOCK)
    assert locked == 1000
    assert out.total() == 1000
