"""Env vectors by env id, built by the env family that takes the id (`contracts.families`).

The families live in `levelray.families` (procgen, minigrid, maze, atari, gymnasium), each one module or folder that
registers itself, and a family of a user's own is named by `--env-family module:attribute`; this module imports none
of them. The vectors share `actors.env_vector`.

`level_frame(cfg, seed)` is the picture of one level (a report's gallery); episode videos play a vector built
with `make_env_vector(..., render=True)`, whose `render(k)` gives the frames (see `actors.env_vector`).
"""

from __future__ import annotations

import numpy as np

from levelray.actors.env_vector import EnvVector, LevelDraws, LevelSource
from levelray.contracts.config import EnvConfig
from levelray.contracts.families import family_of
from levelray.contracts.spec import EnvSpec


def make_env_vector(cfg: EnvConfig, num_envs: int, level_source: LevelSource | None = None, seed: int = 0, *,
                    render: bool = False) -> EnvVector:
    """Build the env vector for `cfg.id`; an unknown id raises ValueError listing what exists. `render`: the
    vector also draws each env's frame for a person (`EnvVector.render`), at a cost every step."""
    return family_of(cfg).make_vector(cfg, num_envs, level_source, seed, render=render)


class _OneLevel(LevelDraws):
    """Always level `level_id`, with the encodings of levels that exist only as data (edited mazes)."""

    def __init__(self, level_id: int, encodings: dict[int, bytes] | None):
        super().__init__(1)
        self.level_id = int(level_id)
        self.encodings = dict(encodings or {})

    def next_level(self) -> tuple[int, bool]:
        return self.level_id, False


def level_frame(cfg: EnvConfig, seed: int, encodings: dict[int, bytes] | None = None) -> np.ndarray:
    """The first frame of level `seed` as a person sees it, uint8 `[H, W, 3]`: procgen's 512x512 rendering
    of the level's start, MiniGrid's whole grid after `reset(seed=seed)` (32 pixels a cell), Atari's screen,
    a gymnasium env's `render()` after `reset(seed=seed)` (CartPole: 400x600). The same frame for the same
    `cfg` and seed. `encodings`: `{id: bytes}` of levels that exist only as data (an edited maze's id is drawn
    from its encoding). `env_vector.CannotRender` (a ValueError) names an env that cannot draw frames."""
    vec = make_env_vector(cfg, 1, _OneLevel(seed, encodings), render=True)
    try:
        vec.reset()
        return vec.render(0)
    finally:
        vec.close()


def env_spec(cfg: EnvConfig) -> EnvSpec:
    """The spec of `cfg.id` without keeping an env around."""
    return family_of(cfg).spec(cfg)
