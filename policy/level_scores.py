"""PLR's level scores (Jiang et al. 2021, section 3 and table 1): the score of one finished episode from the acting
network's outputs, what the actors send the level service. A level score is a plug-in kind (`LEVEL_SCORES`, named by
`levels.strategy`): the built-ins are registered below under PLR's names, and a score of one's own is named by
`module:attribute`, a function of the same signature, `score(episode: Episode) -> float`.

A score reads the episode's rewards and what its `reads` attribute names of the acting network's outputs: `values`
(V(x_t) of each step; the default, for a function that sets none) and `policy_params` (its policy outputs, a
discrete policy's logits); the actors compute only what a run's score reads (`actors.episode_scorer`).

Pure NumPy. The per-step functions map per-step outputs `[T, N]` to per-step scores `[T, N]`; a built-in episode's
score is the mean of its steps' scores. Logit scores are normalised to [0, 1] and invariant to a constant shift of
the logits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple, Protocol

import numpy as np

from levelray.contracts.config_values import ConfigError
from levelray.contracts.levels import LOGIT_STRATEGIES
from levelray.contracts.plugins import PluginKind

__all__ = [
    "EPISODE_READS",
    "Episode",
    "LEVEL_SCORES",
    "LevelScore",
    "episode_advantages",
    "episode_score",
    "gae",
    "least_confidence",
    "load_level_score",
    "min_margin",
    "one_step_td_error",
    "policy_entropy",
    "positive_value_loss",
    "reading",
    "score_reads",
    "value_l1",
]

EPISODE_READS = ("values", "policy_params")  # what of the acting network's outputs a level score may read


class Episode(NamedTuple):
    """One finished episode of `L` steps, as the actor that played it saw it: what a level score reads."""

    rewards: np.ndarray  # [L] float64, the rewards the learner trains on
    values: np.ndarray | None  # [L] the acting network's V(x_t); None unless the score reads "values"
    policy_params: np.ndarray | None  # [L, P] its policy outputs (logits); None unless the score reads them
    solved: bool  # it reached its goal (where the env says so; False elsewhere)
    discount: float  # the learner's
    gae_lambda: float  # `levels.gae_lambda`

    def advantages(self) -> np.ndarray:
        """GAE `[L]` of the episode by the acting network's values (`episode_advantages`)."""
        return episode_advantages(self.rewards, self.values, self.discount, self.gae_lambda)


class LevelScore(Protocol):
    """A level score: a function of a finished episode; optionally a `reads` attribute (`EPISODE_READS`)."""

    def __call__(self, episode: Episode) -> float: ...


LEVEL_SCORES: PluginKind[LevelScore] = PluginKind("level score", "levels.strategy", "--level-strategy",
                                                  noun="level score function")


def reading(*fields: str) -> Callable[[LevelScore], LevelScore]:
    """Decorator: the level score reads `fields` of `EPISODE_READS` (its `reads`)."""

    def mark(score: LevelScore) -> LevelScore:
        score.reads = fields
        return score

    return mark


def score_reads(score: LevelScore) -> tuple[str, ...]:
    """What `score` reads of the acting network's outputs: its `reads` (default: the values)."""
    reads = getattr(score, "reads", ("values",))
    return (reads,) if isinstance(reads, str) else tuple(reads)


def load_level_score(strategy: str) -> LevelScore:
    """The level score `strategy` names (a scored one): a built-in by its name, a user's by `module:attribute`.
    ConfigError naming `--level-strategy`, the kind and what exists, or what is wrong with the one found."""
    score = LEVEL_SCORES.load(strategy)
    where = f"--level-strategy {strategy} (levels.strategy)"
    if not callable(score):
        raise ConfigError(f"{where}: a level score is a function of an Episode (policy.level_scores.Episode) that "
                          f"returns a float, got {type(score).__name__}")
    unknown = sorted(set(score_reads(score)) - set(EPISODE_READS))
    if unknown:
        raise ConfigError(f"{where} reads {', '.join(unknown)}: a level score reads only "
                          f"{', '.join(EPISODE_READS)}")
    return score


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
    """The built-in score `strategy` of one finished episode of `L` steps: the advantage strategies and
    one_step_td_error read `rewards [L]` and `values [L]` (the acting network's V(x_t)); the logit strategies the
    mean of their step scores `logit_scores [L]`, computed as the steps were played."""
    if strategy in LOGIT_STRATEGIES:
        return float(np.mean(logit_scores))
    rewards = np.asarray(rewards, dtype=np.float64)
    return LEVEL_SCORES.load(strategy)(Episode(rewards, values, None, False, discount, gae_lambda))


# ----------------------------------------------------------------------------- the built-in level scores
@LEVEL_SCORES.register("value_l1")
def mean_value_l1(episode: Episode) -> float:
    """The mean |A_t| (the paper's default strategy)."""
    return float(np.mean(value_l1(episode.advantages())))


@LEVEL_SCORES.register("gae")
def mean_gae(episode: Episode) -> float:
    """The mean A_t, signed."""
    return float(np.mean(gae(episode.advantages())))


@LEVEL_SCORES.register("positive_value_loss")
def mean_positive_value_loss(episode: Episode) -> float:
    """The mean max(A_t, 0) (Robust PLR's and ACCEL's)."""
    return float(np.mean(positive_value_loss(episode.advantages())))


@LEVEL_SCORES.register("one_step_td_error")
def mean_one_step_td_error(episode: Episode) -> float:
    """The mean |r_t + discount V_{t+1} - V_t|; the episode's last step never bootstraps."""
    v = np.append(np.asarray(episode.values, dtype=np.float64), 0.0)
    done = np.zeros(len(episode.rewards), dtype=bool)
    done[-1] = True
    rewards = np.asarray(episode.rewards, dtype=np.float64)
    return float(np.mean(one_step_td_error(rewards[:, None], v[:, None], done[:, None], episode.discount)))


@LEVEL_SCORES.register("policy_entropy")
@reading("policy_params")
def mean_policy_entropy(episode: Episode) -> float:
    """The mean normalised entropy of the acting policy."""
    return float(np.mean(policy_entropy(episode.policy_params)))


@LEVEL_SCORES.register("least_confidence")
@reading("policy_params")
def mean_least_confidence(episode: Episode) -> float:
    """The mean 1 - max_a p_a of the acting policy."""
    return float(np.mean(least_confidence(episode.policy_params)))


@LEVEL_SCORES.register("min_margin")
@reading("policy_params")
def mean_min_margin(episode: Episode) -> float:
    """The mean 1 - (p_(1) - p_(2)) of the acting policy."""
    return float(np.mean(min_margin(episode.policy_params)))
