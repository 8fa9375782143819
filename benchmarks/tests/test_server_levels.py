"""``benchmarks/lab/server_levels.py``'s pure parts: the loss figure of ``server_collect.py`` on
windows where nothing ran, and the 10 s blocks it prints."""

from __future__ import annotations

import pytest

from benchmarks.lab.server_levels import by_block, null_losses


def test_null_losses_sets_each_odd_window_against_its_neighbours() -> None:
    # 100 a second for 0-60, 80 for 60-120, 100 again for 120-180, 90 for 180-240, 90 after:
    # window 1 (60-120) against (100 + 100) / 2: 20%; window 3 against (100 + 90) / 2: 5.3%
    iv = [(float(t), 100.0 if t <= 60 or 120 < t <= 180 else 80.0 if t <= 120 else 90.0)
          for t in range(1, 301)]
    losses = null_losses(iv, 0.0, 300.0, 60.0)
    assert losses == pytest.approx([20.0, 100 * (1 - 90 / 95)])
    # a window with no figure in it gives no loss (not zero)
    assert null_losses(iv[:100], 0.0, 300.0, 60.0) == []


def test_by_block_is_each_ten_seconds_against_the_median() -> None:
    iv = [(float(t), 50.0 if t <= 10 else 100.0) for t in range(1, 31)]
    probes = [(t / 4, 3.0 if t < 40 else 4.0) for t in range(1, 121)]
    cpu = [(float(t), 1.5 * t) for t in range(0, 31)]
    rows = by_block(iv, probes, cpu)
    assert [round(r[1], 2) for r in rows] == [0.5, 1.0, 1.0]
    assert [r[2] for r in rows] == [3.0, 4.0, 4.0]
    assert [r[3] for r in rows] == pytest.approx([1.5, 1.5, 1.5])
