"""O(log n) draws from PLR's default staleness distribution, with two Fenwick trees.

With the `power` transform at temperature 1 (the default), P_staleness(i) over the seen levels is
proportional to `counter - last[i]` (samples since level i was last drawn). Two Fenwick (binary indexed)
trees over level indices, C counting the seen levels and L summing their `last`, give the weight of every
prefix [0, k) as `counter * C(k) - L(k)`: the "+1 for everybody" of a sample is the counter itself, so a
sample costs one point update of L and a draw one tree descent.
"""

from __future__ import annotations

import numpy as np

__all__ = ["StalenessTree"]


class StalenessTree:
    """Fenwick trees C (seen levels) and L (their `last`) over `seen [n]`, `last [n]`, built vectorised."""

    def __init__(self, seen: np.ndarray, last: np.ndarray) -> None:
        n = seen.size
        c = seen.astype(np.int64)
        lv = np.where(seen, last, 0)
        idx = np.arange(1, n + 1)
        lo = idx - (idx & -idx)
        cs_c = np.concatenate(([0], np.cumsum(c)))
        cs_l = np.concatenate(([0], np.cumsum(lv)))
        self._n = n
        self._top = 1 << (n.bit_length() - 1)
        self._count = [0] + (cs_c[idx] - cs_c[lo]).tolist()
        self._last = [0] + (cs_l[idx] - cs_l[lo]).tolist()
        self.sum_last = int(lv.sum())  # L(n): the sum of `last` over the seen levels

    def add(self, i: int, dc: int, dl: int) -> None:
        """Level `i`'s seen count changes by `dc` and its `last` by `dl`."""
        fc, fl, n = self._count, self._last, self._n
        j = i + 1
        while j <= n:
            fc[j] += dc
            fl[j] += dl
            j += j & -j
        self.sum_last += dl

    def find(self, r: float, counter: int) -> int:
        """The level whose staleness interval holds `r` in [0, total): the largest k with prefix weight <= r."""
        fc, fl, n = self._count, self._last, self._n
        pos = 0
        step = self._top
        while step:
            nxt = pos + step
            if nxt <= n:
                w = counter * fc[nxt] - fl[nxt]
                if w <= r:
                    pos = nxt
                    r -= w
            step >>= 1
        return pos
