"""The statistics of ``wallflame check``: estimates with their noise, tests, intervals.

Every judged quantity of a side (a series of runs) is an ``Estimate``: a value, the variance
of that value and the degrees of freedom of the variance.  Within a run the variance comes
from the spread of the quantity over consecutive slices of the window (``batch_ratio``: the
method of batch means, with the ratio estimator's residuals), never below what the sample
count alone implies; between runs of a series, from the spread of the runs' values
(``combine_runs``).  Two sides are compared with Welch's t-test on the difference, one-sided
(a regression is an increase); the p-values of every quantity judged in one check are
corrected together with Holm's step-down method, so the stated false-alarm rate holds for
the whole check.  ``detectable`` is the smallest increase the comparison would catch with the
stated power.

No dependency beyond the standard library: Student's t distribution is computed from the
regularised incomplete beta function (continued fraction, as in Numerical Recipes, 6.4).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

_NORMAL = NormalDist()
#: Degrees of freedom beyond which Student's t is taken as the normal distribution.
LARGE_DF = 1e6


@dataclass(frozen=True)
class Estimate:
    """A value, the variance of that value, and the degrees of freedom of that variance
    (``math.inf``: known, e.g. pure sampling error)."""

    value: float
    var: float
    df: float

    @property
    def se(self) -> float:
        return math.sqrt(max(0.0, self.var))


@dataclass(frozen=True)
class Comparison:
    """CURRENT minus BASELINE for one quantity, with its one-sided p-value for an increase,
    a two-sided confidence interval and the smallest increase it could detect."""

    a: Estimate
    b: Estimate
    delta: float
    se: float
    df: float
    p: float
    low: float
    high: float
    detectable: float


# --- Student's t ---------------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-14:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    front = math.exp(lbeta + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom."""
    if math.isnan(t):
        return 1.0
    if df >= LARGE_DF or math.isinf(df):
        return 1.0 - _NORMAL.cdf(t)
    if df <= 0:
        return 0.5
    tail = 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t (inverse of ``1 - t_sf``)."""
    if not 0 < q < 1:
        raise ValueError("quantile outside (0, 1)")
    z = _NORMAL.inv_cdf(q)
    if df >= LARGE_DF or math.isinf(df):
        return z
    lo, hi = -1.0, 1.0
    while 1.0 - t_sf(lo, df) > q:
        lo *= 2
    while 1.0 - t_sf(hi, df) < q:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if 1.0 - t_sf(mid, df) < q:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10 * max(1.0, abs(mid)):
            break
    return (lo + hi) / 2


# --- estimates -----------------------------------------------------------------------------

def batch_ratio(num: Sequence[float], den: Sequence[float]) -> Estimate | None:
    """Ratio ``sum(num) / sum(den)`` over a run's slices, with the batch-means variance of a
    ratio estimator: ``K/(K-1) * sum((num_i - R den_i)^2) / sum(den)^2``, ``K - 1`` degrees
    of freedom.  ``None`` with fewer than two slices or no denominator."""
    k = len(num)
    total = sum(den)
    if k < 2 or len(den) != k or total <= 0:
        return None
    r = sum(num) / total
    ss = sum((x - r * d) ** 2 for x, d in zip(num, den, strict=True))
    return Estimate(r, k / (k - 1) * ss / total ** 2, k - 1)


def floor_variance(est: Estimate, nominal: float) -> Estimate:
    """The batch estimate, never below the variance the sample count alone implies (a
    spread over a few slices can be small by chance)."""
    if est.var >= nominal:
        return est
    return Estimate(est.value, nominal, math.inf)


def chi2_over_df(q: float, df: float) -> float:
    """The ``q`` quantile of chi-square(df) / df (Wilson-Hilferty: within 1% for df >= 3)."""
    if math.isinf(df):
        return 1.0
    z = _NORMAL.inv_cdf(q)
    c = 2.0 / (9.0 * df)
    return max(0.0, 1.0 - c + z * math.sqrt(c)) ** 3


def within_run(batches: Sequence[Estimate | None], nominal: Sequence[float],
               values: Sequence[float], level: float = 0.01) -> list[Estimate]:
    """Within-run estimates of a run's many quantities (functions).

    The run's overdispersion (how much more all quantities spread over the slices than
    sampling explains, pooled: many degrees of freedom) times a quantity's sampling variance
    is its variance, unless the quantity's own batch-means variance is larger than that by
    more than chance allows (beyond the ``1 - level`` quantile of chi-square(K-1)/(K-1)):
    then its own spread counts, with its ``K - 1`` degrees of freedom.  (A quantity's own
    spread from ten slices is itself noisy; using it whenever it is larger would make the
    test needlessly conservative.)"""
    obs = exp = 0.0
    for b, v in zip(batches, nominal, strict=True):
        if b is not None and v > 0 and math.isfinite(v):
            obs += b.var
            exp += v
    phi = max(1.0, obs / exp) if exp > 0 else 1.0
    out = []
    for b, v, x in zip(batches, nominal, values, strict=True):
        pooled = phi * v
        if b is not None and b.var > pooled * chi2_over_df(1 - level, b.df):
            out.append(Estimate(x, b.var, b.df))
        else:
            out.append(Estimate(x, pooled, math.inf))
    return out


def widen_for_loss(est: Estimate, bound: float) -> Estimate:
    """Add the variance of an unknown error of at most ``bound`` (uniform: ``bound^2 / 3``),
    for evidence lost during collection."""
    if bound <= 0:
        return est
    return Estimate(est.value, est.var + bound * bound / 3, est.df)


def combine_runs(runs: Sequence[Estimate], between_factor: float = 1.0,
                 own_spread: bool = True) -> Estimate:
    """A series' estimate: the mean of its runs' values.

    Its variance is what the runs' own (within-run) variances predict, scaled by
    ``between_factor`` (how much more runs differ than that, pooled over many quantities:
    ``pooled_excess``), with Welch-Satterthwaite degrees of freedom.  With ``own_spread``
    the spread of this quantity's run values (``s^2 / n``, ``n - 1`` degrees of freedom) is
    used instead when it is larger (for quantities whose between-run noise may differ from
    the pooled figure's)."""
    n = len(runs)
    if n == 0:
        raise ValueError("no runs")
    mean = sum(r.value for r in runs) / n
    within = sum(r.var for r in runs) / n ** 2 * max(1.0, between_factor)
    denom = sum((r.var / n ** 2) ** 2 / r.df for r in runs if r.var > 0 and math.isfinite(r.df))
    df_w = (sum(r.var for r in runs) / n ** 2) ** 2 / denom if denom > 0 else math.inf
    if n < 2 or not own_spread:
        return Estimate(mean, within, df_w)
    s2 = sum((r.value - mean) ** 2 for r in runs) / (n - 1)
    if s2 / n > within:
        return Estimate(mean, s2 / n, n - 1)
    return Estimate(mean, within, df_w)


def pooled_excess(series: Sequence[Sequence[Estimate]]) -> tuple[float, float]:
    """How much more the runs of a series differ than their within-run variances predict,
    pooled over many quantities (each a list of per-run estimates): the ratio of the summed
    between-run sums of squares to their expected values, with its degrees of freedom.
    1.0 (and 0 degrees of freedom) without quantities measured in two or more runs."""
    observed = expected = 0.0
    dof = 0
    for runs in series:
        n = len(runs)
        if n < 2:
            continue
        mean = sum(r.value for r in runs) / n
        v = sum(r.var for r in runs) / n
        if v <= 0:
            continue
        observed += sum((r.value - mean) ** 2 for r in runs)
        expected += (n - 1) * v
        dof += n - 1
    if expected <= 0:
        return 1.0, 0.0
    return observed / expected, float(dof)


# --- tests ---------------------------------------------------------------------------------

def welch(a: Estimate, b: Estimate) -> tuple[float, float, float]:
    """Difference ``b - a``, its standard error and Welch-Satterthwaite degrees of freedom."""
    var = a.var + b.var
    parts = [(e.var ** 2 / e.df) for e in (a, b) if e.var > 0 and math.isfinite(e.df)
             and e.df > 0]
    df = var ** 2 / sum(parts) if parts and var > 0 else math.inf
    return b.value - a.value, math.sqrt(max(0.0, var)), df


def compare(a: Estimate, b: Estimate, alpha_each: float, level: float = 0.95,
            power: float = 0.8) -> Comparison:
    """Compare two sides' estimates of one quantity (see the module docstring)."""
    delta, se, df = welch(a, b)
    p = t_sf(delta / se, df) if se > 0 else 0.0 if delta > 0 else 1.0
    half = t_ppf(0.5 + level / 2, df) * se
    return Comparison(a, b, delta, se, df, p, delta - half, delta + half,
                      detectable(se, df, alpha_each, power))


def detectable(se: float, df: float, alpha_each: float, power: float = 0.8) -> float:
    """The smallest true increase a one-sided test at level ``alpha_each`` detects with
    probability ``power``: ``(t_{1-alpha} + t_{power}) * se``."""
    if se <= 0:
        return 0.0
    if not math.isfinite(se):
        return math.inf
    return (t_ppf(1 - alpha_each, df) + t_ppf(power, df)) * se


def holm(pvalues: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down method: which hypotheses are rejected with the family-wise error
    rate held at ``alpha`` (valid under any dependence between the tests)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out = [False] * m
    for rank, i in enumerate(order):
        if pvalues[i] > alpha / (m - rank):
            break
        out[i] = True
    return out


__all__ = ["Comparison", "Estimate", "batch_ratio", "chi2_over_df", "combine_runs", "compare",
           "detectable", "floor_variance", "holm", "pooled_excess", "t_ppf", "t_sf", "welch",
           "widen_for_loss", "within_run"]
