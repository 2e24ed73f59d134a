"""A B-ary sum tree and min tree in float64 with vectorised batch update and batch descent.

Layout
------
``levels[0]`` holds the leaves (one per slot, padded with zeros up to a multiple of the fan-out F).
``levels[k + 1][i]`` is the sum of ``levels[k][i*F:(i+1)*F]``; levels are added until a level has at
most ``top_max`` nodes. That top level is the set of children of an implicit wide root: sampling
searches it with one ``np.cumsum`` + ``np.searchsorted`` for the whole batch, then descends the
F-ary levels below it, all ``batch_size`` prefix sums in parallel, one level per NumPy step (no
per-element Python loop). The min tree has the same layout above the leaves and shares the
leaves with the sum tree (an empty leaf, 0, reads as +inf).

Updates write a batch of leaves and then, level by level, recompute every touched parent *from its
children* (``take`` of the touched rows, a row sum via ``einsum`` / ``min(axis=1)``), with the touched parents
found as the runs of a sorted index array (no ``np.unique``). Because internal nodes are recomputed
rather than adjusted by deltas, no rounding drift accumulates: the tree is always bitwise equal to
``rebuild()`` of its leaves. As a safety net (e.g. against a damaged tree or a future delta path) the
root is compared with ``np.sum`` of the leaves after every ``check_interval`` leaf writes (amortised
O(1) per write) and the tree is rebuilt from the leaves if the relative gap exceeds ``drift_rtol``.

Descent within an F-ary node uses prefix sums of the F children computed with one matrix product
against an upper-triangular matrix of ones (much faster than ``np.cumsum`` along short rows). The
chosen child is the first whose prefix sum exceeds the residual, so its predecessors' sum is ``<=``
the residual and the residual stays ``>= 0``; a residual at or above the node's total (rounding)
goes to the last child. Rounding could in principle steer a query into a zero-mass leaf; every
descent is checked at the leaves and any such query is redone exactly with a ``searchsorted`` over
``np.cumsum`` of all leaves (rare; only possible next to empty slots).
"""

from __future__ import annotations

import numpy as np

__all__ = ["SumMinTree"]


def _row_sums(rows: np.ndarray) -> np.ndarray:
    """Sum of each row of a C-contiguous [n, F] array. ``einsum`` is ~2x faster than ``sum(axis=1)``
    on short rows; updates and rebuilds both use this function, so a node gets the bitwise-same
    value from the same children wherever they are."""
    return np.einsum("ij->i", rows)


