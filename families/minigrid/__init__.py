"""The MiniGrid family (Farama `minigrid`) as a procedural family: `--env minigrid:<name>`.

`minigrid:DoorKey-8x8` is the gymnasium id `MiniGrid-DoorKey-8x8-v0`: the name is the id without its
`MiniGrid-` prefix and `-vN` suffix (the newest registered version; `minigrid:ObstructedMaze-2Q-v0` names
one explicitly). The level is the `reset(seed=...)` seed, as for any gymnasium env: MiniGrid draws the
whole layout (walls, doors, keys, goal, agent start) from it. Each env is wrapped by
`families.minigrid.obs.MiniGridObs` (the observation as one uint8 `[7, 7, 4]` array, success = reached the
goal). A bare `MiniGrid-...` id is refused with the name to use instead.

minigrid itself (~1 s to import) is imported only when a name is resolved or a vector built.
"""

from __future__ import annotations

import dataclasses
import difflib
import re

import gymnasium as gym

from levelray.actors.env_vector import LevelSource, spec_of_one_env
from levelray.contracts.config import EnvConfig
from levelray.contracts.families import register_family
from levelray.contracts.spec import MINIGRID_OBS, EnvSpec
from levelray.families.gymnasium_env import GymnasiumVector

PREFIX = "minigrid:"
_GYM_PREFIX = "MiniGrid-"
_ID = re.compile(r"^MiniGrid-(.+?)(?:-v(\d+))?$")
# The wave-function-collapse envs of minigrid 3.0.0 read pattern images its wheel does not ship.
_BROKEN = ("WFC-",)


def _registered() -> dict[str, dict[int, str]]:
    """{name: {version: gymnasium id}} of every registered MiniGrid env."""
    import minigrid  # noqa: F401  (registers the MiniGrid-* ids with gymnasium)

    found: dict[str, dict[int, str]] = {}
    for env_id in gym.envs.registry:
        m = _ID.match(env_id)
        if m and not m.group(1).startswith(_BROKEN):
            found.setdefault(m.group(1), {})[int(m.group(2) or 0)] = env_id
    return found


def minigrid_names() -> list[str]:
    """Every `minigrid:<name>` that can be played, sorted."""
    return sorted(PREFIX + name for name in _registered())


def gymnasium_id(name: str) -> str:
    """`DoorKey-8x8` -> `MiniGrid-DoorKey-8x8-v0`; ValueError naming how names are formed for any other."""
    known = _registered()
    m = re.match(r"^(.+?)(?:-v(\d+))?$", name)
    base, version = (m.group(1), m.group(2)) if m else (name, None)
    versions = known.get(base)
    if versions and version is None:
        return versions[max(versions)]
    if versions and int(version) in versions:
        return versions[int(version)]
    if base.startswith(_BROKEN) and any(i.startswith(f"MiniGrid-{base}-v") for i in gym.envs.registry):
        import minigrid

        raise ValueError(f"{PREFIX + name}: the wave-function-collapse envs of minigrid {minigrid.__version__} cannot "
                         f"start (its wheel lacks the pattern images they read)")
    close = difflib.get_close_matches(PREFIX + name, minigrid_names(), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ValueError(
        f"unknown MiniGrid env {PREFIX + name!r}.{hint} A name is the gymnasium id without its MiniGrid- prefix "
        f"and -vN suffix (minigrid:DoorKey-8x8 is MiniGrid-DoorKey-8x8-v0; add -vN for an older version). "
        f"Names: {', '.join(n[len(PREFIX):] for n in minigrid_names())}"
    )


def canonical_name(env_id: str) -> str:
    """`MiniGrid-DoorKey-8x8-v0` -> `minigrid:DoorKey-8x8` (the version kept only where it is not the newest)."""
    m = _ID.match(env_id)
    if m is None:
        raise ValueError(f"{env_id!r} is not a MiniGrid gymnasium id")
    short = PREFIX + m.group(1)
    return short if gymnasium_id(m.group(1)) == env_id else f"{short}-v{m.group(2)}"


class MiniGridVector(GymnasiumVector):
    """`minigrid:<name>`: see the module doc. `cfg.max_episode_steps` replaces MiniGrid's own `max_steps`
    (rather than adding a second time limit on top of it)."""

    def __init__(
        self, name: str, num_envs: int, cfg: EnvConfig, level_source: LevelSource | None = None, seed: int = 0,
        render: bool = False,
    ):
        from levelray.families.minigrid import obs as minigrid_obs

        self.gym_id = gymnasium_id(name)
        mode = "rgb_array" if render else None  # render(): the whole grid, as a person sees the level
        super().__init__(self.gym_id, num_envs, cfg, level_source, seed,
                         make_env=lambda: minigrid_obs.make(self.gym_id, cfg.max_episode_steps, mode), render=render)
        self.spec = dataclasses.replace(self.spec, obs_encoding=MINIGRID_OBS)


def matches(env_id: str) -> bool:
    return env_id.startswith((PREFIX, _GYM_PREFIX))


def make_vector(cfg: EnvConfig, num_envs: int, level_source: LevelSource | None = None, seed: int = 0, *,
                render: bool = False) -> MiniGridVector:
    """ValueError for a bare `MiniGrid-...` id: levelray encodes MiniGrid's dict observation only under the
    `minigrid:` name."""
    if cfg.id.startswith(_GYM_PREFIX):
        name = canonical_name(gymnasium_id(cfg.id[len(_GYM_PREFIX):]))
        raise ValueError(f"{cfg.id!r} is a MiniGrid env: use --env {name} (levelray encodes MiniGrid's dict "
                         f"observation into one array only under that name)")
    return MiniGridVector(cfg.id[len(PREFIX):], num_envs, cfg, level_source, seed, render)


def spec(cfg: EnvConfig) -> EnvSpec:
    return spec_of_one_env(make_vector, cfg)


def ids() -> list[str]:
    return [PREFIX + "<name>"]


def reports_success(cfg: EnvConfig) -> bool:
    """Every MiniGrid episode says whether the agent reached its goal (`obs.MiniGridObs`): SFL's success rates."""
    return True


DISPATCH_RANK = 20  # where `env.family auto` tries it (contracts.families)
register_family("minigrid", __name__)  # at the end: the family is this module's functions above
