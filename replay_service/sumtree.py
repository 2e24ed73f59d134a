"""A B-ary sum tree and min tree in float64 with batch update and batch descent, in C or NumPy.

Layout
------
``levels[0]`` holds the leaves (one per slot, padded with zeros up to a multiple of the fan-out F).
``levels[k + 1][i]`` is the sum of ``levels[k][i*F:(i+1)*F]``; levels are added until a level has at
most ``top_max`` nodes. That top level is the set of children of an implicit wide root: sampling
searches its prefix sums (``np.cumsum``) with a binary search, then descends the F-ary levels below
it. The min tree has the same layout above the leaves and shares the leaves with the sum tree (an
empty leaf, 0, reads as +inf). All sum levels live back to back in one float64 buffer and all min
levels in another; ``_sums[k]`` / ``_mins[k]`` are views into them.

Arithmetic (identical in both backends, so their trees are bitwise equal)
-------------------------------------------------------------------------
* A node's sum is the *pairwise* sum of its F children over aligned contiguous blocks
  (``r = r[:, 0::2] + r[:, 1::2]`` until one column is left). Every step is an elementwise IEEE
  addition, so the result does not depend on SIMD width, BLAS or NumPy's reduction internals.
* Descent inside a node uses the children's inclusive prefix sums from a Kogge-Stone scan
  (``a[s:] += a[:-s]`` for s = 1, 2, 4, ...; its last entry is exactly the pairwise node sum). The
  chosen child is the first whose prefix sum exceeds the residual, so its predecessors' sum is ``<=``
  the residual and the residual stays ``>= 0``; a residual at or above the node's total (rounding)
  goes to the last child. Rounding could in principle steer a query into a zero-mass leaf; sampling
  checks every draw at the leaves and redoes any such query exactly with a ``searchsorted`` over
  ``np.cumsum`` of all leaves (rare; only possible next to empty slots).

Updates write a batch of leaves and then, level by level, recompute every touched parent *from its
children*. Because internal nodes are recomputed rather than adjusted by deltas, no rounding drift
accumulates: the tree is always bitwise equal to ``rebuild()`` of its leaves. As a safety net (e.g.
against a damaged tree) the root is compared with ``np.sum`` of the leaves after every
``check_interval`` leaf writes (amortised O(1) per write) and the tree is rebuilt from the leaves if
the relative gap exceeds ``drift_rtol``.

Backends
--------
The hot paths (batch leaf update with propagation, batch stratified descent, prefix sums of the top
level) run in the optional C extension ``replay_service._sumtree_c`` when it was built (``pip
install`` compiles it if a C compiler is available) and in NumPy otherwise. ``BACKEND`` says which
one new trees use (``"c"`` or ``"numpy"``); setting the environment variable ``LEVELRAY_NO_C_EXT=1``
before the first import forces NumPy. ``SumMinTree(..., backend="numpy"|"c")`` picks one per tree.
The uniform draws always come from the NumPy generator in Python; the kernel only descends.
"""

from __future__ import annotations

import os

import numpy as np

__all__ = ["BACKEND", "HAVE_C_EXT", "C_EXT_ERROR", "SumMinTree"]

_C = None
C_EXT_ERROR: str | None = None  # why the C extension is not used (None when it is)
if os.environ.get("LEVELRAY_NO_C_EXT", "").strip() not in ("", "0"):
    C_EXT_ERROR = "disabled by LEVELRAY_NO_C_EXT"
else:
    try:
        from levelray.replay_service import _sumtree_c as _C
    except ImportError as exc:  # not built (no compiler at install time) or unloadable
        _C = None
        C_EXT_ERROR = f"{type(exc).__name__}: {exc}"

HAVE_C_EXT = _C is not None
BACKEND = "c" if HAVE_C_EXT else "numpy"


