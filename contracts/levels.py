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

MAX_SEED = 2**31 - 1  # procgen level seeds are in [0, 2**31 - 1); gymnasium accepts the same range

# PLR's score strategies (Jiang et al. 2021, table 1), score/staleness transforms and replay schedules.
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


@dataclass(frozen=True)
class EpisodeResults:
    """What an actor tells the level service: its finished episodes (`E` of them), in the order they ended.

    levels   [E] int64   the level each episode played
    scores   [E] float   its score by the run's strategy, from the acting network's outputs (finite)
    lengths  [E] int64   its steps (>= 1)
    returns  [E] float   its return
    solved   [E] bool    it reached its goal (where the env says so; False elsewhere)

    The level service validates every field before it changes anything.
    """

    levels: np.ndarray
    scores: np.ndarray
    lengths: np.ndarray
    returns: np.ndarray
    solved: np.ndarray

    def __len__(self) -> int:
        return len(self.levels)
