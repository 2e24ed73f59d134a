"""An env family of one's own, written outside the package: corridors whose level is their length.

`--env corridor:walk --env-family tests.corridor:FAMILY` trains on it with no edit of levelray: a level id `s` is a
corridor of `length(s)` cells; the agent starts in the first, moves left (action 0) or right (action 1), and ends
its episode with reward 1 on reaching the last; after `4 * length` steps (or `--max-episode-steps`) the episode is
cut (truncated, its final observation kept). The observation is `[position / length, 1 / length]`.
"""

from __future__ import annotations

import numpy as np

from levelray.actors.env_vector import CannotRender, EnvVector, LevelChooser, LevelSource, StepResult
from levelray.contracts.config import EnvConfig
from levelray.contracts.spec import EnvSpec

PREFIX = "corridor:"
SPEC = EnvSpec(obs_shape=(2,), obs_dtype="float32", discrete=True, num_actions=2)


def length(level: int) -> int:
    """The corridor a level id names: 2 to 8 cells."""
    return 2 + int(level) % 7


class CorridorVector(EnvVector):
    """K corridors, each on a level its level source chooses (`actors.env_vector.LevelChooser`)."""

    spec = SPEC

    def __init__(self, cfg: EnvConfig, num_envs: int, level_source: LevelSource | None, seed: int):
        self.num_envs = num_envs
        self.max_steps = cfg.max_episode_steps
        self._choose = LevelChooser(cfg, level_source, np.random.default_rng(seed))
        self.levels = np.zeros(num_envs, dtype=np.int64)
        self.lengths = np.ones(num_envs, dtype=np.int64)
        self.position = np.zeros(num_envs, dtype=np.int64)
        self.steps = np.zeros(num_envs, dtype=np.int64)

    def _start(self, k: int) -> None:
        self.levels[k] = self._choose(k)
        self.lengths[k] = length(self.levels[k])
        self.position[k] = self.steps[k] = 0

    def _observe(self) -> np.ndarray:
        return np.stack([self.position / self.lengths, 1.0 / self.lengths], axis=1).astype(np.float32)

    def reset(self) -> np.ndarray:
        for k in range(self.num_envs):
            self._start(k)
        return self._observe()

    def restart(self, envs: np.ndarray) -> np.ndarray:
        for k in envs:
            self._start(int(k))
        return self._observe()[np.asarray(envs, dtype=np.int64)]

    def step(self, actions: np.ndarray) -> StepResult:
        played = self.levels.copy()
        self.position = np.clip(self.position + np.where(np.asarray(actions) == 1, 1, -1), 0, self.lengths - 1)
        self.steps += 1
        terminated = self.position == self.lengths - 1
        limit = 4 * self.lengths if self.max_steps is None else np.full(self.num_envs, self.max_steps)
        truncated = ~terminated & (self.steps >= limit)
        rewards = terminated.astype(np.float32)
        final_obs = {int(k): self._observe()[k] for k in np.flatnonzero(truncated)}
        success = {int(k): bool(terminated[k]) for k in np.flatnonzero(terminated | truncated)}
        for k in np.flatnonzero(terminated | truncated):
            self._start(int(k))
        return StepResult(self._observe(), rewards, terminated, truncated, played, final_obs, success)

    def current_levels(self) -> np.ndarray:
        return self.levels.copy()


class CorridorFamily:
    """The family (`actors.envs.EnvFamily`): its ids, its spec, its vector."""

    def matches(self, env_id: str) -> bool:
        return env_id.startswith(PREFIX)

    def make_vector(self, cfg: EnvConfig, num_envs: int, level_source: LevelSource | None = None, seed: int = 0, *,
                    render: bool = False) -> CorridorVector:
        if render:
            raise CannotRender(f"{cfg.id}: corridors draw no frames")
        return CorridorVector(cfg, num_envs, level_source, seed)

    def spec(self, cfg: EnvConfig) -> EnvSpec:
        return SPEC

    def ids(self) -> list[str]:
        return [PREFIX + "<name>"]


FAMILY = CorridorFamily()
