"""The critical path as a report tells it (``report.blame``): a blame stack's cause, the
waits' totals and the sentence the findings use."""

from __future__ import annotations

from pathlib import Path

import pytest

from wallflame.critpath import UNKNOWN_WAKER
from wallflame.report import blame

RUNTIME = ("clone3", "start_thread", "[libstdc++.so.6.0.30]")
CAUSES = [
    # (a blame stack below its waiters and wait, (what, who, state))
    (("woken by consumer-*", "[on-CPU]", *RUNTIME, "worker", "MutexQueue::pop",
      "QueueStats::record", "fnv1a"),
     ("worker → MutexQueue::pop → QueueStats::record → fnv1a", "consumer-*", "on-CPU")),
    (("woken by consumer-*", "[waiting for a CPU]", *RUNTIME, "worker", "pop"),
     ("waiting for a CPU in worker → pop", "consumer-*", "runnable")),
    (("woken by consumer-*", "[waiting for a CPU]"),
     ("waiting for a CPU", "consumer-*", "runnable")),
    (("woken by req-*", "[blocked: condvar]", "main", "crit", "wait_io", "woken by io-thread",
      "[on-CPU]", "io", "io_work"), ("io → io_work", "io-thread", "on-CPU")),
    (("woken by req-*", "[blocked: sleep]", "start", "main", "sleep_under_lock", "nanosleep",
      "entry_SYSCALL_64", "do_nanosleep", "woken by a timer"),
     ("start → main → sleep_under_lock → nanosleep (sleep, woken by a timer)", "req-*",
      "blocked")),
    (("woken by a timer",), ("woken by a timer", "", "waker")),
    ((UNKNOWN_WAKER,), (UNKNOWN_WAKER, "", "waker")),
    (("woken by w", "[stopped by the collect]"), ("stopped by the collect", "w", "stopped")),
]


@pytest.mark.parametrize(("stack", "expected"), CAUSES, ids=[c[1][0] for c in CAUSES])
def test_cause(stack: tuple[str, ...], expected: tuple[str, str, str]) -> None:
    assert blame.cause(stack) == expected


def test_waits_add_up_and_the_unknown_part_is_not_explained(tmp_path: Path) -> None:
    path = tmp_path / "blame.folded"
    path.write_text("c-*;mutex q;woken by c-*;[on-CPU];f 600\n"
                    f"c-*;mutex q;{UNKNOWN_WAKER} 200\n"
                    "c-*;mutex q;woken by c-*;[waiting for a CPU] 200\n"
                    "p;sleep;woken by a timer 50\nnot a line\n;;; 12\n")
    stacks = blame.read(path)
    assert stacks is not None
    rows = blame.summary(stacks)
    assert rows is not None
    assert [(r["waiters"], r["wait"], r["waited_s"]) for r in rows] == \
        [("c-*", "mutex q", 1e-6), ("p", "sleep", 5e-8)]
    assert rows[0]["explained"] == pytest.approx(0.8)
    assert [(c["what"], c["share"]) for c in rows[0]["causes"]] == \
        [("f", 0.6), ("waiting for a CPU", 0.2), (UNKNOWN_WAKER, 0.2)]
    assert blame.sentence(rows[0]) == ("what ran while they waited: f in c-* 60%, waiting for "
                                       "a CPU in c-* 20% (critical path: 80% of the wait has a "
                                       "known waker)")
    assert blame.read(tmp_path / "none") is None