def _pair_sums(rows: np.ndarray) -> np.ndarray:
    """Pairwise sum of each row of an [n, F] array (F a power of two) over aligned contiguous blocks.
    Updates and rebuilds (and the C kernel) all use this order, so a node gets the bitwise-same value
    from the same children wherever it is computed."""
    while rows.shape[1] > 1:
        rows = rows[:, 0::2] + rows[:, 1::2]
    return rows[:, 0]


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
        backend: str | None = None,
    ) -> None:
        if int(capacity) <= 0:
            raise ValueError(f"capacity must be a positive integer, got {capacity!r}")
        if int(fanout) < 2 or int(fanout) & (int(fanout) - 1):
            raise ValueError(f"fanout must be a power of two >= 2, got {fanout!r}")
        if int(top_max) < 1:
            raise ValueError(f"top_max must be a positive integer, got {top_max!r}")
        backend = BACKEND if backend is None else backend
        if backend not in ("c", "numpy"):
            raise ValueError(f"backend must be 'c', 'numpy' or None, got {backend!r}")
        if backend == "c" and not HAVE_C_EXT:
            raise ValueError(f"backend 'c' requested but the C extension is not available ({C_EXT_ERROR})")
        self.backend = backend
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
        self._sizes = sizes
        offs = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._layout = np.array([len(sizes), f, *offs[:-1], *sizes], dtype=np.int64)
        self._flat_sums = np.zeros(int(offs[-1]), dtype=np.float64)
        # The min tree shares the leaves (0 = empty reads as +inf); _mins[0] is an unused placeholder.
        self._flat_mins = np.full(int(offs[-1] - offs[1]), np.inf, dtype=np.float64)
        self._make_views()
        self._writes_since_check = 0
        self.rebuilds = 0
        self._top_cs: np.ndarray | None = None
        self._min: float | None = None

    def _make_views(self) -> None:
        offs = np.concatenate([[0], np.cumsum(self._sizes)])
        self._sums = [self._flat_sums[offs[k] : offs[k + 1]] for k in range(len(self._sizes))]
        self._mins = [np.empty(0)] + [
            self._flat_mins[offs[k] - offs[1] : offs[k + 1] - offs[1]] for k in range(1, len(self._sizes))
        ]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_sums"], state["_mins"]  # views into the flat buffers: recreated on load
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.backend == "c" and not HAVE_C_EXT:
            self.backend = "numpy"
        self._make_views()

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
            top = self._sums[-1]
            if self.backend == "c":
                cs = np.empty(top.size, dtype=np.float64)
                m = _C.top_stats(top, self._mins[-1], cs)
                if len(self._sums) > 1:
                    self._min = m
                self._top_cs = cs
            else:
                self._top_cs = np.cumsum(top)
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
        if self.backend == "c":
            idx = np.ascontiguousarray(idx, dtype=np.int64)
            values = np.ascontiguousarray(values, dtype=np.float64)
            if values.shape != idx.shape:
                values = np.ascontiguousarray(np.broadcast_to(values, idx.shape))
            _C.set_leaves(self._flat_sums, self._flat_mins, self._layout, idx, values)
        else:
            self._set_numpy(idx, values)
        self._top_cs = None
        self._min = None
        self._writes_since_check += int(idx.size)
        if self._writes_since_check >= self.check_interval:
            self.check_drift()

    def update_live_slots(
        self, slot_ids: np.ndarray, raw: np.ndarray, ids: np.ndarray, p: np.ndarray, leaf: np.ndarray
    ) -> tuple[int, int, float]:
        """Fused replay update (C backend only): for each ``ids[i]`` whose slot ``ids[i] % len(slot_ids)``
        still holds it, ``raw[slot] = p[i]`` and the leaf becomes ``leaf[i]`` (the last occurrence of a
        slot wins), then the ancestors are recomputed exactly as ``set`` does. ``ids`` int64 >= 0,
        ``p`` / ``leaf`` float64, all C-contiguous. Returns (live entries incl. repeats, distinct
        slots written, largest live ``p`` or -1.0)."""
        if self.backend != "c":
            raise RuntimeError("update_live_slots needs the C backend")
        n_live, n_unique, max_p = _C.update_slots(
            self._flat_sums, self._flat_mins, self._layout, slot_ids, raw, ids, p, leaf
        )
        if n_unique:
            self._top_cs = None
            self._min = None
            self._writes_since_check += n_unique
            if self._writes_since_check >= self.check_interval:
                self.check_drift()
        return n_live, n_unique, max_p

    def _set_numpy(self, idx: np.ndarray, values: np.ndarray) -> None:
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
            self._sums[k][idx] = _pair_sums(rows)
            if k > 1:
                rows = np.take(self._mins[k - 1].reshape(-1, f), idx, axis=0)
            else:
                rows = np.where(rows > 0.0, rows, np.inf)
            self._mins[k][idx] = rows.min(axis=1)

    def rebuild(self) -> None:
        """Recompute every internal node from the leaves (NumPy, same arithmetic as ``set``)."""
        f = self.fanout
        for k in range(1, len(self._sums)):
            n = self._sums[k - 1].size // f
            self._sums[k][:] = 0.0
            self._mins[k][:] = np.inf
            self._sums[k][:n] = _pair_sums(self._sums[k - 1].reshape(-1, f))
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
        sum(leaves[:i]) <= u < sum(leaves[:i+1]) up to rounding (see the module docstring for the
        rare empty-leaf case). ``u`` is not modified."""
        cs = self._top_cumsum()
        if self.backend == "c":
            u = np.ascontiguousarray(u, dtype=np.float64).reshape(-1)
            idx = np.empty(u.size, dtype=np.int64)
            _C.descend(self._flat_sums, self._layout, cs, u, False, idx, np.empty(u.size, dtype=np.float64))
            return idx
        return self._find_numpy(cs, u)

    def _find_numpy(self, cs: np.ndarray, u: np.ndarray) -> np.ndarray:
        f = self.fanout
        total = cs[-1]
        u = np.minimum(u, np.nextafter(total, 0.0))
        j = np.searchsorted(cs, u, side="right")
        u -= np.where(j > 0, cs[j - 1], 0.0)
        b = u.size
        flat_base = np.arange(b, dtype=np.int64) * (f + 1)
        c = np.empty((b, f + 1), dtype=np.float64)
        c[:, 0] = 0.0
        scan = c[:, 1:]
        for k in range(len(self._sums) - 2, -1, -1):
            scan[...] = np.take(self._sums[k].reshape(-1, f), j, axis=0)
            s = 1
            while s < f:  # Kogge-Stone: scan[:, i] = sum(rows[:, :i + 1]) in a fixed order
                np.add(scan[:, s:], scan[:, :-s], out=scan[:, s:])
                s *= 2
            c[:, f] = np.inf  # a residual at/over the node's total (rounding) goes to the last child
            ch = np.argmax(scan > u[:, None], axis=1)
            j = j * f
            if k > 0 and self._sizes[k] * f > self._sizes[k - 1]:
                # the row may end in padding nodes, which have no children: clip to the last real one
                np.minimum(ch, self._sizes[k - 1] // f - 1 - j, out=ch)
            u -= np.take(c, flat_base + ch)  # c[:, ch] = sum(rows[:, :ch]), 0 for the first child
            j += ch
        return j

    def sample_stratified(self, batch_size: int, rng: np.random.Generator):
        """One draw in each of ``batch_size`` equal segments of [0, total).

        Returns (leaf indices, leaf values, total)."""
        cs = self._top_cumsum()
        total = float(cs[-1])
        if not total > 0.0:
            raise ValueError("cannot sample: the tree holds no mass")
        r = rng.random(batch_size)
        if self.backend == "c":
            idx = np.empty(batch_size, dtype=np.int64)
            vals = np.empty(batch_size, dtype=np.float64)
            if not _C.descend(self._flat_sums, self._layout, cs, r, True, idx, vals):
                return idx, vals, total
            u = (np.arange(batch_size, dtype=np.float64) + r) * (total / batch_size)
        else:
            u = (np.arange(batch_size, dtype=np.float64) + r) * (total / batch_size)
            idx = self._find_numpy(cs, u)
            vals = np.take(self._sums[0], idx)
            if vals.min() > 0.0:
                return idx, vals, total
        # rounding steered a query into an empty leaf: redo those exactly
        bad = vals <= 0.0
        idx[bad] = self._find_exact(u[bad])
        vals = np.take(self._sums[0], idx)
        return idx, vals, total

    def _find_exact(self, u: np.ndarray) -> np.ndarray:
        cs = np.cumsum(self._sums[0])
        u = np.minimum(u, np.nextafter(cs[-1], 0.0))
        return np.searchsorted(cs, u, side="right").astype(np.int64)
