"""The gate's statistics on synthetic data with known answers: Student's t, Holm, batch means,
the false-alarm rate over many simulated unchanged pairs, and the power on known shifts.

The simulations use fixed seeds: each test is one deterministic draw of a few hundred pairs,
and its bounds are the stated rate plus three binomial standard deviations of the count.
"""

from __future__ import annotations

import math
import random

import pytest

from wallflame.report.gate.stats import (
    Estimate,
    batch_ratio,
    chi2_over_df,
    combine_runs,
    compare,
    detectable,
    floor_variance,
    holm,
    pooled_excess,
    t_ppf,
    t_sf,
    welch,
    widen_for_loss,
    within_run,
)


@pytest.mark.parametrize(("q", "df", "value"), [
    (0.975, 1, 12.7062047), (0.975, 5, 2.5705818), (0.95, 10, 1.8124611),
    (0.9995, 9, 4.7809126), (0.99, 30, 2.4572615), (0.975, math.inf, 1.9599640),
])
def test_t_quantiles_match_tables(q: float, df: float, value: float) -> None:
    assert t_ppf(q, df) == pytest.approx(value, rel=1e-6)
    assert t_sf(value, df) == pytest.approx(1 - q, rel=1e-5)


def test_t_tail_is_symmetric_and_monotone() -> None:
    for df in (2, 7, 40):
        assert t_sf(0.0, df) == pytest.approx(0.5)
        assert t_sf(-1.3, df) == pytest.approx(1 - t_sf(1.3, df))
        assert t_sf(1.0, df) > t_sf(2.0, df) > t_sf(3.0, df)
    assert t_sf(3.0, 3) > t_sf(3.0, 300)  # fewer degrees of freedom, heavier tails


def test_holm_rejects_step_down() -> None:
    # sorted: 0.001 <= 0.05/4, 0.012 <= 0.05/3, 0.03 > 0.05/2: stop there
    assert holm([0.03, 0.001, 0.012, 0.04], 0.05) == [False, True, True, False]
    assert holm([0.2, 0.3], 0.05) == [False, False]
    assert holm([], 0.05) == []


def test_within_run_uses_a_quantity_s_own_spread_only_beyond_chance() -> None:
    assert chi2_over_df(0.99, 9) == pytest.approx(21.666 / 9, rel=0.01)
    assert chi2_over_df(0.95, 4) == pytest.approx(9.488 / 4, rel=0.01)
    nominal = [1.0, 1.0, 1.0]
    batches = [Estimate(0.1, 1.5, 9), Estimate(0.2, 1.5, 9), Estimate(0.3, 30.0, 9)]
    # pooled overdispersion (1.5 + 1.5 + 30) / 3 = 11; the third's own 30 exceeds 11 * 2.41
    out = within_run(batches, nominal, [0.1, 0.2, 0.3])
    assert out[0] == Estimate(0.1, 11.0, math.inf) and out[2] == Estimate(0.3, 30.0, 9)
    quiet = within_run([Estimate(0.1, 0.5, 9)], [1.0], [0.1])  # never below sampling error
    assert quiet[0].var == 1.0


def test_batch_ratio_of_constant_slices_has_no_spread() -> None:
    e = batch_ratio([10, 20, 30], [100, 200, 300])
    assert e is not None and e.value == pytest.approx(0.1) and e.var == pytest.approx(0)
    assert e.df == 2
    assert batch_ratio([1], [2]) is None and batch_ratio([0, 0], [0, 0]) is None
    # the floor: a spread smaller than sampling error alone is replaced by it
    assert floor_variance(e, 1e-4) == Estimate(e.value, 1e-4, math.inf)


def test_batch_ratio_variance_matches_its_definition() -> None:
    num, den = [3.0, 5.0, 4.0, 8.0], [10.0, 10.0, 10.0, 20.0]
    r = sum(num) / sum(den)
    expected = 4 / 3 * sum((x - r * d) ** 2 for x, d in zip(num, den, strict=True)) / 50 ** 2
    e = batch_ratio(num, den)
    assert e is not None and e.var == pytest.approx(expected) and e.value == pytest.approx(0.4)


