"""MiniGrid's dict observation as one array: the wrapper every MiniGrid env of levelray is built with.

`MiniGridObs` turns MiniGrid's dict observation into the one uint8 array `contracts.spec` documents for
`MINIGRID_OBS` (`[7, 7, 4]`: the symbolic view plus the direction broadcast in channel 3; the mission
string is dropped, which loses nothing where the layout shows the one goal, as in DoorKey, MultiRoom,
KeyCorridor, LavaGap, the Crossings, FourRooms; in Fetch, GoToDoor, GoToObject and PutNear the mission alone
says which object or door is meant, so there the agent can only guess) and reports success
the way `families.gymnasium_env` reads it, `info["is_success"]` at the episode's last step: MiniGrid's reward
is positive only when the agent reaches the goal (`1 - 0.9 * steps / max_steps`), so success is terminated
with reward > 0. MiniGrid's own `max_steps` is its time limit, reported as `truncated`.

This module imports only gymnasium, minigrid and numpy: `benchmarks/bench_vs_rllib.py` loads it by path in
RLlib's venv, where levelray is not installed, so RLlib sees the observations levelray's actors see.
"""

from __future__ import annotations

import gymnasium as gym
import minigrid  # noqa: F401  (registers the MiniGrid-* ids with gymnasium)
import numpy as np
from gymnasium import spaces


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


def make(env_id: str, max_steps: int | None = None, render_mode: str | None = None) -> gym.Env:
    """One wrapped MiniGrid env of a gymnasium id; `max_steps` overrides MiniGrid's own time limit
    (`--max-episode-steps`); `render_mode="rgb_array"`: `render()` draws the whole grid (the agent's view
    shaded), not the agent's 7x7 view."""
    kwargs = {} if max_steps is None else {"max_steps": max_steps}
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    return MiniGridObs(gym.make(env_id, disable_env_checker=True, **kwargs))
