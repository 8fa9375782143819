"""``benchmarks/lab/event_dips.py``'s pure part: the commit rate around events, from a counter
polled every 20 ms, and what each event cost in milliseconds of the server's mean rate."""

from __future__ import annotations

import pytest

from benchmarks.lab.event_dips import BINS, around, count_at


def _polls(events: list[float], stall_s: float, end: float = 30.0,
           rate: float = 1000.0) -> tuple[list[float], list[float]]:
    """A counter that rises at ``rate`` a second but stands still for ``stall_s`` after each
    event, read every 20 ms."""
    times, counts, n, t = [], [], 0.0, 0.0
    step = 0.001
    for i in range(int(end / step)):
        t = i * step
        if not any(e <= t < e + stall_s for e in events):
            n += rate * step
        if i % 20 == 0:
            times.append(t)
            counts.append(n)
    return times, counts


def test_count_at_interpolates_between_polls_and_knows_its_bounds() -> None:
    assert count_at([0.0, 1.0], [0.0, 10.0], 0.25) == pytest.approx(2.5)
    assert count_at([0.0, 1.0], [0.0, 10.0], -0.1) is None
    assert count_at([0.0, 1.0], [0.0, 10.0], 1.5) is None


def test_a_stall_after_each_event_is_its_cost() -> None:
    events = [2.0 + 1.1 * k for k in range(20)]
    times, counts = _polls(events, 0.05)
    mean = counts[-1] / times[-1]
    got = around(times, counts, events, mean)
    assert got is not None
    curve, cost_ms = got
    assert len(curve) == len(BINS)
    # the bin right after the events: nothing committed; the others near the mean
    first_after = next(i for i, (lo, _) in enumerate(BINS) if lo >= 0)
    assert curve[first_after] < 0.2
    assert all(0.9 < r < 1.1 for i, r in enumerate(curve) if i != first_after)
    # 50 ms stood still after each event: 50 ms of the mean rate, within the polls' 20 ms
    assert cost_ms == pytest.approx(50 * curve[0], abs=8)


def test_no_stall_costs_nothing_and_no_events_no_answer() -> None:
    events = [2.0 + 1.1 * k for k in range(20)]
    times, counts = _polls(events, 0.0)
    got = around(times, counts, events, 1000.0)
    assert got is not None and abs(got[1]) < 1.0
    assert around(times, counts, [], 1000.0) is None
    assert around(times, counts, events, 0.0) is None


def test_bins_of_another_width_count_a_longer_stall() -> None:
    # start_dips.py's bins: 0.1 s wide, from 0.4 s before each event to 2 s after it; a
    # stall of 0.3 s after each event costs 300 ms of the mean rate
    from benchmarks.lab.start_dips import BINS as WIDE

    events = [2.0 + 3.3 * k for k in range(8)]
    times, counts = _polls(events, 0.3)
    got = around(times, counts, events, 1000.0, WIDE)
    assert got is not None
    curve, cost_ms = got
    assert len(curve) == len(WIDE) == 24
    after = [r for (lo, _), r in zip(WIDE, curve, strict=True) if lo >= 0]
    assert max(after[:3]) < 0.05 and min(after[3:]) > 0.9
    assert cost_ms == pytest.approx(300, abs=25)


def test_the_first_half_second_of_a_curve() -> None:
    # start_dips.py: half the rate for the first 0.3 s after the events is 150 ms of the mean
    # rate; the bins before the events and after the first 0.5 s are not counted
    from benchmarks.lab.start_dips import BINS as WIDE
    from benchmarks.lab.start_dips import first_ms

    curve = [0.2 if lo < 0 else 0.5 if lo < 0.3 - 1e-9 else 0.1 if lo >= 0.5 else 1.0
             for lo, _ in WIDE]
    assert first_ms(curve) == pytest.approx(150.0)
    assert first_ms([1.0] * len(WIDE)) == pytest.approx(0.0)


def test_each_kind_is_summed_over_its_own_phases() -> None:
    # two phases of 15 s: events in both, a 50 ms stall after each only in the second
    from benchmarks.lab.event_dips import kind_summary

    quiet = [2.0 + 1.1 * k for k in range(10)]
    busy = [17.0 + 1.1 * k for k in range(10)]
    times, counts = _polls(busy, 0.05)
    phases = [("none", 0.0, 15.0, quiet), ("snapshot", 15.0, 29.0, busy)]
    none = kind_summary(phases, times, counts, "none")
    snap = kind_summary(phases, times, counts, "snapshot")
    assert none is not None and snap is not None
    assert none.events == snap.events == 10
    assert none.rates[0] == pytest.approx(1000.0, rel=0.01)
    assert abs(none.costs[0]) < 2.0
    assert snap.costs[0] == pytest.approx(50.0, abs=8)
    assert len(snap.curve) == len(BINS)
    assert kind_summary(phases, times, counts, "read") is None
