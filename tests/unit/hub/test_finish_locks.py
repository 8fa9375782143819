"""finish: exact scheduler waits attributed to the locks observed for that thread at that call
site, and holders only from confirmed probes, with the counts behind them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from wallflame.fold.locks import LockEvidence, attribute, read_evidence
from wallflame.locks.lockshare import share_interval
from wallflame.profile import OFF, Profile, StackKey
from wallflame.report.summary import build_summary

BASE = ("clone3", "start_thread", "worker_main", "worker_loop")
SHARED = (*BASE, "pthread_mutex_lock", "__lll_lock_wait", "schedule")
RELOCK = (*BASE, "wait_for_tick", "pthread_cond_wait", "__pthread_mutex_cond_lock",
          "__lll_lock_wait", "schedule")
TICK_LOCK = (*BASE, "wait_for_tick", "pthread_mutex_lock", "__lll_lock_wait", "schedule")
LOCK = "0x1000 <shared_lock>"
OTHER = "0x2000"
HELD = ["#0  0x0000000000401010 spin_under_lock", "#1  0x0000000000401020 worker_loop",
        "#2  0x0000000000401030 worker_main"]


def _sched() -> Profile:
    p = Profile()
    for tid, frames, w in ((11, SHARED, 600), (11, RELOCK, 300), (11, TICK_LOCK, 100),
                           (14, SHARED, 500)):
        p.add(StackKey(frames, tid, f"w-{tid - 10}", 10, OFF, "mutex"), w)
    p.meta.threads = {11: "w-1", 12: "w-2", 13: "w-3", 14: "w-4"}
    return p


def _rec(tid: int, lock: str, owner: int, status: str, frames: list[str] | None = None,
         sites: list[str] | None = None) -> dict[str, Any]:
    holder: dict[str, Any] = {"tid": owner, "status": status, "stop_ms": 0.1}
    if frames:
        holder["frames"] = frames
    return {"tid": tid, "lock": lock, "owner": owner, "kind": "mutex:normal",
            "sites": sites if sites is not None else ["pthread_mutex_lock@@GLIBC_2.2.5",
                                                      "worker_loop"],
            "holder": holder}


def _evidence(tmp_path: Path, recs: list[dict[str, Any]]) -> LockEvidence:
    log = tmp_path / "owners.log"
    log.write_text("".join(json.dumps(r) + "\n" for r in recs) + "not json\n",
                   encoding="utf-8")
    return read_evidence(log)


def test_only_waits_observed_at_that_call_site_go_to_the_lock(tmp_path: Path) -> None:
    recs = [_rec(11, LOCK, 12, "confirmed", HELD)] * 3 + [_rec(11, LOCK, 13, "moved")]
    out = attribute(_sched(), _evidence(tmp_path, recs))
    by = {(k.tid, k.frames, k.lock): w for k, w in out.stacks.items()}
    assert by[(11, SHARED, LOCK)] == 600
    # The condition variable's relock and the lock taken in wait_for_tick: other call sites.
    assert by[(11, RELOCK, "")] == 300 and by[(11, TICK_LOCK, "")] == 100
    # Thread 14 waits at the same call site but was never observed on the lock.
    assert by[(14, SHARED, "")] == 500
    assert out.total() == 1500
    assert all(k.holder == 0 for k in out.stacks)
    # Holders: 3 of 4 observations confirmed in spin_under_lock; the moved one is not caught.
    (h, w), = out.holders.items()
    assert (h.lock, h.tid, h.frames[-1], w) == (LOCK, 12, "spin_under_lock", 450)
    ev = out.meta.extra["lock_evidence"][LOCK]
    assert (ev["observations"], ev["confirmed"], ev["not_caught"]) == (4, 3, {"moved": 1})


def test_a_thread_seen_on_two_locks_at_one_site_is_split_by_observations(
        tmp_path: Path) -> None:
    recs = [_rec(11, LOCK, 12, "moved")] * 3 + [_rec(11, OTHER, 13, "released")]
    out = attribute(_sched(), _evidence(tmp_path, recs))
    by = {(k.tid, k.frames, k.lock): w for k, w in out.stacks.items()}
    assert by[(11, SHARED, LOCK)] == 450 and by[(11, SHARED, OTHER)] == 150
    assert not out.holders  # nothing confirmed: no holder stack at all


def test_summary_counts_and_minimum(tmp_path: Path) -> None:
    recs = [_rec(11, LOCK, 12, "confirmed", HELD)] * 3 + [_rec(11, LOCK, 13, "moved")]
    out = attribute(_sched(), _evidence(tmp_path, recs))
    s = build_summary(out)
    (lock,) = s["locks"]
    assert lock["lock"] == LOCK and lock["observations"] == 4
    assert [w["tid"] for w in lock["waiters"]] == [11]
    (h,) = lock["holders"]
    # 3 observations are fewer than the minimum: a count, no percentage
    assert h["count"] == 3 and h["of"] == 4 and "share" not in h
    assert lock["held_confirmed"] == {"count": 3, "of": 4}
    assert lock["holder_not_caught"]["reasons"] == {
        "lock passed to another thread before the owner stopped": 1}
    sites = {u["call_site"] for u in s["unidentified_lock_waits"]}
    assert sites == {"worker_loop", "wait_for_tick"}
    # enough observations: a percentage with its interval
    many = [_rec(11, LOCK, 12, "confirmed", HELD)] * 30 + [_rec(11, LOCK, 13, "moved")] * 10
    (lock,) = build_summary(attribute(_sched(), _evidence(tmp_path, many)))["locks"]
    assert lock["held_confirmed"]["share"] == 0.75
    assert lock["held_confirmed"]["low"] < 0.75 < lock["held_confirmed"]["high"]


def test_share_interval() -> None:
    lo, hi = share_interval(30, 40)
    assert 0.59 < lo < 0.61 and 0.85 < hi < 0.87
    assert share_interval(0, 0) == (0.0, 1.0)
    assert share_interval(5, 5)[1] == 1.0


def test_a_site_matches_where_perf_repeats_a_function_around_its_inlined_calls(
        tmp_path: Path) -> None:
    """perf names a frame with inlined calls by its function before and after them: the
    caller is next to the function's second place only.  A stack scan that did not name the
    libc function (its symbols not read yet) gives the site (pop, consumer_loop)."""
    stack = ("clone3", "start_thread", "consumer_loop", "MutexQueue::pop", "std::mutex::lock",
             "MutexQueue::pop", "pthread_mutex_lock", "__lll_lock_wait", "schedule")
    p = Profile()
    p.add(StackKey(stack, 11, "c-1", 10, OFF, "mutex"), 700)
    other = ("clone3", "start_thread", "producer_loop", "MutexQueue::pop", "std::mutex::lock",
             "MutexQueue::pop", "pthread_mutex_lock", "__lll_lock_wait", "schedule")
    p.add(StackKey(other, 11, "c-1", 10, OFF, "mutex"), 300)
    site = ["MutexQueue::pop(Message*, unsigned long, long&, long&)",
            "consumer_loop(int, bool, ConsumerTotals&)"]
    out = attribute(p, _evidence(tmp_path, [_rec(11, LOCK, 12, "moved", sites=site)]))
    by = {(k.frames, k.lock): w for k, w in out.stacks.items()}
    assert by[(stack, LOCK)] == 700
    assert by[(other, "")] == 300  # pop called from elsewhere: not this site
