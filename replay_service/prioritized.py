"""Prioritized trajectory replay: the buffer (NumPy, with optional C kernels for the sum tree; no Ray).

Semantics
---------
* Each inserted item gets a unique int64 id (0, 1, 2, ... in insertion order) and the slot
  ``id % capacity``: FIFO eviction, the oldest slot is overwritten when full.
* A raw priority p (e.g. a TD-error magnitude) is stored as the leaf ``(p + eps) ** alpha``; the
  transform is applied exactly once, inside ``insert`` / ``update_priorities``.
* ``insert(items, priorities=None)``: ``None`` gives every new item the maximum raw priority seen so
  far (over all explicit priorities passed to ``insert`` and all applied updates); 1.0 before any
  priority has been seen.
* ``sample(batch_size, beta)``: stratified - one uniform draw in each of ``batch_size`` equal
  segments of the total mass - so the same id may appear several times in one batch.
  ``probabilities[i] = (p_i + eps)^alpha / sum_k (p_k + eps)^alpha`` and
  ``weights[i] = (N * P(i))^-beta / max_j (N * P(j))^-beta`` with N the current size and the max over
  the live items (from the min tree), so weights lie in (0, 1].
* ``max_use``: an item is returned at most ``max_use`` times in total, every return counting,
  duplicates inside one batch included. When a batch draws an item more often than its remaining
  uses, the extra positions are re-drawn (stratified over the re-drawn positions) from the buffer
  without the items whose uses ran out, until the batch is full; their probability/weight are those
  of the tree they were drawn from. An item that reaches ``max_use`` is removed at once (its slot
  gets priority 0, ``len`` drops). If the live items have fewer remaining uses in total than
  ``batch_size``, ``sample`` raises ``NotReadyError``.
* ``update_priorities(ids, priorities)``: updates whose id is no longer in its slot (evicted,
  removed by ``max_use``) or was never issued are ignored. A repeated id in one call: the last value
  wins.
* Bad input raises ``ValueError`` naming the field and the expected form, before any state is
  touched (the RNG does not advance either). Sampling an empty buffer, one below ``min_size``, or one
  without enough remaining uses raises ``NotReadyError`` (a ValueError).
* ``state_dict(include_items=True, max_item_bytes=None)``: everything, msgpack-serialisable with
  ``contracts.snapshot``. Items are packed one by one (msgpack, NumPy arrays supported), newest first;
  an item is included if it fits into what is left of ``max_item_bytes`` and skipped otherwise; items
  that cannot be serialised are skipped too. The state records how many were dropped. Loading such a
  state restores all metadata (ids, counters, max priority, RNG) and the included items with their
  priorities and use counts, and *removes* the slots whose items were dropped (priority 0, size
  decreases): a slot without its item could never be served. See ``replay_state``.
  With every item included, the next samples after ``load_state_dict`` equal the original's.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from levelray.contracts.rng import make_rng
from levelray.replay_service.checks import check_beta, check_ids, check_priorities, positive_int
from levelray.replay_service.replay_state import STATE_FORMAT, pack_items, read_state
from levelray.replay_service.sumtree import _C, SumMinTree

__all__ = ["MAX_SAMPLE", "NotReadyError", "PrioritizedReplay", "Sample"]

MAX_SAMPLE = 1 << 20  # items one sample may draw (with replacement): far above any learner batch


class NotReadyError(ValueError):
    """Sampling is not possible right now: empty buffer, below ``min_size``, or not enough remaining uses
    under ``max_use``. Retry later."""


class Sample(NamedTuple):
    ids: np.ndarray  # int64 [B]
    items: list  # the items, in the order of ids
    weights: np.ndarray  # float64 [B], importance weights normalised to max 1
    probabilities: np.ndarray  # float64 [B], P(i) at the time of the draw


# Default sum-tree shape: fan-out 16 under a top of at most 4096 nodes. Measured on the benchmark, this is
# the best shape for the C kernels at every size (their cost is the O(top) prefix sum of the top level plus
# ~16 additions per level and query) and within ~15% of the best NumPy-only shape. Both backends use the
# same default so that a seed gives the same samples with and without the compiled extension.
DEFAULT_FANOUT, DEFAULT_TOP_MAX = 16, 4096


class PrioritizedReplay:
    """Proportional prioritized replay of arbitrary items (see the module docstring)."""

    def __init__(
        self,
        capacity: int,
        *,
        alpha: float = 0.6,
        eps: float = 1e-6,
        max_use: int | None = None,
        min_size: int = 1,
        rng=None,
        fanout: int | None = None,
        top_max: int | None = None,
    ) -> None:
        self._capacity = positive_int(capacity, "capacity")
        alpha = float(alpha)
        if not (math.isfinite(alpha) and alpha >= 0):
            raise ValueError(f"alpha must be a finite number >= 0, got {alpha!r}")
        eps = float(eps)
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
        self._alpha, self._eps = alpha, eps
        self._max_use = None if max_use is None else positive_int(max_use, "max_use")
        self._min_size = positive_int(min_size, "min_size")
        self._rng = make_rng(rng)
        fanout = DEFAULT_FANOUT if fanout is None else fanout
        top_max = DEFAULT_TOP_MAX if top_max is None else top_max
        self._tree = SumMinTree(self._capacity, fanout=fanout, top_max=top_max)
        cap = self._capacity
        self._slot_ids = np.full(cap, -1, dtype=np.int64)  # id stored in each slot, -1 = empty
        self._uses = np.zeros(cap, dtype=np.int64)
        self._raw = np.zeros(cap, dtype=np.float64)  # raw priority per slot (0 when empty)
        self._items: list = [None] * cap
        self._next_id = 0
        self._size = 0
        self._max_priority = 1.0
        self._priority_seen = False
        self._use_budget = 0  # sum over live items of (max_use - uses); only with max_use
        self._pending_uses: list[np.ndarray] = []  # sampled slots not yet added to _uses
        self._pending_count = 0
        self.inserts = 0
        self.samples = 0
        self.updates = 0
        self.updates_ignored = 0
        self.removed_max_use = 0
        self.evicted = 0

    # ------------------------------------------------------------ properties
    def __len__(self) -> int:
        return self._size

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def alpha(self) -> float:
        return self._alpha

    @property
    def eps(self) -> float:
        return self._eps

    @property
    def max_use(self) -> int | None:
        return self._max_use

    @property
    def min_size(self) -> int:
        return self._min_size

    @property
    def max_priority(self) -> float:
        """Raw priority given to items inserted without one."""
        return self._max_priority

    @property
    def tree(self) -> SumMinTree:
        return self._tree

    @property
    def next_id(self) -> int:
        return self._next_id

    def live_slots(self) -> np.ndarray:
        return np.flatnonzero(self._slot_ids >= 0)

    def raw_priorities(self) -> np.ndarray:
        """Raw priorities of the live items (slot order)."""
        return self._raw[self._slot_ids >= 0].copy()

    def use_counts(self) -> np.ndarray:
        """Use counts of the live items (slot order)."""
        self._flush_uses()
        return self._uses[self._slot_ids >= 0].copy()

    def _flush_uses(self) -> None:
        """Fold the slots sampled since the last flush into the use counts. Without ``max_use`` the
        fast sampling path only appends its slots (cheap); every reader of ``_uses`` and every
        operation that empties or overwrites a slot flushes first."""
        if self._pending_uses:
            np.add.at(self._uses, np.concatenate(self._pending_uses), 1)
            self._pending_uses.clear()
            self._pending_count = 0

    def __contains__(self, item_id) -> bool:
        i = int(item_id)
        return i >= 0 and int(self._slot_ids[i % self._capacity]) == i

    def _leaf(self, raw: np.ndarray) -> np.ndarray:
        return np.power(raw + self._eps, self._alpha)

    def _see_priorities(self, p: np.ndarray) -> None:
        if p.size:
            m = float(p.max())
            if not self._priority_seen:
                self._max_priority, self._priority_seen = m, True
            elif m > self._max_priority:
                self._max_priority = m

    # ----------------------------------------------------------------- insert
    def insert(self, items: Sequence, priorities=None) -> np.ndarray:
        """Insert ``items`` (a list/sequence); returns their unique int64 ids."""
        if isinstance(items, str | bytes | bytearray | dict) or not isinstance(items, Sequence):
            raise ValueError(f"items must be a list (sequence) of items, got {type(items).__name__}")
        n = len(items)
        if priorities is None:
            raw = np.full(n, self._max_priority, dtype=np.float64)
        else:
            raw = check_priorities(priorities, n)
        if n == 0:
            return np.empty(0, dtype=np.int64)
        self._flush_uses()
        if priorities is not None:
            self._see_priorities(raw)
        cap = self._capacity
        ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        k = min(n, cap)  # with n > capacity only the last `capacity` items stay
        w_ids, w_raw = ids[n - k :], raw[n - k :]
        slots = w_ids % cap
        old = self._slot_ids[slots]
        live_old = old >= 0
        n_evicted = int(live_old.sum())
        if self._max_use is not None:
            self._use_budget -= int((self._max_use - self._uses[slots[live_old]]).sum())
            self._use_budget += k * self._max_use
        self._slot_ids[slots] = w_ids
        self._uses[slots] = 0
        self._raw[slots] = w_raw
        items_ = self._items
        for s, item in zip(slots.tolist(), items[n - k :], strict=True):
            items_[s] = item
        order = np.argsort(slots)
        self._tree.set(slots[order], self._leaf(w_raw)[order])
        self._size += k - n_evicted
        self._next_id += n
        self.inserts += n
        self.evicted += n_evicted + (n - k)
        return ids

    # ----------------------------------------------------------------- sample
    def can_sample(self, batch_size: int) -> bool:
        """Whether ``sample(batch_size, ...)`` would succeed now (not counting bad arguments)."""
        try:
            self._check_ready(positive_int(batch_size, "batch_size"))
        except NotReadyError:
            return False
        return True

    def _check_ready(self, batch_size: int) -> None:
        if self._size == 0:
            raise NotReadyError("cannot sample: the replay buffer is empty")
        if self._size < self._min_size:
            raise NotReadyError(f"cannot sample: size {self._size} is below min_size {self._min_size}")
        if self._max_use is not None and self._use_budget < batch_size:
            raise NotReadyError(
                f"cannot sample {batch_size}: live items have only {self._use_budget} uses left "
                f"under max_use={self._max_use}"
            )

    def sample(self, batch_size: int, beta: float) -> Sample:
        """Stratified prioritized sample of ``batch_size`` items (at most `MAX_SAMPLE`) with importance weights."""
        b = positive_int(batch_size, "batch_size")
        if b > MAX_SAMPLE:  # a draw allocates per item: refuse before allocating, not with a MemoryError
            raise ValueError(f"batch_size must be a positive integer <= {MAX_SAMPLE}, got {b}")
        beta = check_beta(beta)
        self._check_ready(b)
        if self._max_use is None:
            slots, leaf, total = self._tree.sample_stratified(b, self._rng)
            probs = leaf / total
            weights = np.power(leaf / self._tree.min(), -beta)
            if _C is not None:
                ids = np.empty(b, dtype=np.int64)
                items = _C.gather(self._items, self._slot_ids, slots, ids)
            else:
                ids = np.take(self._slot_ids, slots)
                items = list(operator.itemgetter(*slots.tolist())(self._items)) if b > 1 else [self._items[slots[0]]]
            self._pending_uses.append(slots)
            self._pending_count += b
            if self._pending_count >= 1 << 16:
                self._flush_uses()
        else:
            self._flush_uses()
            ids, items, weights, probs = self._sample_max_use(b, beta)
        self.samples += b
        return Sample(ids, items, weights, probs)

    def _sample_max_use(self, b: int, beta: float):
        max_use = self._max_use
        ids = np.empty(b, dtype=np.int64)
        weights = np.empty(b, dtype=np.float64)
        probs = np.empty(b, dtype=np.float64)
        items: list = [None] * b
        pending = np.arange(b)
        while pending.size:
            m = pending.size
            slots, leaf, total = self._tree.sample_stratified(m, self._rng)
            min_leaf = self._tree.min()
            # rank of each draw among the draws of the same slot in this round (in batch order)
            order = np.argsort(slots, kind="stable")
            ss = slots[order]
            starts = np.ones(m, dtype=bool)
            starts[1:] = ss[1:] != ss[:-1]
            pos = np.arange(m)
            rank_sorted = pos - np.maximum.accumulate(np.where(starts, pos, 0))
            rank = np.empty(m, dtype=np.int64)
            rank[order] = rank_sorted
            ok = rank < (max_use - self._uses[slots])
            acc, s_ok = pending[ok], slots[ok]
            ids[acc] = self._slot_ids[s_ok]
            probs[acc] = leaf[ok] / total
            weights[acc] = np.power(leaf[ok] / min_leaf, -beta)
            for dst, s in zip(acc.tolist(), s_ok.tolist(), strict=True):
                items[dst] = self._items[s]
            uniq, counts = np.unique(s_ok, return_counts=True)
            self._uses[uniq] += counts
            self._use_budget -= int(s_ok.size)
            done = uniq[self._uses[uniq] >= max_use]
            if done.size:
                self._remove(done)
                self.removed_max_use += int(done.size)
            pending = pending[~ok]
        return ids, items, weights, probs

    def _remove(self, slots: np.ndarray) -> None:
        """Empty the (sorted, unique, live) ``slots``."""
        self._flush_uses()
        self._slot_ids[slots] = -1
        self._raw[slots] = 0.0
        if self._max_use is not None:
            self._use_budget -= int((self._max_use - self._uses[slots]).sum())
        self._uses[slots] = 0
        for s in slots.tolist():
            self._items[s] = None
        self._tree.set(slots, np.zeros(slots.size))
        self._size -= int(slots.size)

    # ---------------------------------------------------------------- update
    def update_priorities(self, ids, priorities) -> None:
        """Set raw priorities for ``ids``; ids no longer in the buffer are ignored."""
        if self._tree.backend == "c" and self._update_fast(ids, priorities):
            return
        ids = check_ids(ids)
        p = check_priorities(priorities, ids.shape[0])
        if ids.size == 0:
            return
        slots = ids % self._capacity
        live = np.take(self._slot_ids, slots) == ids
        n_live = int(np.count_nonzero(live))
        self.updates_ignored += ids.size - n_live
        if n_live == 0:
            return
        if n_live < ids.size:
            slots, p = slots[live], p[live]
        self._see_priorities(p)
        order = np.argsort(slots, kind="stable")
        s = slots[order]
        if s.size > 1:
            last = np.empty(s.size, dtype=bool)  # last occurrence of each slot wins
            last[-1] = True
            np.not_equal(s[1:], s[:-1], out=last[:-1])
            if not last.all():
                order, s = order[last], s[last]
        p = p[order]
        self._raw[s] = p
        self._tree.set(s, self._leaf(p))
        self.updates += int(s.size)

    def _update_fast(self, ids, priorities) -> bool:
        """``update_priorities`` through the fused C kernel (same effect, bit for bit). Returns False,
        having touched nothing, when the input is not the common well-formed case (1-D int64 ids >= 0,
        matching finite priorities >= 0); the NumPy path then validates and raises or applies it."""
        if type(ids) is not np.ndarray or ids.dtype != np.int64 or ids.ndim != 1 or not ids.size:
            return False
        try:
            p = np.ascontiguousarray(priorities, dtype=np.float64)
        except (TypeError, ValueError):
            return False
        ids = np.ascontiguousarray(ids)
        if p.shape != ids.shape or _C.check_update(ids, p):
            return False
        leaf = self._leaf(p)
        n_live, n_unique, max_p = self._tree.update_live_slots(self._slot_ids, self._raw, ids, p, leaf)
        self.updates_ignored += ids.size - n_live
        if n_live:
            if not self._priority_seen:
                self._max_priority, self._priority_seen = max_p, True
            elif max_p > self._max_priority:
                self._max_priority = max_p
            self.updates += n_unique
        return True

    # ------------------------------------------------------------------ state
    def state_dict(self, include_items: bool = True, max_item_bytes: int | None = None) -> dict[str, Any]:
        """Everything needed to resume; see the module docstring for the item budget."""
        self._flush_uses()
        if max_item_bytes is not None and (isinstance(max_item_bytes, bool) or int(max_item_bytes) < 0):
            raise ValueError(f"max_item_bytes must be an integer >= 0 or None, got {max_item_bytes!r}")
        live = self.live_slots()
        # newest first: ids are increasing with insertion time
        live = live[np.argsort(-self._slot_ids[live], kind="stable")]
        item_slots, blobs, unserialisable = pack_items(self._items, live, max_item_bytes) if include_items else (
            [], [], 0)
        bg = self._rng.bit_generator
        return {
            "format": STATE_FORMAT,
            "capacity": self._capacity,
            "alpha": self._alpha,
            "eps": self._eps,
            "max_use": self._max_use,
            "min_size": self._min_size,
            "fanout": self._tree.fanout,
            "top_max": self._tree.top_max,
            "leaves": self._tree.leaves.copy(),
            "raw_priorities": self._raw.copy(),
            "slot_ids": self._slot_ids.copy(),
            "uses": self._uses.copy(),
            "next_id": self._next_id,
            "write_pos": self._next_id % self._capacity,
            "size": self._size,
            "max_priority": self._max_priority,
            "priority_seen": self._priority_seen,
            "rng": {"bit_generator": type(bg).__name__, "state": bg.state},
            "counters": {
                "inserts": self.inserts,
                "samples": self.samples,
                "updates": self.updates,
                "updates_ignored": self.updates_ignored,
                "removed_max_use": self.removed_max_use,
                "evicted": self.evicted,
            },
            "items_included": include_items,
            "item_slots": np.asarray(item_slots, dtype=np.int64),
            "item_blobs": blobs,
            "items_dropped": int(live.size - len(item_slots)),
            "items_unserialisable": unserialisable,
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore from ``state_dict`` output (also after a msgpack round trip). Adopts the stored
        configuration. Raises ValueError (state unchanged) if ``d`` is malformed."""
        new = self.from_state_dict(d)
        self.__dict__.update(new.__dict__)

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> PrioritizedReplay:
        """A buffer rebuilt from ``state_dict`` output; ValueError if ``d`` is malformed."""
        st = read_state(d)
        r = cls(st.capacity, **st.settings)
        r._rng = st.rng
        r._slot_ids, r._uses, r._raw, r._items = st.slot_ids, st.uses, st.raw, st.items
        r._next_id = st.next_id
        live = st.slot_ids >= 0
        r._size = int(live.sum())
        r._max_priority, r._priority_seen = st.max_priority, st.priority_seen
        r._tree.load_leaves(st.leaves)
        if r._max_use is not None:
            r._use_budget = int((r._max_use - st.uses[live]).sum())
        for k, v in st.counters.items():
            setattr(r, k, v)
        missing = np.flatnonzero(live & ~st.have)
        if missing.size:  # items not in the state (budget / not serialisable): remove their slots
            r._remove(missing)
        return r
