"""The per-step scores of a `LevelFeedback` batch (step data of several envs, `[T, N]`), for the samplers'
`update_with_rollouts`: the score functions of `policy.level_scores` with every field checked first."""

from __future__ import annotations

import numpy as np

from levelray.contracts.levels import ADVANTAGE_STRATEGIES, LOGIT_STRATEGIES, LevelFeedback
from levelray.level_service.checks import as_float_array
from levelray.policy.level_scores import ADVANTAGE_SCORES, LOGIT_SCORES, one_step_td_error

__all__ = ["step_scores"]


def _needed(strategy: str, name: str, value):
    if value is None:
        raise ValueError(f"strategy {strategy!r} needs the {name!r} argument, which is missing")
    return value


def _checked_logits(logits, T: int, N: int) -> np.ndarray:
    try:
        lg = np.asarray(logits, dtype=np.float64)
    except Exception as exc:
        raise ValueError(f"logits must be a real array of shape [T, N, A]: {exc}") from exc
    if lg.ndim != 3 or lg.shape[:2] != (T, N):
        raise ValueError(f"logits must have shape [T={T}, N={N}, A], got {lg.shape}")
    if lg.shape[2] < 2:
        raise ValueError(f"logits must have at least 2 actions (A >= 2), got A={lg.shape[2]}")
    if not np.isfinite(lg).all():
        raise ValueError("logits must be finite (no NaN or inf)")
    return lg


def step_scores(strategy: str, feedback: LevelFeedback, dones: np.ndarray, discount: float) -> np.ndarray:
    """Per-step scores `[T, N]` of a scored `strategy` from the fields of `feedback` it reads.

    `dones [T, N]` is the feedback's checked boolean array. A field the strategy needs that is missing or
    malformed raises ValueError naming it.
    """
    T, N = dones.shape
    if strategy in LOGIT_STRATEGIES:
        logits = _checked_logits(_needed(strategy, "logits", feedback.logits), T, N)
        return LOGIT_SCORES[strategy](logits)
    if strategy in ADVANTAGE_STRATEGIES:
        adv = as_float_array("advantages", _needed(strategy, "advantages", feedback.advantages), (T, N))
        return ADVANTAGE_SCORES[strategy](adv)
    rewards = _needed(strategy, "rewards", feedback.rewards)
    values = _needed(strategy, "values", feedback.values)
    r = as_float_array("rewards", rewards, (T, N))
    v = as_float_array("values", values, (T + 1, N))
    return one_step_td_error(r, v, dones, discount)
