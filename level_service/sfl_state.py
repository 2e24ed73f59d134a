"""SFL's level space and its saved state read back (`level_service.sfl`): every field checked before the source is
rebuilt from it, so that a bad snapshot or checkpoint is refused naming the field and nothing half-loads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from levelray.contracts.config import LevelConfig
from levelray.contracts.levels import MAX_SEED, distinct_random
from levelray.contracts.rng import rng_from_state
from levelray.level_service.checks import as_int_array
from levelray.level_service.sampler_state import read_config

__all__ = ["PHASES", "SFL_STATE_VERSION", "LevelSpace", "SflState", "read_sfl_state"]

SFL_STATE_VERSION = 1
PHASES = ("evaluate", "train")  # measuring a batch of candidates; training on the buffer and fresh levels


class LevelSpace:
    """Where SFL's random levels come from: a fixed set's seeds `[n]` (`--num-levels N`), or every seed of
    `[start_level, MAX_SEED)` (`seeds` None). SFL's generator samples levels with replacement (`sample_random_level`
    on fresh keys); a batch of candidates is made of distinct ones, so that each is measured once."""

    def __init__(self, seeds: np.ndarray | None, start_level: int):
        if isinstance(start_level, bool) or not isinstance(start_level, int | np.integer) or not (
            0 <= start_level < MAX_SEED
        ):
            raise ValueError(f"start_level must be an int in [0, {MAX_SEED}), got {start_level!r}")
        self.start_level = int(start_level)
        self.seeds = None if seeds is None else as_int_array("seeds", seeds, 1).copy()
        if self.seeds is not None and (self.seeds.size == 0 or np.unique(self.seeds).size != self.seeds.size):
            raise ValueError("seeds must be a non-empty array of distinct level ids")
        self._sorted = None if self.seeds is None else np.sort(self.seeds)

    @property
    def size(self) -> int:
        """How many levels there are (a fixed set's size; the unbounded space's seeds)."""
        return MAX_SEED - self.start_level if self.seeds is None else int(self.seeds.size)

    def random(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` levels `[n]` drawn uniformly, with replacement (the training mix's fresh levels)."""
        if self.seeds is None:
            return rng.integers(self.start_level, MAX_SEED, size=n, dtype=np.int64)
        return self.seeds[rng.integers(self.seeds.size, size=n)]

    def distinct(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`min(n, size)` distinct levels `[m]` in random order (a batch of candidates)."""
        if self.seeds is None:
            return distinct_random(rng, n, self.start_level, MAX_SEED)
        return rng.choice(self.seeds, size=min(n, self.seeds.size), replace=False).astype(np.int64)

    def contains(self, ids: np.ndarray) -> np.ndarray:
        """`[n] bool`: which of `ids [n]` are levels of the space."""
        if self._sorted is None:
            return (ids >= self.start_level) & (ids < MAX_SEED)
        at = np.minimum(np.searchsorted(self._sorted, ids), self._sorted.size - 1)
        return self._sorted[at] == ids

    def same_as(self, other: LevelSpace) -> bool:
        if self.seeds is None or other.seeds is None:
            return self.seeds is None and other.seeds is None and self.start_level == other.start_level
        return np.array_equal(self.seeds, other.seeds)

    def words(self) -> str:
        """The space in the words of a refusal."""
        if self.seeds is None:
            return f"an unbounded level space from seed {self.start_level} (--num-levels 0)"
        return f"a fixed set of {self.seeds.size} levels"


class SflState(NamedTuple):
    """A checked SFL state: the batch's arrays are `[C]` over its candidates, the buffer's `[k]`."""

    config: LevelConfig
    discount: float
    space: LevelSpace
    rng: np.random.Generator
    phase: str
    candidates: np.ndarray  # int64 [C], distinct levels of the space
    plays: np.ndarray  # int64 [C] >= 0: its plays reported
    solved: np.ndarray  # int64 [C] in [0, plays]
    handed: int  # plays handed out, in [0, C * episodes]
    batch_steps: int  # env steps of the plays reported
    tail_steps: int  # env steps trained on reported since the last play was handed out
    buffer: np.ndarray  # int64 [k], distinct levels of the space
    learnability: np.ndarray  # float64 [k] in [0, 0.25]
    success: np.ndarray  # float64 [k] in [0, 1]
    trained_steps: int  # env steps trained on since the buffer was refreshed
    counts: dict[str, int]


def read_sfl_state(d: Any, count_keys: Sequence[str]) -> SflState:
    """The checked content of `SFL.state_dict()` output; ValueError naming the first bad field."""
    try:
        return _read(d, count_keys)
    except (KeyError, TypeError, AttributeError, IndexError, OverflowError) as exc:
        raise ValueError(f"malformed SFL state: {type(exc).__name__}: {exc}") from exc


def _ints(d: dict[str, Any], name: str, n: int | None = None) -> np.ndarray:
    a = as_int_array(f"state[{name!r}]", d[name], 1).copy()
    if n is not None and a.size != n:
        raise ValueError(f"state[{name!r}] must have shape ({n},), got {a.shape}")
    return a


def _reals(d: dict[str, Any], name: str, n: int, hi: float) -> np.ndarray:
    a = np.asarray(d[name], dtype=np.float64)
    if a.shape != (n,) or not np.isfinite(a).all() or (a < 0).any() or (a > hi).any():
        raise ValueError(f"state[{name!r}] must be {n} numbers in [0, {hi}]")
    return a.copy()


def _read(d: Any, count_keys: Sequence[str]) -> SflState:
    if not isinstance(d, dict) or d.get("kind") != "sfl" or d.get("version") != SFL_STATE_VERSION:
        raise ValueError(f"SFL state must be a dict with kind 'sfl' and version {SFL_STATE_VERSION}")
    config, discount = read_config(d["config"], 2)
    space = LevelSpace(d["seeds"], d["start_level"])
    phase = d["phase"]
    if phase not in PHASES:
        raise ValueError(f"state['phase'] must be one of {', '.join(PHASES)}, got {phase!r}")
    candidates = _ints(d, "candidates")
    c, episodes = candidates.size, config.sfl.episodes
    plays, solved = _ints(d, "plays", c), _ints(d, "solved", c)
    if c == 0 or np.unique(candidates).size != c or not space.contains(candidates).all():
        raise ValueError(f"state['candidates'] must be distinct levels of {space.words()}")
    if (plays < 0).any() or (solved < 0).any() or (solved > plays).any():
        raise ValueError("state['plays'] and state['solved'] must be counts, solved <= plays")
    handed, batch_steps, tail_steps = int(d["handed"]), int(d["batch_steps"]), int(d["tail_steps"])
    if not 0 <= handed <= c * episodes:
        raise ValueError(f"state['handed'] must be in [0, {c * episodes}], got {handed}")
    if batch_steps < 0 or tail_steps < 0:
        raise ValueError("state['batch_steps'] and state['tail_steps'] must be non-negative")
    buffer = _ints(d, "buffer")
    k = buffer.size
    if k > config.sfl.buffer_size or np.unique(buffer).size != k or not space.contains(buffer).all():
        raise ValueError(f"state['buffer'] must be at most {config.sfl.buffer_size} distinct levels of "
                         f"{space.words()}")
    learnability, success = _reals(d, "learnability", k, 0.25), _reals(d, "success", k, 1.0)
    trained_steps = int(d["trained_steps"])
    counts = {key: int(d["counts"][key]) for key in count_keys}
    if trained_steps < 0 or any(v < 0 for v in counts.values()):
        raise ValueError("state['trained_steps'] and state['counts'] must be non-negative")
    rng = rng_from_state(d["rng"], "state['rng']")
    return SflState(config, discount, space, rng, phase, candidates, plays, solved, handed, batch_steps, tail_steps,
                    buffer, learnability, success, trained_steps, counts)
