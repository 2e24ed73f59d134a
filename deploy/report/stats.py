"""Confidence intervals for comparisons over a handful of seeds (PLR vs uniform, with vs without a loss).

Five to ten seeds per arm is what a 2-core machine affords, so the normal approximation (±1.96 σ/√n)
would understate the uncertainty by 40% at n = 5: the interval is Student's t,

    mean ± t_{(1+level)/2, n-1} · s / √n,      s² = Σ (x_i − mean)² / (n − 1),

with the t quantile computed here (no SciPy in the project's dependencies): bisection on the CDF,
which is the regularised incomplete beta function I_x(df/2, 1/2) evaluated by Lentz's continued fraction
(Numerical Recipes §6.4). Plain floats in and out; nothing from the rest of levelray.

This is the one place such intervals are computed: the report's groups, a sweep's results.json (its arms and its
paired differences, `deploy.sweep.results`) and the comparison benchmarks all call it, so a number in one of them
is the number the others give for the same runs.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

__all__ = ["ci_summary", "mean_ci", "paired_ci", "t_quantile", "welch_ci"]


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        for num in (m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
                    -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularised incomplete beta function, for 0 <= x <= 1."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):  # the continued fraction converges fast on this side
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom (t_quantile(0.975, 4) = 2.776...)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie strictly between 0 and 1, got {p}")
    if not df > 0:
        raise ValueError(f"df must be positive, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:  # bracket: the quantile is below 1e6 for any p < 1 - 1e-12 at df >= 1
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """(mean, half-width) of the Student-t confidence interval of the mean of `values`.

    One value gives a half-width of NaN (no spread can be estimated from a single seed); NaN values
    (a run that recorded nothing) are a ValueError rather than a silently shorter sample."""
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError("values must hold at least one number, got none")
    if any(math.isnan(v) for v in xs):
        raise ValueError(f"values must be numbers, got NaN in {xs}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    n = len(xs)
    if n == 1:
        return xs[0], math.nan
    mean, var = _mean_var(xs)
    return mean, t_quantile(0.5 + level / 2.0, n - 1) * math.sqrt(var / n)


def ci_summary(values: Sequence[float | None]) -> dict:
    """{mean, ci95 (half-width; None below 2 values), n} over the values that are finite numbers: the form
    the report's groups table and the comparison benchmarks' JSON use. No values: mean None, n 0."""
    xs = [float(v) for v in values if _finite(v)]
    if not xs:
        return {"mean": None, "ci95": None, "n": 0}
    mean, half = mean_ci(xs)
    return {"mean": mean, "ci95": None if len(xs) < 2 else half, "n": len(xs)}


def paired_ci(a: Mapping[Hashable, float | None], b: Mapping[Hashable, float | None]) -> dict:
    """`b - a`, seed by seed: the `ci_summary` ({mean, ci95, n}) of the differences `b[s] - a[s]` over the seeds `s`
    where both arms have a finite number, and `seeds`, those seeds in order. `a`, `b`: seed -> an arm's value.

    Arms that ran the same seeds are compared this way rather than by the difference of their means: what a seed
    does to both arms (its levels, its initial weights) cancels in each difference, so the interval is narrower
    when the arms agree seed by seed. Arms that share no seeds need `welch_ci`."""
    seeds = sorted(s for s in a.keys() & b.keys() if _finite(a[s]) and _finite(b[s]))
    return {**ci_summary([b[s] - a[s] for s in seeds]), "seeds": seeds}


def welch_ci(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> dict:
    """{mean, ci95, df, n_a, n_b}: the difference of means mean(a) - mean(b) of two independent samples, with
    Welch's interval, for arms that share no seeds (another project's runs beside ours):

        se² = s_a²/n_a + s_b²/n_b,   df = se⁴ / ((s_a²/n_a)²/(n_a-1) + (s_b²/n_b)²/(n_b-1)),
        half-width = t_{(1+level)/2, df} · se

    Each sample needs at least two values (a spread to estimate); NaN is a ValueError, as in `mean_ci`."""
    xs, ys = [float(v) for v in a], [float(v) for v in b]
    for name, sample in (("a", xs), ("b", ys)):
        if len(sample) < 2:
            raise ValueError(f"{name} must hold at least two numbers for a spread, got {sample}")
        if any(math.isnan(v) for v in sample):
            raise ValueError(f"{name} must be numbers, got NaN in {sample}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie strictly between 0 and 1, got {level}")
    (mean_a, var_a), (mean_b, var_b) = _mean_var(xs), _mean_var(ys)
    va, vb = var_a / len(xs), var_b / len(ys)
    se2 = va + vb
    if se2 == 0.0:
        return {"mean": mean_a - mean_b, "ci95": 0.0, "df": math.inf, "n_a": len(xs), "n_b": len(ys)}
    df = se2 * se2 / (va * va / (len(xs) - 1) + vb * vb / (len(ys) - 1))
    half = t_quantile(0.5 + level / 2.0, df) * math.sqrt(se2)
    return {"mean": mean_a - mean_b, "ci95": half, "df": df, "n_a": len(xs), "n_b": len(ys)}


def _finite(value: object) -> bool:
    """A finite number (not a bool): what a run that recorded nothing (None, NaN) or a flag is not."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _mean_var(xs: list[float]) -> tuple[float, float]:
    """(mean, unbiased variance) of at least two values."""
    mean = math.fsum(xs) / len(xs)
    return mean, math.fsum((v - mean) ** 2 for v in xs) / (len(xs) - 1)