def test_welch_degrees_of_freedom() -> None:
    delta, se, df = welch(Estimate(1.0, 0.04, 9), Estimate(1.5, 0.04, 9))
    assert delta == pytest.approx(0.5) and se == pytest.approx(math.sqrt(0.08))
    assert df == pytest.approx(18)
    assert welch(Estimate(0, 1, math.inf), Estimate(0, 1, math.inf))[2] == math.inf


def test_combine_runs_uses_the_larger_of_within_and_between() -> None:
    quiet = [Estimate(v, 0.01, 9) for v in (1.0, 1.0, 1.0)]
    e = combine_runs(quiet)
    assert e.value == 1.0 and e.var == pytest.approx(0.03 / 9)
    spread = [Estimate(v, 0.01, 9) for v in (0.0, 1.0, 2.0)]
    e = combine_runs(spread)
    assert e.var == pytest.approx(1.0 / 3) and e.df == 2  # s^2 = 1, n = 3
    e = combine_runs(spread, own_spread=False)  # the pooled factor only
    assert e.var == pytest.approx(0.03 / 9) and e.df == pytest.approx(27)
    assert combine_runs(quiet, between_factor=4).var == pytest.approx(4 * 0.03 / 9)


def test_pooled_excess_estimates_the_between_run_factor() -> None:
    rng = random.Random(5)
    series = []
    for _ in range(300):  # within variance 1, true between-run variance 2: total 3x
        series.append([Estimate(rng.gauss(0, math.sqrt(3)), 1.0, math.inf) for _ in range(3)])
    factor, dof = pooled_excess(series)
    assert dof == 600 and 2.6 < factor < 3.4
    assert pooled_excess([[Estimate(1, 1, 9)]]) == (1.0, 0.0)


def test_widen_for_loss_adds_a_uniform_error() -> None:
    e = widen_for_loss(Estimate(0.2, 0.0001, 9), 0.03)
    assert e.var == pytest.approx(0.0001 + 0.0009 / 3) and e.df == 9
    assert widen_for_loss(e, 0) is e


def test_detectable_is_where_the_power_is() -> None:
    se, df, alpha = 0.01, 30.0, 0.001
    d = detectable(se, df, alpha, 0.8)
    # a true increase of d is found with probability 0.8 (noncentral t ~ shifted t here)
    assert t_sf(t_ppf(1 - alpha, df) - d / se, df) == pytest.approx(0.8, abs=0.01)
    assert detectable(0.0, df, alpha) == 0.0


# --- simulations ----------------------------------------------------------------------------

SHARES = [0.30, 0.20, 0.12, 0.10, 0.08, 0.06, 0.05, 0.04, 0.03, 0.02]


def simulate_run(rng: random.Random, shares: list[float], k: int = 10, per_slice: float = 400,
                 slice_noise: float = 0.15, run_noise: float = 0.0) -> list[Estimate]:
    """One run of a program whose functions have ``shares`` of its samples: ``k`` slices of
    about ``per_slice`` samples, each slice's shares perturbed by ``slice_noise`` (relative,
    the scheduling noise sampling does not explain) and the run's by ``run_noise``."""
    run_eff = [max(0.0, 1 + rng.gauss(0, run_noise)) for _ in shares]
    totals: list[float] = []
    counts: list[list[float]] = [[] for _ in shares]
    for _ in range(k):
        n = max(10, round(rng.gauss(per_slice, per_slice * 0.3)))
        totals.append(n)
        for i, p in enumerate(shares):
            q = min(0.99, max(0.0, p * run_eff[i] * (1 + rng.gauss(0, slice_noise))))
            counts[i].append(max(0, round(rng.gauss(n * q, math.sqrt(n * q * (1 - q))))))
    n_all = sum(totals)
    batches = [batch_ratio(c, totals) for c in counts]
    values = [sum(c) / n_all for c in counts]
    nominal = [max(x * (1 - x), 1 / n_all) / n_all for x in values]
    return within_run(batches, nominal, values)


