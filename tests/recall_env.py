"""A memory task for tests: recall a cue after a delay, which a feed-forward policy can only guess.

An episode is `DELAY + 2` steps. The first observation shows the cue, one of two (`[1, 0, 0]` or `[0, 1, 0]`); the
next `DELAY` are blank (`[0, 0, 0]`) and the last asks for it (`[0, 0, 1]`). Actions do nothing until the question;
the answer (action 0 or 1) ends the episode with reward 1 if it names the cue, else 0. The question's observation is
the same whatever the cue, so a policy without memory succeeds in half the episodes at best; one that carries the
cue for `DELAY + 1` steps succeeds in all. A gymnasium env like any other: levelray runs it by its registered id.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

RECALL_ID = "LevelrayTest/Recall-v0"
DELAY = 4


class Recall(gym.Env):
    """See the module doc; `info["is_success"]` at the answer."""

    observation_space = spaces.Box(0.0, 1.0, (3,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, delay: int = DELAY):
        self.delay = delay
        self.t = 0
        self.cue = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(3, dtype=np.float32)
        if self.t == 0:
            obs[self.cue] = 1.0
        elif self.t == self.delay + 1:
            obs[2] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t, self.cue = 0, int(self.np_random.integers(2))
        return self._obs(), {}

    def step(self, action):
        if self.t == self.delay + 1:
            correct = int(action) == self.cue
            return np.zeros(3, dtype=np.float32), float(correct), True, False, {"is_success": correct}
        self.t += 1
        return self._obs(), 0.0, False, False, {}


def register() -> None:
    """Register `RECALL_ID` with gymnasium (once per process)."""
    if RECALL_ID not in gym.envs.registry:
        gym.register(RECALL_ID, entry_point=Recall)
