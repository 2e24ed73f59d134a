"""deploy.report.stats: the Student-t interval the comparison benchmarks and `levelray report --group-by` print."""

from __future__ import annotations

import math

import numpy as np
import pytest

from levelray.deploy.report.stats import mean_ci, t_quantile, welch_ci

# Two-sided 95% and 99% critical values from published t tables (e.g. NIST/SEMATECH e-Handbook, 1.3.6.7.2).
TABLE = [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 4, 2.776), (0.975, 9, 2.262), (0.975, 29, 2.045),
         (0.995, 3, 5.841), (0.995, 10, 3.169), (0.95, 5, 2.015), (0.9, 20, 1.325)]


@pytest.mark.parametrize("p,df,expected", TABLE)
def test_t_quantile_matches_published_tables(p, df, expected):
    assert t_quantile(p, df) == pytest.approx(expected, abs=5e-4)
    assert t_quantile(1 - p, df) == pytest.approx(-expected, abs=5e-4)


@pytest.mark.parametrize("df", [1.0, 2.5, 7.0, 40.0])
def test_t_quantile_inverts_the_integrated_density(df):
    """An independent float64 reference: integrate Student's t density (trapezoid on a fine grid) up to the
    quantile; the mass must be the requested probability."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    rng = np.random.default_rng(0)
    for p in rng.uniform(0.55, 0.995, size=5):
        q = t_quantile(float(p), df)
        x = np.linspace(0.0, q, 200_001)
        pdf = np.exp(log_norm - (df + 1) / 2 * np.log1p(x * x / df))
        mass = 0.5 + float(np.sum((pdf[1:] + pdf[:-1]) * np.diff(x)) / 2)
        assert mass == pytest.approx(p, abs=1e-7)


def test_large_df_tends_to_the_normal_quantile():
    assert t_quantile(0.975, 1e7) == pytest.approx(1.959964, abs=1e-5)


def test_mean_ci_against_a_float64_reference():
    rng = np.random.default_rng(1)
    for n in (2, 5, 8):
        xs = rng.normal(3.0, 2.0, size=n)
        mean, half = mean_ci(xs.tolist(), level=0.95)
        assert mean == pytest.approx(float(np.mean(xs)), rel=1e-12)
        assert half == pytest.approx(t_quantile(0.975, n - 1) * float(np.std(xs, ddof=1)) / math.sqrt(n), rel=1e-12)


def test_coverage_of_the_interval_is_the_level():
    """Over many samples of 5 normal draws the 95% interval holds the true mean ~95% of the time (the normal
    approximation's ±1.96 σ/√n would hold it only ~88%)."""
    rng = np.random.default_rng(2)
    hits = 0
    trials = 4000
    for _ in range(trials):
        mean, half = mean_ci(rng.normal(0.0, 1.0, size=5).tolist())
        hits += abs(mean) <= half
    assert 0.935 <= hits / trials <= 0.965


def test_one_value_has_no_spread_and_bad_input_is_refused():
    mean, half = mean_ci([0.7])
    assert mean == 0.7 and math.isnan(half)
    with pytest.raises(ValueError, match="values"):
        mean_ci([])
    with pytest.raises(ValueError, match="values"):
        mean_ci([1.0, float("nan")])
    with pytest.raises(ValueError, match="level"):
        mean_ci([1.0, 2.0], level=95)
    with pytest.raises(ValueError, match="p must"):
        t_quantile(1.0, 3)
    with pytest.raises(ValueError, match="df"):
        t_quantile(0.9, 0)


def test_ci_summary_keeps_only_finite_numbers():
    from levelray.deploy.report.stats import ci_summary

    got = ci_summary([1.0, None, float("nan"), 3, True, float("inf")])
    assert got["n"] == 2 and got["mean"] == 2.0
    assert got["ci95"] == pytest.approx(t_quantile(0.975, 1) * math.sqrt(2.0) / math.sqrt(2))
    assert ci_summary([5.0]) == {"mean": 5.0, "ci95": None, "n": 1}
    assert ci_summary([None]) == {"mean": None, "ci95": None, "n": 0}


def test_welch_interval_matches_scipy_on_random_samples():
    """An independent float64 reference: scipy's Welch t-test and its confidence interval of the difference."""
    from scipy import stats

    rng = np.random.default_rng(3)
    for n_a, n_b in ((2, 2), (5, 5), (3, 9), (12, 4)):
        a, b = rng.normal(0.4, 0.3, n_a), rng.normal(0.1, 0.05, n_b) * rng.uniform(0.5, 3.0)
        got = welch_ci(a.tolist(), b.tolist())
        ref = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
        assert got["mean"] == pytest.approx(a.mean() - b.mean(), rel=1e-12)
        assert got["mean"] - got["ci95"] == pytest.approx(ref.low, rel=1e-7, abs=1e-9)
        assert got["mean"] + got["ci95"] == pytest.approx(ref.high, rel=1e-7, abs=1e-9)
        assert (got["n_a"], got["n_b"]) == (n_a, n_b)


def test_welch_interval_of_constant_samples_is_a_point():
    assert welch_ci([1.0, 1.0], [0.25, 0.25, 0.25]) == {"mean": 0.75, "ci95": 0.0, "df": math.inf, "n_a": 2,
                                                          "n_b": 3}


@pytest.mark.parametrize("a,b,field", [([1.0], [1.0, 2.0], "a"), ([1.0, 2.0], [], "b"),
                                       ([1.0, math.nan], [1.0, 2.0], "a")])
def test_welch_interval_rejects_samples_without_a_spread_or_with_nan(a, b, field):
    with pytest.raises(ValueError, match=f"^{field} must"):
        welch_ci(a, b)


def test_paired_interval_matches_scipy_over_the_seeds_both_arms_have():
    """`paired_ci` against an independent reference, scipy's paired t-test interval of b - a, over the seeds both
    arms have a finite number for; the others (a seed one arm lacks, a run that recorded NaN or None) are left out."""
    from scipy import stats

    from levelray.deploy.report.stats import paired_ci

    rng = np.random.default_rng(4)
    a = {s: float(v) for s, v in enumerate(rng.normal(0.5, 0.2, 7))}
    b = {s: a.get(s, 0.5) + float(rng.normal(0.1, 0.05)) for s in range(2, 9)}  # seeds 7, 8: b's alone
    a[3], b[4] = math.nan, None
    got = paired_ci(a, b)
    seeds = [2, 5, 6]
    assert got["seeds"] == seeds and got["n"] == 3
    ref = stats.ttest_rel([b[s] for s in seeds], [a[s] for s in seeds]).confidence_interval(0.95)
    assert got["mean"] == pytest.approx(np.mean([b[s] - a[s] for s in seeds]), rel=1e-12)
    assert got["mean"] - got["ci95"] == pytest.approx(ref.low, rel=1e-7, abs=1e-9)
    assert got["mean"] + got["ci95"] == pytest.approx(ref.high, rel=1e-7, abs=1e-9)
    assert paired_ci({0: 1.0}, {0: 1.5}) == {"mean": 0.5, "ci95": None, "n": 1, "seeds": [0]}
    assert paired_ci({0: 1.0}, {1: 1.5}) == {"mean": None, "ci95": None, "n": 0, "seeds": []}