def check_pair(rng: random.Random, before: list[float], after: list[float], runs: int,
               alpha: float, **noise: float) -> list[bool]:
    sides = []
    for shares in (before, after):
        per_run = [simulate_run(rng, shares, **noise) for _ in range(runs)]
        per_q = [[r[i] for r in per_run] for i in range(len(shares))]
        sides.append(per_q)
    factor, _ = pooled_excess([*sides[0], *sides[1]])
    est = [[combine_runs(q, factor, own_spread=False) for q in side] for side in sides]
    cmps = [compare(a, b, alpha / len(before)) for a, b in zip(est[0], est[1], strict=True)]
    return holm([c.p for c in cmps], alpha)


def bound(alpha: float, n: int) -> float:
    return alpha * n + 3 * math.sqrt(n * alpha * (1 - alpha))


@pytest.mark.parametrize("runs", [1, 3])
def test_false_alarm_rate_of_unchanged_pairs_is_within_its_bound(runs: int) -> None:
    # measured with these seeds: 15 (single runs) and 9 (series) false alarms in 300 at 5%
    rng = random.Random(1000 + runs)
    alpha, n = 0.05, 300
    alarms = sum(any(check_pair(rng, SHARES, SHARES, runs, alpha)) for _ in range(n))
    assert alarms <= bound(alpha, n), f"{alarms}/{n} false alarms at alpha {alpha}"


def test_false_alarm_rate_holds_with_between_run_noise_in_series() -> None:
    # Runs differ more than their slices show (8% relative per run): the series' spread
    # must absorb it through the pooled between-run factor (13 false alarms in 300 at 5%).
    rng = random.Random(77)
    alpha, n = 0.05, 300
    alarms = sum(any(check_pair(rng, SHARES, SHARES, 3, alpha, run_noise=0.08))
                 for _ in range(n))
    assert alarms <= bound(alpha, n), f"{alarms}/{n} false alarms"


def test_power_on_a_known_shift() -> None:
    # The 12% function grows by a quarter (the others shrink in proportion), as in
    # samples/handlers --slow-auth: runs of about 8,000 samples whose slices spread 5% more
    # than sampling explains (the benchmark's runs measured close to that).  Single runs
    # catch it nearly always (96 of these 100 draws); 3-run series every time.
    grown = [p * (1 - 0.15) / (1 - 0.12) for p in SHARES]
    grown[2] = 0.15
    rng = random.Random(3)
    real = {"per_slice": 800, "slice_noise": 0.05}
    single = sum(check_pair(rng, SHARES, grown, 1, 0.01, **real)[2] for _ in range(100))
    series = sum(check_pair(rng, SHARES, grown, 3, 0.01, **real)[2] for _ in range(40))
    assert single >= 85, f"single runs caught {single}/100"
    assert series == 40, f"series caught {series}/40"
    # three times the scheduling noise: the intervals widen and both catch it less often
    # (23 of 100 single runs and 36 of 40 series in these draws)
    noisy = {"per_slice": 800, "slice_noise": 0.15}
    single_noisy = sum(check_pair(rng, SHARES, grown, 1, 0.01, **noisy)[2] for _ in range(100))
    series_noisy = sum(check_pair(rng, SHARES, grown, 3, 0.01, **noisy)[2] for _ in range(40))
    assert single_noisy < single and 30 <= series_noisy < 40, (single_noisy, series_noisy)


def test_power_is_what_detectable_says() -> None:
    # A shift equal to the detectable change is caught with about the stated power (0.8).
    rng = random.Random(11)
    hits = 0
    n = 400
    for _ in range(n):
        a = Estimate(rng.gauss(0.0, 1.0), 1.0, math.inf)
        d = detectable(math.sqrt(2.0), math.inf, 0.01)
        b = Estimate(rng.gauss(d, 1.0), 1.0, math.inf)
        hits += compare(a, b, 0.01).p <= 0.01
    assert abs(hits / n - 0.8) <= 3 * math.sqrt(0.8 * 0.2 / n)
