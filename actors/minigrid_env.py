"""MiniGrid (Farama `minigrid`) as a procedural family: `--env minigrid:<name>`.

`minigrid:DoorKey-8x8` is the gymnasium id `MiniGrid-DoorKey-8x8-v0`: the name is the id without its
`MiniGrid-` prefix and `-vN` suffix (the newest registered version; `minigrid:ObstructedMaze-2Q-v0` names
one explicitly). The level is the `reset(seed=...)` seed, as for any gymnasium env: MiniGrid draws the
whole layout (walls, doors, keys, goal, agent start) from it.

`MiniGridObs` turns MiniGrid's dict observation into the one uint8 array `contracts.spec` documents for
`MINIGRID_OBS` (`[7, 7, 4]`: the symbolic view plus the direction broadcast in channel 3; the mission
string is dropped, which loses nothing where the layout shows the one goal, as in DoorKey, MultiRoom,
KeyCorridor, LavaGap, the Crossings, FourRooms; in Fetch, GoToDoor, GoToObject and PutNear the mission alone
says which object or door is meant, so there the agent can only guess) and reports success
the way `actors.envs` reads it, `info["is_success"]` at the episode's last step: MiniGrid's reward is
positive only when the agent reaches the goal (`1 - 0.9 * steps / max_steps`), so success is terminated
with reward > 0. MiniGrid's own `max_steps` is its time limit, reported as `truncated`.

This module imports gymnasium and minigrid (~1 s): `actors.envs` imports it only for a MiniGrid env.
"""

from __future__ import annotations

import difflib
import re

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid-* ids with gymnasium)
import numpy as np
from gymnasium import spaces

PREFIX = "minigrid:"
_ID = re.compile(r"^MiniGrid-(.+?)(?:-v(\d+))?$")
# The wave-function-collapse envs of minigrid 3.0.0 read pattern images its wheel does not ship.
_BROKEN = ("WFC-",)


def _registered() -> dict[str, dict[int, str]]:
    """{name: {version: gymnasium id}} of every registered MiniGrid env."""
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
        raise ValueError(f"{PREFIX + name}: the wave-function-collapse envs of minigrid {minigrid.__version__} cannot "
                         f"start (its wheel lacks the pattern images they read)")
    close = difflib.get_close_matches(PREFIX + name, minigrid_names(), n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ValueError(
        f"unknown MiniGrid env {PREFIX + name!r}.{hint} A name is the gymnasium id without its MiniGrid- prefix "
        f"and -vN suffix (minigrid:DoorKey-8x8 is MiniGrid-DoorKey-8x8-v0; add -vN for an older version). "
        f"Names: {', '.join(n[len(PREFIX):] for n in minigrid_names())}"
    )


class MiniGridObs(gym.Wrapper):
    """MiniGrid's dict observation as uint8 `[H, W, 4]` (see the module doc) and `info["is_success"]`
    on the last step of every episode."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        h, w, c = env.observation_space["image"].shape
        assert c == 3, env.observation_space
        self.observation_space = spaces.Box(0, 255, (h, w, 4), np.uint8)

    def _encode(self, obs: dict) -> np.ndarray:
        image = obs["image"]
        out = np.empty((*image.shape[:2], 4), dtype=np.uint8)
        out[..., :3] = image
        out[..., 3] = obs["direction"]
        return out

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._encode(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            info["is_success"] = bool(terminated and reward > 0)
        return self._encode(obs), reward, terminated, truncated, info


def canonical_name(env_id: str) -> str:
    """`MiniGrid-DoorKey-8x8-v0` -> `minigrid:DoorKey-8x8` (the version kept only where it is not the newest)."""
    m = _ID.match(env_id)
    if m is None:
        raise ValueError(f"{env_id!r} is not a MiniGrid gymnasium id")
    short = PREFIX + m.group(1)
    return short if gymnasium_id(m.group(1)) == env_id else f"{short}-v{m.group(2)}"


def make(env_id: str, max_steps: int | None = None) -> gym.Env:
    """One wrapped MiniGrid env; `max_steps` overrides MiniGrid's own time limit (`--max-episode-steps`)."""
    kwargs = {} if max_steps is None else {"max_steps": max_steps}
    return MiniGridObs(gym.make(env_id, disable_env_checker=True, **kwargs))
