"""PLR's score and staleness transforms, and the EWA that folds episode scores into level scores.

Pure NumPy functions of their arguments (Jiang et al. 2021, section 3 and appendix A): nothing here holds
state or writes into its inputs. Every transform is computed in log space or with max-subtraction, so
temperatures near 0 give no NaN.
"""

from __future__ import annotations

import numpy as np

from levelray.contracts.levels import TRANSFORMS

__all__ = ["ewa_update", "transform_weights"]


def transform_weights(name: str, temperature: float, eps: float, x: np.ndarray) -> np.ndarray:
    """Normalised weights `P [m]` (sum 1, float64) of transform `name` over values `x [m]` (finite, m >= 1).

    With `T` the temperature and `m` the number of values:

        constant     P_i = 1 / m
        max          P_i = [x_i = max x] / #{j: x_j = max x}            (exact ties share the mass)
        eps_greedy   P_i = (1 - eps) * P_i^max + eps / m
        rank         P_i ∝ rank_i^(-1/T),  rank_i = 1 + #{j: x_j > x_i}  (ties share the best rank)
        power        P_i ∝ max(x_i, 0)^(1/T)                            (signed scores clipped at 0)
        softmax      P_i ∝ exp((x_i - max x) / T)

    A transform whose raw weights are all zero (`power` of scores <= 0) is uniform instead.
    """
    x = np.asarray(x, dtype=np.float64)
    m = x.size
    if name == "constant":
        return np.full(m, 1.0 / m)
    if name in ("max", "eps_greedy"):
        top = (x == x.max()).astype(np.float64)
        top /= top.sum()
        if name == "max":
            return top
        return (1.0 - eps) * top + eps / m
    if name == "rank":
        srt = np.sort(x)
        greater = m - np.searchsorted(srt, x, side="right")  # rank = 1 + #strictly greater
        w = np.exp(-np.log1p(greater.astype(np.float64)) / temperature)  # rank^(-1/T); top rank -> 1
        return w / w.sum()
    if name == "power":
        pos = np.maximum(x, 0.0)
        nz = pos > 0
        if not nz.any():
            return np.full(m, 1.0 / m)
        logw = np.full(m, -np.inf)
        logw[nz] = np.log(pos[nz]) / temperature
        w = np.exp(logw - logw[nz].max())
        return w / w.sum()
    if name == "softmax":
        with np.errstate(over="ignore", invalid="ignore"):
            z = (x - x.max()) / temperature
        z[np.isnan(z)] = -np.inf  # only from (-inf)/T overflow paths; those get weight 0
        w = np.exp(z)
        return w / w.sum()
    raise ValueError(f"unknown transform {name!r}; expected one of {TRANSFORMS}")


def ewa_update(
    scores: np.ndarray, levels: np.ndarray, episodes: np.ndarray, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """Fold episode scores `episodes [k]` of levels `levels [k]` (chronological) into `scores [n]`.

    Returns `(uniq, new)`: the levels touched and their new scores; `scores` is not written. The `k_l`
    episodes e_1..e_k of one level are successive exponentially weighted averages, in closed form:

        S_l <- (1 - alpha)^k * S_l + sum_j alpha * (1 - alpha)^(k - j) * e_j

    Raises ValueError when a new score is not finite.
    """
    if levels.size == 0:
        return levels, episodes
    a = alpha
    if levels.size == 1:
        new = (1.0 - a) * scores[levels] + a * episodes
    else:
        order = np.argsort(levels, kind="stable")
        sl = levels[order]
        se = episodes[order]
        first = np.empty(sl.size, dtype=bool)
        first[0] = True
        np.not_equal(sl[1:], sl[:-1], out=first[1:])
        gstart = np.flatnonzero(first)
        counts = np.diff(np.append(gstart, sl.size))
        gid = np.cumsum(first) - 1
        from_end = counts[gid] - 1 - (np.arange(sl.size) - gstart[gid])
        w = a * (1.0 - a) ** from_end
        levels = sl[gstart]
        new = (1.0 - a) ** counts * scores[levels] + np.bincount(gid, weights=w * se)
    if not np.isfinite(new).all():
        raise ValueError("score update overflows (non-finite level score)")
    return levels, new
