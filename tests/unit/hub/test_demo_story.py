"""The demo's lock line: the queue lock's confirmed holders, from its call site down."""

from __future__ import annotations

from wallflame.commands.demo import lock_story


def test_lock_story_names_the_work_under_the_lock() -> None:
    summary = {"locks": [{
        "lock": "0x10 <g_mutex_queue+0x28>", "wait_s": 4.7, "held_confirmed_s": 2.2,
        "held_confirmed": {"count": 43, "of": 92, "share": 0.467},
        "call_sites": [{"frame": "MutexQueue::pop", "s": 4.0}],
        "holders": [{"stack": "clone3;start_thread;consumer_loop;MutexQueue::pop;"
                              "QueueStats::record;fnv1a"}],
        "released_from": {"count": 9, "sites": [{"frame": "MutexQueue::pop"}]}}]}
    assert lock_story(summary) == (
        "queue lock: 43 of 92 observations caught its holder (2.20 s of 4.70 s waited), "
        "held in MutexQueue::pop -> QueueStats::record -> fnv1a, released from MutexQueue::pop")


def test_lock_story_with_few_observations_gives_counts_only() -> None:
    summary = {"locks": [{"lock": "0x10 <g_mutex_queue+0x28>", "wait_s": 4.7,
                          "held_confirmed_s": 2.2, "held_confirmed": {"count": 3, "of": 7},
                          "call_sites": [], "holders": []}]}
    assert lock_story(summary) == "queue lock: 3 of 7 observations caught its holder"


def test_lock_story_without_the_lock() -> None:
    assert lock_story({"locks": []}) == "queue lock: not identified in this run"
