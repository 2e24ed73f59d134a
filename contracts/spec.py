"""What the learner needs to know about an environment to build a network, shared by actors and learner."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvSpec:
    """Observation and action spaces of one environment copy.

    `obs_shape` excludes time and batch; image observations are uint8 `[H, W, C]`. Discrete actions are
    int64 indices in `[0, num_actions)`; continuous actions are float32 `[action_dim]`, and the policy
    outputs `[2 * action_dim]` parameters (mean, log-std).
    """

    obs_shape: tuple[int, ...]
    obs_dtype: str
    discrete: bool
    num_actions: int = 0
    action_dim: int = 0
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()

    @property
    def is_image(self) -> bool:
        return self.obs_dtype == "uint8" and len(self.obs_shape) == 3

    @property
    def policy_params(self) -> int:
        """Width of the policy head: logits, or (mean, log-std) pairs."""
        return self.num_actions if self.discrete else 2 * self.action_dim

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: dict) -> EnvSpec:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
