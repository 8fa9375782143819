"""``benchmarks/lab/proc_read_bias.py``'s pure parts: a record's kind of sleep, and the share of
``poll`` among the connection threads' sleeps in each kind of reading."""

from __future__ import annotations

import math

from benchmarks.lab.proc_read_bias import poll_shares, sleep_kind


def test_sleep_kind_needs_a_sleeping_state_and_a_wait_function() -> None:
    assert sleep_kind("S", "poll_schedule_timeout.constprop.0") == "poll"
    assert sleep_kind("S", "futex_do_wait") == "futex"
    # asleep by its state but on a run queue (no wait function): neither
    assert sleep_kind("S", "") == "other"
    assert sleep_kind("R", "poll_schedule_timeout") == "other"
    assert sleep_kind("D", "futex_do_wait") == "other"
    assert sleep_kind("S", "do_sigtimedwait") == "other"


def test_poll_shares_count_only_threads_seen_in_poll() -> None:
    # thread 1 is a connection thread (seen in poll); thread 2 never is (a background thread
    # on a futex): its sleeps are left out of every share
    records = {
        "one": [(1, "poll"), (1, "futex"), (1, "futex"), (1, "other"), (2, "futex")],
        "full": [(1, "poll"), (1, "poll"), (1, "futex"), (2, "futex"), (2, "futex")],
        "again": [(2, "futex")],
    }
    shares = poll_shares(records)
    assert shares["one"] == (1 / 3, 3)
    assert shares["full"] == (2 / 3, 3)
    share, n = shares["again"]
    assert n == 0 and math.isnan(share)
