"""Env families: which family builds an env id, and the one small interface every part asks a family through.

A family is a plug-in kind (`ENV_FAMILIES`): the built-ins are the modules and folders of `levelray.families`
(`procgen`, `minigrid`, `maze`, `atari`, `gymnasium`), each registering itself under its short name at its end
(`register_family`), and a family of a user's own is `--env-family module:attribute`, with no edit of the package.
`env.family auto` tries the built-ins by their `DISPATCH_RANK` (lowest first; gymnasium, which takes any registered
id, last) and takes the first whose `matches` takes the id. Nothing in the package imports a family module: the
actors, the level service, evaluation and monitoring all come here, so that adding a family touches its own folder
and nothing else.

The env side (`EnvFamily`, four functions) is what every family has. The level side is optional, for families whose
levels are more than a seed to reset with:
- `level_statistics(env, resolve)`: a `LevelStatistics` measuring the levels the level service holds (the maze's
  wall counts and path lengths), or None; `resolve(level_id)` is the level an editor holds for an id (None: the
  family makes it from the id itself).
- level sets of its own for `levelray evaluate --levels` (`FamilyLevelSets`: the maze's `maze-suite`, `maze-25`,
  `maze-file:PATH`), planned into `LevelSet`s that evaluation plays like any other.
- an editor: a `levels.editor` plug-in that names the family it edits (`level_service.editors`), registered in the
  family's folder.
- `max_episode_steps(env)`: the time limit an env config plays with where `env.max_episode_steps` is None (the
  maze's default for its size), so that an evaluation can say which limit each level set had (`episode_limit`).
- `reports_success(env)`: True where its envs say whether each episode reached its goal (`StepResult.success`, so
  `EpisodeResults.solved` means something): a curriculum that learns from success rates (SFL's, `--level-source
  sfl`) runs only on such a family. A family without it reports none (CartPole: an episode ends, nothing is solved).
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from levelray.contracts.config import EnvConfig, RunConfig
from levelray.contracts.plugins import PluginKind
from levelray.contracts.spec import EnvSpec

__all__ = ["ENV_FAMILIES", "EnvFamily", "FamilyLevelSets", "LevelSet", "LevelStatistics", "available_env_ids",
           "episode_limit", "families", "family_name", "family_of", "level_statistics", "register_family",
           "reports_success"]

ENV_FAMILIES: PluginKind[EnvFamily] = PluginKind("env family", "env.family", "--env-family",
                                                 builtin_package="levelray.families")
DEFAULT_RANK = 50  # where a built-in without a `DISPATCH_RANK` is tried


class EnvFamily(Protocol):
    """What a family provides (module-level functions, or the attributes of any object)."""

    def matches(self, env_id: str) -> bool:
        """Whether this family builds `env_id` (it may still refuse it with a ValueError saying why)."""

    def make_vector(self, cfg: EnvConfig, num_envs: int, level_source: Any = None, seed: int = 0, *,
                    render: bool = False) -> Any:
        """`num_envs` envs of `cfg.id` as an `actors.env_vector.EnvVector`, levels drawn from `level_source` (an
        `actors.env_vector.LevelSource`); ValueError saying why for an id it matches but cannot build
        (`actors.env_vector.CannotRender` where `render` is asked of an env that cannot draw frames)."""

    def spec(self, cfg: EnvConfig) -> EnvSpec:
        """The spec of `cfg.id` without keeping an env around."""

    def ids(self) -> list[str]:
        """The ids (or id patterns, e.g. `atari:<game>`) this family takes, for error messages."""


class LevelStatistics(Protocol):
    """How the levels a level service holds look, in the family's own measures (see the module doc)."""

    descriptions: Mapping[str, str]  # each key `summary` gives -> what it measures (a Prometheus gauge's help)

    def summary(self, ids: np.ndarray) -> dict[str, float | None]:
        """Each of `descriptions`' keys over the distinct levels `ids [n]` (None where it has no value)."""


@dataclasses.dataclass(frozen=True)
class LevelSet:
    """One level set of an evaluation: `name`, its key in the results; `seeds [n]` int64, the level ids its
    episodes play (cycled); `env`, the env config they are played with (the run's, or the family's variant:
    `maze-<N>` has N walls, the suite's mazes DCD's test time limit); `suite`, whether it is one level of the
    family's test suite (what the suite's mean is over); `file`, the file it was read from, and `encodings`,
    `{id: encoding}` of its levels that exist only as data."""

    name: str
    seeds: np.ndarray
    env: EnvConfig
    suite: bool = False
    file: str | None = None
    encodings: dict[int, bytes] = dataclasses.field(default_factory=dict)


class FamilyLevelSets(Protocol):
    """A family's own level sets for `levelray evaluate --levels` (the generic ones are train, test and A-B)."""

    def forms(self) -> list[str]:
        """The forms of its items, in words, for a refusal ("maze-suite", "maze-<blocks> (e.g. maze-25)")."""

    def claims(self, item: str) -> bool:
        """Whether `item` is one of its forms; a ConfigError naming what is wrong where it is but cannot be played
        on any run (a suite level that does not exist, a file that does not parse)."""

    def plan(self, cfg: RunConfig, item: str, episodes: int, seed: int, planned: list[LevelSet]) -> list[LevelSet]:
        """The level sets `item` stands for on the run `cfg` (of this family), `planned` the sets before it (ids of
        levels that exist as data must not collide with theirs); ConfigError where the run cannot play it."""


def register_family(name: str, module_name: str) -> None:
    """Register the module `module_name` (a family module, calling this at its end) as built-in `name`."""
    ENV_FAMILIES.register(name)(sys.modules[module_name])


def families() -> tuple[EnvFamily, ...]:
    """The built-in families in the order `env.family auto` tries them."""
    found = [ENV_FAMILIES.load(name) for name in ENV_FAMILIES.names()]
    return tuple(sorted(found, key=lambda family: getattr(family, "DISPATCH_RANK", DEFAULT_RANK)))


def family_name(family: EnvFamily) -> str:
    """A built-in's registered name, else the family's `__name__` or its class name (for messages)."""
    named = {id(ENV_FAMILIES.load(name)): name for name in ENV_FAMILIES.names()}
    return named.get(id(family), getattr(family, "__name__", type(family).__name__))


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


def level_statistics(env: EnvConfig | None, resolve: Callable[[int], Any]) -> LevelStatistics | None:
    """The statistics of the run's family (see the module doc), None without an `env` section or where the family
    measures nothing."""
    make = None if env is None else getattr(family_of(env), "level_statistics", None)
    return None if make is None else make(env, resolve)


def reports_success(env: EnvConfig) -> bool:
    """Whether the run's family says which episodes reached their goal (see the module doc); False for a family
    that does not tell."""
    says = getattr(family_of(env), "reports_success", None)
    return bool(says(env)) if callable(says) else False


def episode_limit(env: EnvConfig) -> int | None:
    """The time limit `env`'s episodes play with: `env.max_episode_steps` where set, else the family's default
    where it says (`max_episode_steps`, see the module doc); None: the env's own limit, which its family does not
    report (a gymnasium id's registered one, MiniGrid's `max_steps`), or none."""
    if env.max_episode_steps is not None:
        return int(env.max_episode_steps)
    default = getattr(family_of(env), "max_episode_steps", None)
    return None if default is None else default(env)
