"""``benchmarks/lab/light_phases.py``'s pure part: a phase's rate from a counter polled every
0.1 s, and each phase's loss against the phases either side of it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.lab.light_phases import HEAD_S, TAIL_S, phase_losses, rate


def _counter(bounds: list[tuple[float, float]], level: list[float],
             poll_s: float = 0.1) -> tuple[list[float], list[float]]:
    """A counter that rises at ``level[k]`` a second through phase ``k``, read every
    ``poll_s``."""
    times, counts, n, k = [], [], 0.0, 0
    for j in range(int((bounds[-1][1] + 1) / poll_s) + 1):
        t = j * poll_s
        while k + 1 < len(bounds) and t > bounds[k][1]:
            k += 1
        times.append(t)
        counts.append(n)
        n += level[k] * poll_s
    return times, counts


def test_a_phase_rate_leaves_out_its_edges() -> None:
    # 10 s phases at 1,000, 800 and 1,000 a second: each phase's rate is its own, the
    # changes at its edges left out
    bounds = [(0.0, 10.0), (10.0, 20.0), (20.0, 30.0)]
    times, counts = _counter(bounds, [1000.0, 800.0, 1000.0])
    got = [rate(times, counts, t0, t1) for t0, t1 in bounds]
    assert got == [pytest.approx(1000.0), pytest.approx(800.0), pytest.approx(1000.0)]
    assert HEAD_S + TAIL_S < 10
    # a phase that ends after the last poll has no rate
    assert rate(times, counts, 25.0, 40.0) is None


def test_a_phase_that_runs_20_percent_slower_loses_20_percent() -> None:
    kinds = ["none", "light", "none", "light", "none"]
    rates: list[float | None] = [1000.0, 800.0, 1000.0, 800.0, 1000.0]
    got = phase_losses(kinds, rates, "light")
    assert [i for i, _ in got] == [1, 3]
    assert [x for _, x in got] == pytest.approx([20.0, 20.0])
    # phases of nothing against those two away: the same level, no loss; the ends have none
    got = phase_losses(kinds, rates, "none")
    assert [i for i, _ in got] == [2]
    assert [x for _, x in got] == pytest.approx([0.0])


@settings(deadline=None)  # a busy machine's clock fails no example
@given(start=st.floats(100, 50_000), slope=st.floats(-0.01, 0.01), n=st.integers(3, 30),
       cost=st.floats(0.0, 0.5))
def test_a_level_that_moves_linearly_cancels_out(start: float, slope: float, n: int,
                                                 cost: float) -> None:
    # the server's level moves by up to 1% of its start a phase (60% over 61 phases), in a
    # straight line: each phase of
    # something still shows its own cost, and each phase of nothing none
    kinds = ["none"]
    for _ in range(n):
        kinds += ["light", "none"]
    levels = [start * (1 + slope * i) for i in range(len(kinds))]
    rates: list[float | None] = [lv * (1 - cost) if k == "light" else lv
                                 for k, lv in zip(kinds, levels, strict=True)]
    got = phase_losses(kinds, rates, "light")
    assert len(got) == n
    for _, loss in got:
        # against the mean of the two beside it, the level's own line gives exactly the
        # phase's level, so the loss is the cost
        assert loss == pytest.approx(100 * cost, abs=1e-6)
    assert all(loss == pytest.approx(0.0, abs=1e-6) for _, loss in phase_losses(kinds, rates,
                                                                                "none"))


def test_unknown_rates_and_phases_at_the_ends_are_left_out() -> None:
    kinds = ["light", "none", "light", "none", "light", "none"]
    rates: list[float | None] = [900.0, 1000.0, None, 1000.0, 900.0, 0.0]
    # the first has no phase before it, the second no rate, the third a neighbour of no rate
    assert phase_losses(kinds, rates, "light") == []
