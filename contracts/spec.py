"""What the learner needs to know about an environment to build a network, shared by actors and learner."""

from __future__ import annotations

from dataclasses import dataclass

# `EnvSpec.obs_encoding` of MiniGrid (`--env minigrid:<name>`): uint8 `[7, 7, 4]`, the agent's 7×7
# egocentric partial view indexed `[x, y]` as MiniGrid's own `image` (x left to right, y far to near as the
# agent sees it: the agent is at `[3, 6]`, facing y = 0).
# Channels 0-2 are MiniGrid's own symbolic `image` (object index 0-10, colour index 0-5, state index 0-2:
# door open/closed/locked); channel 3 is the agent's direction 0-3 (right, down, left, up), the same
# value in every cell. One array, so it travels like any image observation (the unroll holds one `obs`).
# The maze family's DCD view (`env.maze_view dcd`) is the same encoding at `[5, 5, 4]` (the agent at `[2, 4]`),
# every cell seen: DCD's separate direction input is channel 3, and a network reads the view size from the shape.
MINIGRID_OBS = "minigrid"
MINIGRID_CHANNELS = ("object", "colour", "state", "direction")
# Rows of the index tables a network needs for each channel: MiniGrid 3.0.0 has 11 object types, 6 colours,
# 3 states and 4 directions; the tables leave room, and larger values are clamped to the last row.
MINIGRID_TABLE_SIZES = (16, 8, 4, 4)


@dataclass(frozen=True)
class EnvSpec:
    """Observation and action spaces of one environment copy.

    `obs_shape` excludes time and batch; image observations are uint8 `[H, W, C]`. Discrete actions are
    int64 indices in `[0, num_actions)`; continuous actions are float32 `[action_dim]`, and the policy
    outputs `[2 * action_dim]` parameters (mean, log-std).

    `obs_encoding` names a layout that is not plain pixels or a plain vector: "" (none: the env's own
    array), or `MINIGRID_OBS` (MiniGrid's symbolic view, see above), which `policy.models.build_model`
    gives its own network.
    """

    obs_shape: tuple[int, ...]
    obs_dtype: str
    discrete: bool
    num_actions: int = 0
    action_dim: int = 0
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    obs_encoding: str = ""

    @property
    def is_image(self) -> bool:
        """Pixels: uint8 `[H, W, C]` that is not a symbolic grid such as MiniGrid's."""
        return self.obs_dtype == "uint8" and len(self.obs_shape) == 3 and not self.obs_encoding

    @property
    def is_minigrid(self) -> bool:
        return self.obs_encoding == MINIGRID_OBS

    @property
    def policy_params(self) -> int:
        """Width of the policy head: logits, or (mean, log-std) pairs."""
        return self.num_actions if self.discrete else 2 * self.action_dim

    @property
    def core_input_size(self) -> int:
        """Width of a recurrent core's extra input per step (`policy.recurrent`): the previous action (one-hot
        `[num_actions]`, or the action vector `[action_dim]`) and the previous reward."""
        return (self.num_actions if self.discrete else self.action_dim) + 1

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: dict) -> EnvSpec:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})
