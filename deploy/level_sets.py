"""The level sets an evaluation plays (`levelray evaluate --levels`, comma-separated):

- `train`: the config's training levels `[start_level, start_level + num_levels)`, in a random order
  drawn from `--seed` (cycled when there are more episodes than levels).
- `test`: held-out levels, the "full distribution" of the PLR paper: distinct random seeds from
  `[0, 2**31 - 1)` outside the training range (procgen levels; gymnasium and MiniGrid `reset(seed=...)`
  seeds).
  With an unbounded training set (`num_levels == 0`) nothing is held out; the result says so
  (`held_out: false`).
- `A-B`: the explicit seeds A to B, both included, in order.
"""

from __future__ import annotations

import re

import numpy as np

from levelray.contracts.config import ConfigError, RunConfig
from levelray.contracts.levels import MAX_SEED, training_range

LEVEL_SET_RE = re.compile(r"^(\d+)-(\d+)$")


def parse_level_sets(text: str) -> list[str]:
    """`"train,test"` -> `["train", "test"]`; each item is train, test or A-B (A <= B)."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise ConfigError("--levels: expected train, test or A-B (comma-separated), got nothing")
    for item in items:
        if item in ("train", "test"):
            continue
        m = LEVEL_SET_RE.match(item)
        if m is None:
            raise ConfigError(f"--levels: expected train, test or A-B (e.g. 1000-1999), got {item!r}")
        if int(m.group(1)) > int(m.group(2)):
            raise ConfigError(f"--levels: range {item!r} is empty (A must be <= B)")
        if int(m.group(2)) >= MAX_SEED:
            raise ConfigError(f"--levels: seeds must be < {MAX_SEED}, got {item!r}")
    if len(set(items)) != len(items):
        raise ConfigError(f"--levels: {text!r} names a level set twice")
    return items


def _distinct_random(rng: np.random.Generator, n: int, low: int, high: int) -> np.ndarray:
    """`n` distinct integers from `[low, high)` in random order (collisions are re-drawn)."""
    n = min(n, high - low)
    out: list[int] = []
    seen: set[int] = set()
    while len(out) < n:
        for x in rng.integers(low, high, size=n - len(out)).tolist():
            if x not in seen:
                seen.add(x)
                out.append(x)
    return np.asarray(out, dtype=np.int64)


def level_set_seeds(cfg: RunConfig, which: str, episodes: int, seed: int = 0) -> np.ndarray:
    """The seeds `[n]` an evaluation of `episodes` episodes on level set `which` plays (see the module doc)."""
    rng = np.random.default_rng([seed, 0x1E7E1])
    rng_test = np.random.default_rng([seed, 0x7E57])
    train = training_range(cfg.env)
    if which == "train":
        if train is None:
            return _distinct_random(rng, episodes, cfg.env.start_level, MAX_SEED)
        return rng.permutation(np.arange(*train, dtype=np.int64))
    if which == "test":
        if train is None:
            return _distinct_random(rng_test, episodes, 0, MAX_SEED)
        lo, hi = train
        # draw from [0, MAX_SEED - n_train) and shift the draws at or above `lo` past the training range
        draws = _distinct_random(rng_test, episodes, 0, MAX_SEED - (hi - lo))
        return np.where(draws >= lo, draws + (hi - lo), draws)
    m = LEVEL_SET_RE.match(which)
    if m is None:
        raise ConfigError(f"--levels: expected train, test or A-B, got {which!r}")
    return np.arange(int(m.group(1)), int(m.group(2)) + 1, dtype=np.int64)
