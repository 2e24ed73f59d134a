"""Prioritized trajectory replay (NumPy, with optional C kernels for the sum tree; no Ray).

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
  touched (the RNG does not advance either). Sampling an empty buffer, one below ``min_size``, or
  one the rate limiter refuses raises ``NotReadyError`` / ``RateLimitedError`` (subclasses of
  ValueError). With a rate limiter, ``insert`` raises ``RateLimitedError`` when refused.
* ``state_dict(include_items=True, max_item_bytes=None)``: everything, msgpack-serialisable with
  ``contracts.snapshot``. Items are packed one by one (msgpack, NumPy arrays supported), newest first;
  an item is included if it fits into what is left of ``max_item_bytes`` and skipped otherwise; items
  that cannot be serialised are skipped too. The state records how many were dropped. Loading such a
  state restores all metadata (ids, counters, max priority, RNG, rate limiter) and the included items
  with their priorities and use counts, and *removes* the slots whose items were dropped (priority 0,
  size decreases, counted as rate-limiter deletes): a slot without its item could never be served.
  With every item included, the next samples after ``load_state_dict`` equal the original's.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from levelray.contracts.snapshot import packb, unpackb
from levelray.replay_service.rate_limiter import NotReadyError, RateLimitedError, RateLimiter
from levelray.replay_service.sumtree import _C, SumMinTree

__all__ = ["PrioritizedReplay", "Sample", "NotReadyError", "RateLimitedError"]

STATE_FORMAT = "levelray.replay/1"
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


class Sample(NamedTuple):
    ids: np.ndarray  # int64 [B]
    items: list  # the items, in the order of ids
    weights: np.ndarray  # float64 [B], importance weights normalised to max 1
    probabilities: np.ndarray  # float64 [B], P(i) at the time of the draw


def _make_rng(rng) -> np.random.Generator:
    if rng is None or (isinstance(rng, numbers.Integral) and not isinstance(rng, bool)):
        if rng is not None and int(rng) < 0:
            raise ValueError(f"rng seed must be >= 0, got {rng!r}")
        return np.random.default_rng(rng)
    if isinstance(rng, np.random.Generator):
        return rng
    raise ValueError(f"rng must be an int seed, a numpy.random.Generator or None, got {type(rng).__name__}")


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


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
        rate_limiter: RateLimiter | None = None,
        fanout: int | None = None,
        top_max: int | None = None,
    ) -> None:
        self._capacity = _positive_int(capacity, "capacity")
        alpha = float(alpha)
        if not (math.isfinite(alpha) and alpha >= 0):
            raise ValueError(f"alpha must be a finite number >= 0, got {alpha!r}")
        eps = float(eps)
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"eps must be a finite number > 0, got {eps!r}")
        self._alpha, self._eps = alpha, eps
        self._max_use = None if max_use is None else _positive_int(max_use, "max_use")
        self._min_size = _positive_int(min_size, "min_size")
        if rate_limiter is not None and not isinstance(rate_limiter, RateLimiter):
            raise ValueError(f"rate_limiter must be a RateLimiter or None, got {type(rate_limiter).__name__}")
        self._limiter = rate_limiter
        self._rng = _make_rng(rng)
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
    def rate_limiter(self) -> RateLimiter | None:
        return self._limiter

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

    # ------------------------------------------------------------ validation
    def _check_priorities(self, priorities, n: int, name: str = "priorities") -> np.ndarray:
        try:
            p = np.asarray(priorities, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be a 1-D array of {n} real numbers >= 0") from exc
        if p.ndim != 1 or p.shape[0] != n:
            raise ValueError(f"{name} must have shape ({n},) to match the ids/items, got shape {p.shape}")
        if n and not (p.min() >= 0.0 and p.max() < np.inf):  # NaN fails both comparisons
            if not np.all(np.isfinite(p)):
                raise ValueError(f"{name} must be finite (got NaN or infinity)")
            raise ValueError(f"{name} must be >= 0 (raw priorities such as |TD error|), got {p.min()}")
        return p

    @staticmethod
    def _check_ids(ids) -> np.ndarray:
        a = np.asarray(ids)
        if a.ndim != 1:
            raise ValueError(f"ids must be a 1-D integer array, got shape {a.shape}")
        if a.size == 0:
            return a.astype(np.int64)
        if a.dtype.kind not in "iu":
            raise ValueError(f"ids must be a 1-D integer array (int64 ids from insert/sample), got dtype {a.dtype}")
        if a.dtype.kind == "u" and a.max() > np.iinfo(np.int64).max:
            raise ValueError("ids must fit in int64")
        a = a.astype(np.int64, copy=False)
        if a.min() < 0:
            raise ValueError(f"ids must be >= 0, got {a.min()}")
        return a

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
            raw = self._check_priorities(priorities, n)
        if n == 0:
            return np.empty(0, dtype=np.int64)
        if self._limiter is not None and not self._limiter.can_insert(n):
            raise RateLimitedError(f"rate limiter refuses to insert {n} items now ({self._limiter!r})")
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
        if self._limiter is not None:
            self._limiter.insert(n)
            self._limiter.delete(n_evicted + (n - k))
        return ids

    # ----------------------------------------------------------------- sample
    def can_sample(self, batch_size: int) -> bool:
        """Whether ``sample(batch_size, ...)`` would succeed now (not counting bad arguments)."""
        try:
            self._check_ready(_positive_int(batch_size, "batch_size"))
        except NotReadyError:
            return False
        return True

    def can_insert(self, n: int) -> bool:
        return self._limiter is None or n <= 0 or self._limiter.can_insert(n)

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
        lim = self._limiter
        if lim is not None and not lim.can_sample(batch_size):
            if not lim.can_insert(1):
                raise ValueError(
                    f"rate limiter deadlock: neither a batch of {batch_size} can be sampled nor one item "
                    f"inserted ({lim!r}); error_buffer must be larger than the batch size"
                )
            raise RateLimitedError(f"rate limiter refuses to sample {batch_size} items now ({lim!r})")

    def sample(self, batch_size: int, beta: float) -> Sample:
        """Stratified prioritized sample of ``batch_size`` items with importance weights."""
        b = _positive_int(batch_size, "batch_size")
        if isinstance(beta, bool) or not isinstance(beta, numbers.Real):
            raise ValueError(f"beta must be a real number > 0, got {beta!r}")
        beta = float(beta)
        if not (math.isfinite(beta) and beta > 0):
            raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
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
        if self._limiter is not None:
            self._limiter.sample(b)
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
        if self._limiter is not None:
            self._limiter.delete(int(slots.size))

    # ---------------------------------------------------------------- update
    def update_priorities(self, ids, priorities) -> None:
        """Set raw priorities for ``ids``; ids no longer in the buffer are ignored."""
        if self._tree.backend == "c" and self._update_fast(ids, priorities):
            return
        ids = self._check_ids(ids)
        p = self._check_priorities(priorities, ids.shape[0])
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
        item_slots: list[int] = []
        blobs: list[bytes] = []
        unserialisable = 0
        if include_items:
            budget = None if max_item_bytes is None else int(max_item_bytes)
            used = 0
            for s in live.tolist():
                try:
                    blob = packb(self._items[s])
                except (TypeError, ValueError, OverflowError):
                    unserialisable += 1
                    continue
                if budget is not None and used + len(blob) > budget:
                    continue
                used += len(blob)
                item_slots.append(s)
                blobs.append(blob)
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
            "rate_limiter": None if self._limiter is None else self._limiter.state_dict(),
            "items_included": include_items,
            "item_slots": np.asarray(item_slots, dtype=np.int64),
            "item_blobs": blobs,
            "items_dropped": int(live.size - len(item_slots)),
            "items_unserialisable": unserialisable,
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore from ``state_dict`` output (also after a msgpack round trip). Adopts the stored
        configuration. Raises ValueError (state unchanged) if ``d`` is malformed."""
        new = self._build_from_state(d)
        self.__dict__.update(new.__dict__)

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> PrioritizedReplay:
        return cls._build_from_state(d)

    @classmethod
    def _build_from_state(cls, d: dict[str, Any]) -> PrioritizedReplay:
        if not isinstance(d, dict) or d.get("format") != STATE_FORMAT:
            raise ValueError(f"not a replay state (expected a dict with format {STATE_FORMAT!r})")
        try:
            cap = int(d["capacity"])
            limiter = None if d["rate_limiter"] is None else RateLimiter.from_state_dict(d["rate_limiter"])
            r = cls(
                cap,
                alpha=d["alpha"],
                eps=d["eps"],
                max_use=d["max_use"],
                min_size=d["min_size"],
                rate_limiter=limiter,
                fanout=int(d["fanout"]),
                top_max=int(d["top_max"]),
            )
            arrays = {}
            for key, dtype in (
                ("leaves", np.float64),
                ("raw_priorities", np.float64),
                ("slot_ids", np.int64),
                ("uses", np.int64),
            ):
                a = d[key]
                if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != (cap,):
                    raise ValueError(f"state field {key!r} must be a {np.dtype(dtype)} array of shape ({cap},)")
                arrays[key] = a.copy()
            leaves, raw, slot_ids, uses = (
                arrays["leaves"],
                arrays["raw_priorities"],
                arrays["slot_ids"],
                arrays["uses"],
            )
            next_id = int(d["next_id"])
            live = slot_ids >= 0
            if (
                not np.all(np.isfinite(leaves))
                or leaves.min() < 0
                or not np.all(leaves[live] > 0)
                or np.any(leaves[~live] != 0)
                or np.any(slot_ids[live] % cap != np.flatnonzero(live))
                or np.any(slot_ids >= next_id)
                or int(d["size"]) != int(live.sum())
                or int(d["write_pos"]) != next_id % cap
            ):
                raise ValueError("inconsistent slot/leaf arrays in replay state")
            rng_state = d["rng"]
            name = rng_state["bit_generator"]
            if name not in _BIT_GENERATORS:
                raise ValueError(f"unsupported bit generator {name!r}")
            bg = getattr(np.random, name)()
            bg.state = rng_state["state"]
            r._rng = np.random.Generator(bg)
            item_slots = np.asarray(d["item_slots"], dtype=np.int64).reshape(-1)
            blobs = d["item_blobs"]
            if len(blobs) != item_slots.size:
                raise ValueError("item_slots and item_blobs lengths differ")
            if item_slots.size and (item_slots.min() < 0 or item_slots.max() >= cap):
                raise ValueError("item slot out of range")
            if item_slots.size and not np.all(live[item_slots]):
                raise ValueError("item stored for an empty slot")
            items: list = [None] * cap
            have = np.zeros(cap, dtype=bool)
            for s, blob in zip(item_slots.tolist(), blobs, strict=True):
                if not isinstance(blob, bytes):
                    raise ValueError("item blobs must be bytes")
                items[s] = unpackb(blob)
                have[s] = True
            counters = d["counters"]
            max_priority = float(d["max_priority"])
            priority_seen = bool(d["priority_seen"])
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed replay state: {type(exc).__name__}: {exc}") from exc
        r._slot_ids, r._uses, r._raw, r._items = slot_ids, uses, raw, items
        r._next_id = next_id
        r._size = int(live.sum())
        r._max_priority, r._priority_seen = max_priority, priority_seen
        r._tree.load_leaves(leaves)
        if r._max_use is not None:
            r._use_budget = int((r._max_use - uses[live]).sum())
        for k in ("inserts", "samples", "updates", "updates_ignored", "removed_max_use", "evicted"):
            setattr(r, k, int(counters.get(k, 0)))
        missing = np.flatnonzero(live & ~have)
        if missing.size:  # items not in the state (budget / not serialisable): remove their slots
            r._remove(missing)
        return r
