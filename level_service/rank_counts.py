"""The `rank` transform's weights over scores that change one at a time, in O(n) a change instead of a sort.

With `m` scores `x [m]` and temperature `T`, PLR's rank transform is

    rank_i = 1 + g_i,   g_i = #{j: x_j > x_i}   (ties share the best rank),   P_i = rank_i^(-1/T) / sum_j rank_j^(-1/T)

(`transforms.transform_weights("rank", ...)`, which sorts: O(m log m) a call). A level buffer changes one score
per committed episode, and with a full buffer it needs the replay weights after every commit (the slot a new level
would replace has the lowest weight). Setting `x_k` from `a` to `b` changes the other counts by

    g_i += [b > x_i] - [a > x_i]     (i != k),      g_k = #{j != k: x_j > b},

two comparisons over the values (O(m), vectorised), and `rank^(-1/T)` is read from a table of the `capacity`
possible ranks, computed once, so the weights are a gather and a sum. The table holds the same float64 values
`transform_weights` computes (`exp(-log1p(g) / T)`), so the weights are bit-for-bit the same.
"""

from __future__ import annotations

import numpy as np

__all__ = ["RankCounts"]


class RankCounts:
    """`g_i = #{j: x_j > x_i}` over the first `size` of up to `capacity` values, kept under appends and changes."""

    def __init__(self, capacity: int, temperature: float):
        ranks = np.arange(capacity, dtype=np.int64)
        self._table = np.exp(-np.log1p(ranks.astype(np.float64)) / temperature)  # [capacity] rank^(-1/T) by g
        self._values = np.zeros(capacity, dtype=np.float64)
        self._greater = np.zeros(capacity, dtype=np.int64)
        self.size = 0

    def reset(self, values: np.ndarray) -> None:
        """Count over `values [m]` from scratch (O(m log m))."""
        m = values.size
        self._values[:m] = values
        srt = np.sort(values)
        self._greater[:m] = m - np.searchsorted(srt, values, side="right")
        self.size = m

    def set(self, k: int, value: float) -> None:
        """`x_k = value`: a change for `k < size`, an append for `k == size`."""
        m = self.size
        x, g = self._values[:m], self._greater[:m]
        if k == m:
            g += value > x
            self._greater[m] = np.count_nonzero(x > value)
            self._values[m] = value
            self.size = m + 1
            return
        old = x[k]
        g += (value > x).astype(np.int64) - (old > x)
        x[k] = value
        self._greater[k] = np.count_nonzero(x > value)  # x_k itself is not > value

    def weights(self) -> np.ndarray:
        """`P [size]`: the rank transform's normalised weights."""
        w = self._table[self._greater[: self.size]]
        return w / w.sum()