class SumMinTree:
    """Sum tree and min tree over ``capacity`` non-negative float64 leaves (0 = empty)."""

    def __init__(
        self,
        capacity: int,
        *,
        fanout: int = 16,
        top_max: int = 1024,
        check_interval: int | None = None,
        drift_rtol: float = 1e-9,
    ) -> None:
        if int(capacity) <= 0:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        if int(fanout) < 2 or int(fanout) & (int(fanout) - 1):
            raise ValueError(f"fanout must be a power of two >= 2, got {fanout!r}")
        if int(top_max) < 1:
            raise ValueError(f"top_max must be a positive integer, got {top_max!r}")
        self.capacity = int(capacity)
        self.fanout = int(fanout)
        self.top_max = int(top_max)
        self.check_interval = int(check_interval) if check_interval else max(self.capacity, 1 << 16)
        self.drift_rtol = float(drift_rtol)
        f = self.fanout
        sizes = [-(-self.capacity // f) * f]
        while sizes[-1] > self.top_max:
            parents = sizes[-1] // f
            sizes.append(parents if parents <= self.top_max else -(-parents // f) * f)
        self._sums = [np.zeros(s, dtype=np.float64) for s in sizes]
        # The min tree shares the leaves (0 = empty reads as +inf); _mins[0] is an unused placeholder.
        self._mins = [np.empty(0)] + [np.full(s, np.inf, dtype=np.float64) for s in sizes[1:]]
        # Prefix-sum matrix with a leading zero column: (rows @ tri)[:, c] = sum(rows[:, :c]).
        self._tri = np.triu(np.ones((f, f + 1), dtype=np.float64), k=1)
        self._writes_since_check = 0
        self.rebuilds = 0
        self._top_cs: np.ndarray | None = None
        self._min: float | None = None

    # ------------------------------------------------------------------ read
    @property
    def num_levels(self) -> int:
        return len(self._sums)

    @property
    def leaves(self) -> np.ndarray:
        """Read-only view of the leaf values (length ``capacity``)."""
        v = self._sums[0][: self.capacity]
        v.flags.writeable = False
        return v

    def _top_cumsum(self) -> np.ndarray:
        if self._top_cs is None:
            self._top_cs = np.cumsum(self._sums[-1])
        return self._top_cs

    def total(self) -> float:
        """Sum of all leaves (the root): the last prefix sum over the top level."""
        return float(self._top_cumsum()[-1])

    def min(self) -> float:
        """Smallest non-empty leaf (+inf when all leaves are empty)."""
        if self._min is None:
            self._min = self._leaf_min() if len(self._sums) == 1 else float(self._mins[-1].min())
        return self._min

    # ----------------------------------------------------------------- write
    def set(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Set leaves ``idx`` (sorted, unique int64 in [0, capacity)) to ``values`` (>= 0; 0 = empty)."""
        if idx.size == 0:
            return
        f = self.fanout
        self._sums[0][idx] = values
        for k in range(1, len(self._sums)):
            p = idx // f
            if p.size > 1:
                keep = np.empty(p.size, dtype=bool)
                keep[0] = True
                np.not_equal(p[1:], p[:-1], out=keep[1:])
                p = p[keep]
            idx = p
            rows = np.take(self._sums[k - 1].reshape(-1, f), idx, axis=0)
            self._sums[k][idx] = _row_sums(rows)
            if k > 1:
                rows = np.take(self._mins[k - 1].reshape(-1, f), idx, axis=0)
            else:
                rows = np.where(rows > 0.0, rows, np.inf)
            self._mins[k][idx] = rows.min(axis=1)
        self._top_cs = None
        self._min = None
        self._writes_since_check += int(values.size)
        if self._writes_since_check >= self.check_interval:
            self.check_drift()

    def rebuild(self) -> None:
        """Recompute every internal node from the leaves."""
        f = self.fanout
        for k in range(1, len(self._sums)):
            n = self._sums[k - 1].size // f
            self._sums[k][:] = 0.0
            self._mins[k][:] = np.inf
            self._sums[k][:n] = _row_sums(self._sums[k - 1].reshape(-1, f))
            below = self._mins[k - 1] if k > 1 else np.where(self._sums[0] > 0.0, self._sums[0], np.inf)
            self._mins[k][:n] = below.reshape(-1, f).min(axis=1)
        self._top_cs = None
        self._min = None
        self._writes_since_check = 0
        self.rebuilds += 1

    def _leaf_min(self) -> float:
        live = self._sums[0][self._sums[0] > 0.0]
        return float(live.min()) if live.size else np.inf

    def check_drift(self) -> bool:
        """Rebuild if the root drifted from the leaf sum by more than ``drift_rtol``; True if rebuilt."""
        self._writes_since_check = 0
        exact = float(np.sum(self._sums[0]))
        root = self.total()
        leaf_min = self._leaf_min()
        if abs(root - exact) > self.drift_rtol * max(abs(exact), 1e-300) or leaf_min != self.min():
            self.rebuild()
            return True
        return False

    def load_leaves(self, leaves: np.ndarray) -> None:
        """Replace all leaves (length ``capacity``) and rebuild."""
        self._sums[0][:] = 0.0
        self._sums[0][: self.capacity] = leaves
        self.rebuild()

    # ---------------------------------------------------------------- sample
    def find(self, u: np.ndarray) -> np.ndarray:
        """Leaf index for each prefix sum in ``u`` (float64, each in [0, total)): the leaf i with
        sum(leaves[:i]) <= u < sum(leaves[:i+1]), always a non-empty leaf. ``u`` is not modified."""
        f = self.fanout
        cs = self._top_cumsum()
        total = cs[-1]
        u = np.minimum(u, np.nextafter(total, 0.0))
        j = np.searchsorted(cs, u, side="right")
        u -= np.where(j > 0, cs[j - 1], 0.0)
        b = u.size
        flat_base = np.arange(b, dtype=np.int64) * (f + 1)
        for k in range(len(self._sums) - 2, -1, -1):
            rows = np.take(self._sums[k].reshape(-1, f), j, axis=0)
            c = rows @ self._tri  # [b, f + 1]: c[:, i] = sum(rows[:, :i]), c[:, 0] == 0
            c[:, f] = np.inf  # a residual at/over the node's total (rounding) goes to the last child
            ch = np.argmax(c[:, 1:] > u[:, None], axis=1)
            u -= np.take(c, flat_base + ch)
            j = j * f + ch
        return j

    def sample_stratified(self, batch_size: int, rng: np.random.Generator):
        """One draw in each of ``batch_size`` equal segments of [0, total).

        Returns (leaf indices, leaf values, total)."""
        cs = self._top_cumsum()
        total = float(cs[-1])
        if not total > 0.0:
            raise ValueError("cannot sample: the tree holds no mass")
        u = (np.arange(batch_size, dtype=np.float64) + rng.random(batch_size)) * (total / batch_size)
        idx = self.find(u)
        vals = np.take(self._sums[0], idx)
        if not vals.min() > 0.0:  # rounding steered a query into an empty leaf: redo those exactly
            bad = vals <= 0.0
            idx[bad] = self._find_exact(u[bad])
            vals = np.take(self._sums[0], idx)
        return idx, vals, total

    def _find_exact(self, u: np.ndarray) -> np.ndarray:
        cs = np.cumsum(self._sums[0])
        u = np.minimum(u, np.nextafter(cs[-1], 0.0))
        return np.searchsorted(cs, u, side="right").astype(np.int64)
