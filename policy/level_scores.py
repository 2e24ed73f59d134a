"""PLR's per-step score functions, one per strategy (Jiang et al. 2021, section 3 and table 1), and the score
of one whole episode from the acting network's outputs (`episode_score`, what the actors send the level service).

Pure NumPy: each step function maps per-step outputs `[T, N]` to per-step scores `[T, N]` (float64); an
episode's score is the mean of its steps' scores. Logit scores are normalised to [0, 1] and invariant to a
constant shift of the logits.
"""

from __future__ import annotations

import math

import numpy as np

from levelray.contracts.levels import ADVANTAGE_STRATEGIES, LOGIT_STRATEGIES

__all__ = [
    "LOGIT_SCORES",
    "episode_advantages",
    "episode_score",
    "gae",
    "least_confidence",
    "min_margin",
    "one_step_td_error",
    "policy_entropy",
    "positive_value_loss",
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


ADVANTAGE_SCORES = {"value_l1": value_l1, "gae": gae, "positive_value_loss": positive_value_loss}
LOGIT_SCORES = {"policy_entropy": policy_entropy, "least_confidence": least_confidence, "min_margin": min_margin}


def episode_advantages(rewards: np.ndarray, values: np.ndarray, discount: float, gae_lambda: float) -> np.ndarray:
    """GAE `[L]` of one whole episode: `rewards [L]`, `values [L]` V(x_t) of its steps; the episode's end never
    bootstraps (DCD masks the bootstrap at time limits too). Float64, a backward pass over the steps."""
    r = np.asarray(rewards, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    nxt = np.append(v[1:], 0.0)
    delta = r + discount * nxt - v
    out = np.empty_like(delta)
    acc = 0.0
    decay = discount * gae_lambda
    for t in range(delta.size - 1, -1, -1):
        acc = delta[t] + decay * acc
        out[t] = acc
    return out


def episode_score(strategy: str, *, rewards: np.ndarray | None = None, values: np.ndarray | None = None,
                  logit_scores: np.ndarray | None = None, discount: float = 0.99, gae_lambda: float = 0.95) -> float:
    """The score of one finished episode of `L` steps: the mean of its step scores. The advantage strategies and
    one_step_td_error read `rewards [L]` and `values [L]` (the acting network's V(x_t)); the logit strategies
    their step scores `logit_scores [L]` (`LOGIT_SCORES` of the acting logits, computed as the steps were played)."""
    if strategy in LOGIT_STRATEGIES:
        return float(np.mean(logit_scores))
    if strategy in ADVANTAGE_STRATEGIES:
        adv = episode_advantages(rewards, values, discount, gae_lambda)
        return float(np.mean(ADVANTAGE_SCORES[strategy](adv)))
    v = np.append(np.asarray(values, dtype=np.float64), 0.0)
    done = np.zeros(len(rewards), dtype=bool)
    done[-1] = True
    return float(np.mean(one_step_td_error(np.asarray(rewards, dtype=np.float64)[:, None], v[:, None], done[:, None],
                                           discount)))
