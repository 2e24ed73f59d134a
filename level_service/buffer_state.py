"""Reading a `LevelBuffer.state_dict()` back: every field checked before the buffer is rebuilt from it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from levelray.contracts.config import LevelConfig
from levelray.contracts.levels import MAX_SEED
from levelray.contracts.rng import rng_from_state
from levelray.level_service.curriculum import LevelEditor
from levelray.level_service.editors import editor_class
from levelray.level_service.sampler_state import read_config, read_pending_rows

__all__ = ["BUFFER_STATE_VERSION", "BufferState", "read_buffer_state"]

BUFFER_STATE_VERSION = 1


class BufferState(NamedTuple):
    """A checked buffer state; `seeds`, `scores`, `last` are `[capacity]`, the first `size` slots filled."""

    start_level: int
    config: LevelConfig
    discount: float
    rng: np.random.Generator
    seeds: np.ndarray
    scores: np.ndarray
    last: np.ndarray
    size: int
    counter: int
    permutation: tuple[int, int]
    pending: dict[int, tuple[int, float, int]]  # actor id -> (seed, score sum, steps)
    counts: dict[str, int]
    editor: LevelEditor | None


def read_buffer_state(d: Any, count_keys: Sequence[str]) -> BufferState:
    """The checked content of a buffer state; ValueError naming the first bad field."""
    try:
        return _read(d, count_keys)
    except (KeyError, TypeError, AttributeError, IndexError, OverflowError) as exc:
        raise ValueError(f"malformed level-buffer state: {type(exc).__name__}: {exc}") from exc


def _array(d: dict[str, Any], name: str, dtype, n: int) -> np.ndarray:
    a = np.asarray(d[name])
    if a.shape != (n,) or a.dtype != dtype:
        raise ValueError(f"state[{name!r}] must be a {np.dtype(dtype)} array of shape ({n},)")
    return a.copy()


def _read(d: Any, count_keys: Sequence[str]) -> BufferState:
    if not isinstance(d, dict) or d.get("kind") != "buffer" or d.get("version") != BUFFER_STATE_VERSION:
        raise ValueError(f"level-buffer state must be a dict with kind 'buffer' and version {BUFFER_STATE_VERSION}")
    config, discount = read_config(d["config"], 2)
    start = int(d["start_level"])
    if not 0 <= start < MAX_SEED:
        raise ValueError(f"state['start_level'] must be in [0, {MAX_SEED})")
    cap = int(config.buffer_size)
    seeds = _array(d, "seeds", np.int64, cap)
    scores = _array(d, "scores", np.float64, cap)
    last = _array(d, "last_sampled", np.int64, cap)
    size, counter = int(d["size"]), int(d["counter"])
    filled = seeds[:size]
    editor = None if d.get("editor") is None else editor_class(config.editor).from_state_dict(d["editor"])

    def unknown(ids: np.ndarray) -> np.ndarray:  # neither a seed of the space nor an edited level held
        out = (ids < start) | (ids >= MAX_SEED)
        if editor is not None and out.any():
            out[out] = ~editor.knows(ids[out])
        return out

    if not 0 <= size <= cap or unknown(filled).any() or (seeds[size:] != -1).any():
        raise ValueError(f"state['seeds'] must hold `size` level ids (seeds of [{start}, {MAX_SEED}) or edited "
                         "levels the state holds) first, then -1")
    if np.unique(filled).size != size:
        raise ValueError("state['seeds'] holds a level twice")
    if editor is not None:
        editor.check_held(filled)
    if not np.isfinite(scores).all():
        raise ValueError("state['scores'] must be finite")
    if counter < 0 or (last < 0).any() or (last > counter).any():
        raise ValueError("state['last_sampled'] must lie in [0, counter]")
    a, c = (int(x) for x in d["permutation"])
    space = MAX_SEED - start
    if not (1 <= a <= max(space - 1, 1) and math.gcd(a, space) == 1 and 0 <= c < space):
        raise ValueError(f"state['permutation'] must be (a, c) with a coprime to {space} and c in [0, {space})")
    pending = read_pending_rows(d["pending"], unknown)
    counts = {k: int(d["counts"][k]) for k in count_keys}
    if any(v < 0 for v in counts.values()):
        raise ValueError("state['counts'] must be non-negative")
    rng = rng_from_state(d["rng"], "state['rng']")
    return BufferState(start, config, discount, rng, seeds, scores, last, size, counter, (a, c), pending, counts,
                       editor)
