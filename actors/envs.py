"""Which env family builds an env id, behind one small interface (`EnvFamily`): a plug-in kind (`ENV_FAMILIES`).

Five built-in families, one module each, registered under a short name beside their code and tried in this order by
`env.family auto` (the first whose `matches` takes the id builds it):
- `procgen` (`actors.procgen_env`): `procgen:<game>`; a level is a procgen start state injected into an env slot.
- `minigrid` (`actors.minigrid_env`): `minigrid:<name>` (e.g. `minigrid:DoorKey-8x8`); the level is the reset seed.
- `maze` (`actors.maze_env`): `maze:<W>x<H>` (e.g. `maze:13x13`); a level id is a seed the maze is generated from,
  or a maze of the test suite (`contracts.maze.level_for_id`).
- `atari` (`actors.atari_env`): `atari:<game>`, `ALE/<Game>-v5`, `<Game>NoFrameskip-v4`; the level is the reset seed.
- `gymnasium` (`actors.gymnasium_env`): any other registered gymnasium id (CartPole's K envs as one NumPy array).
An id no family takes is refused with the list of what exists. A family of a user's own is named by
`--env-family module:attribute` (any object with the four functions of `EnvFamily`), with no edit of the package.

The family modules import their env library (procgen, minigrid, ale_py) only when they build an env, so
asking which family an id belongs to costs nothing but gymnasium. The vectors share `actors.env_vector`.

`level_frame(cfg, seed)` is the picture of one level (a report's gallery); episode videos play a vector built
with `make_env_vector(..., render=True)`, whose `render(k)` gives the frames (see `actors.env_vector`).
"""

from __future__ import annotations

import difflib
import sys
from typing import Protocol

import numpy as np

from levelray.actors.env_vector import EnvVector, LevelDraws, LevelSource
from levelray.contracts.config import EnvConfig
from levelray.contracts.plugins import PluginKind
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


# The built-in families, in the order `env.family auto` tries them (gymnasium takes any registered id, so it comes
# after Atari's ALE ids and last); each is the module `actors.<name>_env`, which registers itself.
DISPATCH_ORDER = ("procgen", "minigrid", "maze", "atari", "gymnasium")
ENV_FAMILIES: PluginKind[EnvFamily] = PluginKind("env family", "env.family", "--env-family",
                                                 tuple(f"levelray.actors.{name}_env" for name in DISPATCH_ORDER))


def register_family(name: str, module_name: str) -> None:
    """Register the module `module_name` (a family module, importing this one at its end) as built-in `name`."""
    ENV_FAMILIES.register(name)(sys.modules[module_name])


def families() -> tuple[EnvFamily, ...]:
    """The built-in families in dispatch order."""
    return tuple(ENV_FAMILIES.load(name) for name in DISPATCH_ORDER)


def family_of(cfg: EnvConfig) -> EnvFamily:
    """The family that builds `cfg.id`: `cfg.family`'s, or with `auto` the first built-in that takes it; ValueError
    listing the ids that exist (and close ones) where none does, or naming the family that does not take it."""
    if cfg.family != "auto":
        family = ENV_FAMILIES.load(cfg.family)
        if not family.matches(cfg.id):
            raise ValueError(f"--env-family {cfg.family} does not build env id {cfg.id!r}; it takes "
                             f"{', '.join(family.ids())}")
        return family
    family = next((family for family in families() if family.matches(cfg.id)), None)
    if family is None:
        ids = available_env_ids()
        close = difflib.get_close_matches(cfg.id, ids, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown environment id {cfg.id!r}.{hint} Available: {', '.join(ids)}")
    return family


def available_env_ids() -> list[str]:
    return [env_id for family in families() for env_id in family.ids()]


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
