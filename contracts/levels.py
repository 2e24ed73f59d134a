"""Names and ranges about levels that the config, the level service, the learner and evaluation share.

A level is an integer seed: procgen's `start_level`, or the `reset(seed=...)` of a gymnasium env. The
training level set is `[start_level, start_level + num_levels)`; `num_levels == 0` means unbounded (every
seed in `[start_level, MAX_SEED)`), in which case nothing is held out and PLR is off.
"""

from __future__ import annotations

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
