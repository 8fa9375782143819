"""``benchmarks/lab/sched_recorders.py``'s paired loss: each round against its own window with no
profiler, over the rounds that have both."""

from __future__ import annotations

import pytest

from benchmarks.lab.sched_recorders import paired_loss


def test_each_round_is_set_against_its_own_window() -> None:
    # a server that drifts from 1,000 to 2,000 over the sitting, the collect 10% under it in
    # every round: 10%, where the medians of the two lists would say 0%
    none = {0: 1000.0, 1: 1500.0, 2: 2000.0}
    collect = {0: 900.0, 1: 1350.0, 2: 1800.0}
    assert paired_loss(collect, none) == pytest.approx(0.10)


def test_rounds_without_both_figures_are_left_out() -> None:
    none = {0: 1000.0, 2: 1000.0, 3: 1000.0}  # round 1's window had no figure
    collect = {0: 950.0, 1: 10.0, 2: 850.0, 3: 900.0}
    assert paired_loss(collect, none) == pytest.approx(0.10)  # 5%, 15%, 10%: round 1 not used
    assert paired_loss({0: 950.0}, none) is None  # one round: no median worth printing
    assert paired_loss(collect, {}) is None
