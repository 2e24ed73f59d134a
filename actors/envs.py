"""Which env family builds an env id, behind one small interface (`EnvFamily`).

Five families, one module each, tried in this order (the first whose `matches` takes the id builds it):
- `actors.procgen_env`: `procgen:<game>`; a level is a procgen start state injected into an env slot.
- `actors.minigrid_env`: `minigrid:<name>` (e.g. `minigrid:DoorKey-8x8`); the level is the reset seed.
- `actors.maze_env`: `maze:<W>x<H>` (e.g. `maze:13x13`); a level id is a seed the maze is generated from, or a
  maze of the test suite (`contracts.maze.level_for_id`).
- `actors.atari_env`: `atari:<game>`, `ALE/<Game>-v5`, `<Game>NoFrameskip-v4`; the level is the reset seed.
- `actors.gymnasium_env`: any other registered gymnasium id (CartPole's K envs as one NumPy array).
An id no family takes is refused with the list of what exists.

The family modules import their env library (procgen, minigrid, ale_py) only when they build an env, so
asking which family an id belongs to costs nothing but gymnasium. The vectors share `actors.env_vector`.

`level_frame(cfg, seed)` is the picture of one level (a report's gallery); episode videos play a vector built
with `make_env_vector(..., render=True)`, whose `render(k)` gives the frames (see `actors.env_vector`).
"""

from __future__ import annotations

import difflib
from typing import Protocol

import numpy as np

from levelray.actors.env_vector import EnvVector, LevelDraws, LevelSource
from levelray.contracts.config import EnvConfig
from levelray.contracts.spec import EnvSpec


class EnvFamily(Protocol):
    """What a family module provides (as module-level functions)."""

    def matches(self, env_id: str) -> bool:
        """Whether this family builds `env_id` (it may still refuse it with a ValueError saying why)."""

    def make_vector(self, cfg: EnvConfig, num_envs: int, level_source: LevelSource | None = None,
                    seed: int = 0, *, render: bool = False) -> EnvVector:
        """`num_envs` envs of `cfg.id`; ValueError saying why for an id it matches but cannot build
        (`env_vector.CannotRender` where `render` is asked of an env that cannot draw frames)."""

    def spec(self, cfg: EnvConfig) -> EnvSpec:
        """The spec of `cfg.id` without keeping an env around."""

    def ids(self) -> list[str]:
        """The ids (or id patterns, e.g. `atari:<game>`) this family takes, for error messages."""


def families() -> tuple[EnvFamily, ...]:
    """The families in dispatch order; gymnasium takes any registered id, so it comes last."""
    from levelray.actors import atari_env, gymnasium_env, maze_env, minigrid_env, procgen_env

    return (procgen_env, minigrid_env, maze_env, atari_env, gymnasium_env)


def family_of(env_id: str) -> EnvFamily:
    """The family that builds `env_id`; ValueError listing the ids that exist (and close ones) where none does."""
    family = next((family for family in families() if family.matches(env_id)), None)
    if family is None:
        ids = available_env_ids()
        close = difflib.get_close_matches(env_id, ids, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown environment id {env_id!r}.{hint} Available: {', '.join(ids)}")
    return family


def available_env_ids() -> list[str]:
    return [env_id for family in families() for env_id in family.ids()]


def make_env_vector(cfg: EnvConfig, num_envs: int, level_source: LevelSource | None = None, seed: int = 0, *,
                    render: bool = False) -> EnvVector:
    """Build the env vector for `cfg.id`; an unknown id raises ValueError listing what exists. `render`: the
    vector also draws each env's frame for a person (`EnvVector.render`), at a cost every step."""
    return family_of(cfg.id).make_vector(cfg, num_envs, level_source, seed, render=render)


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
    return family_of(cfg.id).spec(cfg)
