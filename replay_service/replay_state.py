"""The saved form of a `PrioritizedReplay`: packing its items under a byte budget, and checking a state.

Pure functions of their arguments: the buffer builds its `state_dict` with `pack_items` and rebuilds itself
from what `read_state` returns, so every field of a state is checked before the buffer changes. States may
hold a `rate_limiter` entry; it is not read.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from levelray.contracts.rng import rng_from_state
from levelray.contracts.snapshot import packb, unpackb

__all__ = ["STATE_FORMAT", "ReplayState", "pack_items", "read_state"]

STATE_FORMAT = "levelray.replay/1"
COUNTERS = ("inserts", "samples", "updates", "updates_ignored", "removed_max_use", "evicted")


def pack_items(items: list, slots: np.ndarray, max_item_bytes: int | None) -> tuple[list[int], list[bytes], int]:
    """`(slots kept, their msgpack blobs, number unserialisable)` for the items of `slots` (newest first).

    An item is kept if it fits into what is left of `max_item_bytes` (None: no budget) and skipped
    otherwise; an item msgpack cannot pack is skipped and counted.
    """
    item_slots: list[int] = []
    blobs: list[bytes] = []
    unserialisable = 0
    budget = None if max_item_bytes is None else int(max_item_bytes)
    used = 0
    for s in slots.tolist():
        try:
            blob = packb(items[s])
        except (TypeError, ValueError, OverflowError):
            unserialisable += 1
            continue
        if budget is not None and used + len(blob) > budget:
            continue
        used += len(blob)
        item_slots.append(s)
        blobs.append(blob)
    return item_slots, blobs, unserialisable


class ReplayState(NamedTuple):
    """A checked replay state: the buffer's settings, its `[capacity]` slot arrays and its items."""

    capacity: int
    settings: dict[str, Any]  # alpha, eps, max_use, min_size, fanout, top_max: the constructor's arguments
    leaves: np.ndarray  # float64, the tree's leaves (p + eps)^alpha, 0 for empty slots
    raw: np.ndarray  # float64 raw priorities
    slot_ids: np.ndarray  # int64, -1 for an empty slot
    uses: np.ndarray  # int64
    next_id: int
    rng: np.random.Generator
    items: list  # [capacity], None where no item was saved
    have: np.ndarray  # bool [capacity]: the slot's item was saved
    counters: dict[str, int]
    max_priority: float
    priority_seen: bool


def _slot_arrays(d: dict[str, Any], cap: int) -> list[np.ndarray]:
    arrays = []
    for key, dtype in (("leaves", np.float64), ("raw_priorities", np.float64), ("slot_ids", np.int64),
                       ("uses", np.int64)):
        a = d[key]
        if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != (cap,):
            raise ValueError(f"state field {key!r} must be a {np.dtype(dtype)} array of shape ({cap},)")
        arrays.append(a.copy())
    return arrays


def _items(d: dict[str, Any], cap: int, live: np.ndarray) -> tuple[list, np.ndarray]:
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
    return items, have


def read_state(d: Any) -> ReplayState:
    """The checked content of a `PrioritizedReplay.state_dict()`; ValueError for anything malformed."""
    if not isinstance(d, dict) or d.get("format") != STATE_FORMAT:
        raise ValueError(f"not a replay state (expected a dict with format {STATE_FORMAT!r})")
    try:
        cap = int(d["capacity"])
        settings = {"alpha": d["alpha"], "eps": d["eps"], "max_use": d["max_use"], "min_size": d["min_size"],
                    "fanout": int(d["fanout"]), "top_max": int(d["top_max"])}
        leaves, raw, slot_ids, uses = _slot_arrays(d, cap)
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
        rng = rng_from_state(d["rng"]["state"], "state['rng']['state']")
        items, have = _items(d, cap, live)
        counters = {k: int(d["counters"].get(k, 0)) for k in COUNTERS}
        return ReplayState(cap, settings, leaves, raw, slot_ids, uses, next_id, rng, items, have, counters,
                           float(d["max_priority"]), bool(d["priority_seen"]))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed replay state: {type(exc).__name__}: {exc}") from exc
