"""Lock holders, live: a holder's stack is reported only when it was taken while the thread held
the lock, so the holder time lands inside the critical section.

``samples/critsec``: one mutex whose critical section is a spin in ``spin_under_lock`` or a
sleep in ``sleep_under_lock``; the workers' other work (``outside_work``, ``outside_sleep``)
never holds it.  ``samples/queue``: the queue mutex is never held in ``process_message`` or
``deliver_message``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from live.test_samples_e2e_live import collect
from wallflame.profile import HolderKey

pytestmark = [pytest.mark.live, pytest.mark.usefixtures("live")]


INSIDE = ("spin_under_lock", "sleep_under_lock")
OUTSIDE = ("outside_work", "outside_sleep", "process_message", "deliver_message")
#: A thread in these (near the leaf) is waiting for the lock or giving it back: not holding it.
NOT_HOLDING = ("__lll_lock_wait", "__lll_lock_wake", "pthread_mutex_unlock", "futex_wait",
               "__futex_abstimed_wait")


def _has(frames: tuple[str, ...], names: tuple[str, ...]) -> bool:
    return any(n in f for f in frames for n in names)


def cannot_hold(h: HolderKey) -> bool:
    return _has(h.frames, OUTSIDE) or _has(h.frames[-4:], NOT_HOLDING)


def _lock(summary: dict[str, object], symbol: str) -> dict[str, object]:
    locks = [lk for lk in summary["locks"] if symbol in lk["lock"]]  # type: ignore[attr-defined]
    assert locks, summary["locks"]
    return locks[0]  # type: ignore[no-any-return]


def test_critical_section_holders(tmp_path: Path, live: None, sample_bin: Path) -> None:
    run = collect(tmp_path, "critsec", [str(sample_bin / "critsec")], duration=4.0)
    lock = _lock(run.summary, "g_lock")
    holders = {h: w for h, w in run.profile.holders.items() if h.lock == lock["lock"]}
    total = sum(holders.values())
    assert total, lock
    inside = sum(w for h, w in holders.items() if _has(h.frames, INSIDE))
    impossible = sum(w for h, w in holders.items() if cannot_hold(h))
    # Measured over 10 runs (4 s each, this 2-core machine, other jobs running): inside 100%
    # of the holder time in every run, impossible 0%; confirmed holder 93-99% of the wait
    # (104-120 observations a run; the rest: the lock free while being handed over).
    assert inside >= 0.90 * total, (inside / total, holders)
    assert impossible <= 0.05 * total, (impossible / total, holders)
    # Both halves of the critical section are seen: the spin (on-CPU) and the sleep.
    assert any(_has(h.frames, ("spin_under_lock",)) for h in holders), holders
    assert any(_has(h.frames, ("sleep_under_lock",)) for h in holders), holders
    assert lock["held_confirmed_s"] >= 0.80 * lock["wait_s"], lock  # type: ignore[operator]
    # Every share rests on the observations it shows.
    assert lock["observations"] >= lock["held_confirmed"]["count"] > 0  # type: ignore[index]


def test_queue_holders_are_inside_the_queue_lock(tmp_path: Path, live: None,
                                                 sample_bin: Path) -> None:
    run = collect(tmp_path, "queue", [str(sample_bin / "queue"), "--queue=mutex"],
                  duration=4.0)
    lock = _lock(run.summary, "g_mutex_queue")
    holders = {h: w for h, w in run.profile.holders.items() if h.lock == lock["lock"]}
    assert holders, lock
    # Measured over 10 runs: no such stack in any; every holder stack under MutexQueue::
    # (87-267 observations a run, 33-46% of the wait with a confirmed holder: the queue's
    # lock is mostly free between two short holds while its next owner is woken).
    bad = [h for h in holders if cannot_hold(h)]
    assert not bad, bad
    # The story: the queue's lock is held in MutexQueue::pop (or push_batch, the producer).
    assert all(_has(h.frames, ("MutexQueue::",)) for h in holders), holders


def test_no_holder_stacks_names_owners_and_stops_none(tmp_path: Path, live: None,
                                                      sample_bin: Path) -> None:
    """``--no-holder-stacks``: the owner sampler still names each waiter's lock and its owner
    at its rate, but stops no thread, so no holder stack is shown."""
    run = collect(tmp_path, "critsec", [str(sample_bin / "critsec")], duration=4.0,
                  extra=("--no-holder-stacks",))
    lock = _lock(run.summary, "g_lock")
    assert not [h for h in run.profile.holders if h.lock == lock["lock"]]
    recs = [json.loads(line) for log in (run.dir / "raw").glob("owners*")
            for line in log.read_text().splitlines()]
    named = [r for r in recs if "g_lock" in r["lock"] and r.get("owner")]
    # Measured over 10 runs (4 s, owners at the default 20/s): 252-290 records a run naming
    # g_lock's owner; a run with none would mean the sampler no longer reads the lock.
    assert len(named) >= 10, recs[:5]
    # each named owner is recorded as not stopped, and the report says why
    assert {r["holder"]["status"] for r in named} == {"stacks off"}, named[:3]
    assert not [r for r in recs if "stops" in r.get("holder", {})]
    reasons = lock["holder_not_caught"]["reasons"]  # type: ignore[index]
    assert reasons.get("owner not stopped (--no-holder-stacks)", 0) >= len(named), reasons
    meta = json.loads((run.dir / "meta.json").read_text())
    assert "no owner stopped" in " ".join(meta["commands"]["owners"])
