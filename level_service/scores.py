"""PLR's per-step score functions, one per strategy (Jiang et al. 2021, section 3 and table 1).

Pure NumPy: each maps the learner's per-step outputs of a `[T, N]` batch to per-step scores `[T, N]`
(float64); an episode's score is the mean of its steps' scores (`level_service.episodes`). Logit scores are
normalised to [0, 1] and invariant to a constant shift of the logits.
"""

from __future__ import annotations

import math

import numpy as np

from levelray.contracts.levels import ADVANTAGE_STRATEGIES, LOGIT_STRATEGIES, LevelFeedback
from levelray.level_service.checks import as_float_array

__all__ = [
    "gae",
    "least_confidence",
    "min_margin",
    "one_step_td_error",
    "policy_entropy",
    "positive_value_loss",
    "step_scores",
    "value_l1",
]


def _softmax(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(z, sum_a exp z, p)` of `logits [T, N, A]`, z = l - max_a l clipped at -1000 (no underflow NaN)."""
    z = np.maximum(logits - logits.max(axis=-1, keepdims=True), -1000.0)
    ez = np.exp(z)
    sz = ez.sum(axis=-1)
    return z, sz, ez / sz[..., None]


def policy_entropy(logits: np.ndarray) -> np.ndarray:
    """H(pi_t) / log A = -sum_a p_a log p_a / log A, with p = softmax(logits [T, N, A])."""
    z, sz, p = _softmax(logits)
    return (np.log(sz) - (p * z).sum(axis=-1)) / math.log(logits.shape[-1])


def least_confidence(logits: np.ndarray) -> np.ndarray:
    """1 - max_a p_a, with p = softmax(logits [T, N, A])."""
    return 1.0 - _softmax(logits)[2].max(axis=-1)


def min_margin(logits: np.ndarray) -> np.ndarray:
    """1 - (p_(1) - p_(2)): one minus the gap between the two largest action probabilities."""
    p = _softmax(logits)[2]
    a = p.shape[-1]
    top2 = np.partition(p, a - 2, axis=-1)[..., a - 2 :]
    return 1.0 - (top2[..., 1] - top2[..., 0])


def value_l1(advantages: np.ndarray) -> np.ndarray:
    """|A_t|: the L1 value loss, A_t = v_t - V(x_t) (the paper's default strategy)."""
    return np.abs(advantages)


def gae(advantages: np.ndarray) -> np.ndarray:
    """A_t, signed (the `power` transform clips negative level scores at 0)."""
    return advantages


def positive_value_loss(advantages: np.ndarray) -> np.ndarray:
    """max(A_t, 0)."""
    return np.maximum(advantages, 0.0)


def one_step_td_error(rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, discount: float) -> np.ndarray:
    """|r_t + discount * V_{t+1} * (1 - done_t) - V_t| for `rewards [T, N]`, `values [T+1, N]`, `dones [T, N]`.

    Row T of `values` bootstraps the last step of an unroll; a terminal step never bootstraps.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        delta = rewards + discount * values[1:] * (~dones) - values[:-1]
    return np.abs(delta)


_ADVANTAGE_SCORES = {"value_l1": value_l1, "gae": gae, "positive_value_loss": positive_value_loss}
_LOGIT_SCORES = {"policy_entropy": policy_entropy, "least_confidence": least_confidence, "min_margin": min_margin}


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
        return _LOGIT_SCORES[strategy](logits)
    if strategy in ADVANTAGE_STRATEGIES:
        adv = as_float_array("advantages", _needed(strategy, "advantages", feedback.advantages), (T, N))
        return _ADVANTAGE_SCORES[strategy](adv)
    rewards = _needed(strategy, "rewards", feedback.rewards)
    values = _needed(strategy, "values", feedback.values)
    r = as_float_array("rewards", rewards, (T, N))
    v = as_float_array("values", values, (T + 1, N))
    return one_step_td_error(r, v, dones, discount)
