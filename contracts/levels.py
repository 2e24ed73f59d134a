"""Names and ranges about levels that the config, the level service, the learner and evaluation share.

A level is an integer seed: procgen's `start_level`, or the `reset(seed=...)` of a gymnasium env. The
training level set is `[start_level, start_level + num_levels)`; `num_levels == 0` means unbounded (every
seed in `[start_level, MAX_SEED)`), in which case nothing is held out and PLR, with a scored strategy, keeps a
buffer of the best levels it has found (`level_service.buffer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from levelray.contracts.plugins import IMPORT_PATH

MAX_SEED = 2**31 - 1  # procgen level seeds are in [0, 2**31 - 1); gymnasium accepts the same range
# Level ids at or above LEVEL_ID_BASE name levels a family knows other than by seed (a maze of its test suite, one
# read from a file); from EDITED_ID_BASE up, levels that exist only as data, made by an editor
# (`level_service.edited_levels`). Far above any seed, so that the ranges never collide.
LEVEL_ID_BASE = 1 << 40
EDITED_ID_BASE = LEVEL_ID_BASE + (1 << 32)

# PLR's score strategies (Jiang et al. 2021, table 1), score/staleness transforms and replay schedules. The scored
# ones are level scores (`policy.level_scores.LEVEL_SCORES`, registered there under these names); a user's own is
# named by module:attribute (`check_strategy`).
STRATEGIES = (
    "random",
    "sequential",
    "policy_entropy",
    "least_confidence",
    "min_margin",
    "gae",
    "value_l1",
    "one_step_td_error",
    "positive_value_loss",
)
UNSCORED_STRATEGIES = ("random", "sequential")  # uniform baselines: no learner feedback
LOGIT_STRATEGIES = ("policy_entropy", "least_confidence", "min_margin")
ADVANTAGE_STRATEGIES = ("gae", "value_l1", "positive_value_loss")
TRANSFORMS = ("constant", "max", "eps_greedy", "rank", "power", "softmax")
SCHEDULES = ("fixed", "proportionate")


def check_strategy(name: str) -> None:
    """`levels.strategy`: one of `STRATEGIES`, or module:attribute of a level score of one's own (whether it imports
    is checked before a run starts, `level_service.spaces.check_curriculum`); ValueError naming the flag, the kind
    and what exists otherwise."""
    if name not in STRATEGIES and not IMPORT_PATH.fullmatch(name):
        raise ValueError(f"expected one of {', '.join(STRATEGIES)} (--level-strategy: unscored, or a built-in level "
                         f"score), or module:attribute of a level score of your own (e.g. my_scores:return_error), "
                         f"got {name!r}")


class LevelRange(Protocol):
    """What the level functions read of `contracts.config.EnvConfig`."""

    start_level: int
    num_levels: int


def training_range(env: LevelRange) -> tuple[int, int] | None:
    """`[start, stop)` of the training levels; None when the training set is unbounded."""
    if env.num_levels <= 0:
        return None
    return env.start_level, env.start_level + env.num_levels


def training_seeds(env: LevelRange) -> np.ndarray | None:
    """The training level set as an int64 array; None when unbounded."""
    bounds = training_range(env)
    return None if bounds is None else np.arange(*bounds, dtype=np.int64)


def distinct_random(rng: np.random.Generator, n: int, low: int, high: int) -> np.ndarray:
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


def held_out_seeds(env: LevelRange, rng: np.random.Generator, episodes: int) -> np.ndarray:
    """`episodes` distinct seeds `[n]` outside the training range (any seeds where it is unbounded): the levels an
    evaluation holds out."""
    train = training_range(env)
    if train is None:
        return distinct_random(rng, episodes, 0, MAX_SEED)
    lo, hi = train
    # draw from [0, MAX_SEED - n_train) and shift the draws at or above `lo` past the training range
    draws = distinct_random(rng, episodes, 0, MAX_SEED - (hi - lo))
    return np.where(draws >= lo, draws + (hi - lo), draws)


@dataclass(frozen=True)
class EpisodeResults:
    """What an actor tells the level service: its finished episodes (`E` of them), in the order they ended.

    levels   [E] int64   the level each episode played
    scores   [E] float   its score by the run's strategy, from the acting network's outputs (finite)
    lengths  [E] int64   its steps (>= 1)
    returns  [E] float   its return
    solved   [E] bool    it reached its goal (where the env says so; False elsewhere)
    replayed [E] bool    the flag its level was drawn with (under `levels.robust`, whether its steps were trained
                         on); None where the sender does not say. A source that hands one level out both to be
                         trained on and not (SFL's candidates, `level_service.sfl`) tells the two apart by it

    The level service validates every field before it changes anything.
    """

    levels: np.ndarray
    scores: np.ndarray
    lengths: np.ndarray
    returns: np.ndarray
    solved: np.ndarray
    replayed: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.levels)
