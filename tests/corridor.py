"""An env family of one's own, written outside the package: corridors whose level is their length.

`--env corridor:walk --env-family tests.corridor:FAMILY` trains on it with no edit of levelray: a level id `s` is a
corridor of `length(s)` cells; the agent starts in the first, moves left (action 0) or right (action 1), and ends
its episode with reward 1 on reaching the last; after `4 * length` steps (or `--max-episode-steps`) the episode is
cut (truncated, its final observation kept). The observation is `[position / length, 1 / length]`.

Its levels are more than seeds, as a maze's are: an editor (`--level-editor tests.corridor:CorridorEditor`) makes
longer or shorter children that exist only as data, the level service reports the mean length of the levels it
holds (`levels_mean_length`), and `levelray evaluate --levels corridor-<N>` plays the corridor of N cells.
"""

from __future__ import annotations

import re

import numpy as np

from levelray.actors.env_vector import CannotRender, EnvVector, LevelChooser, LevelSource, StepResult
from levelray.contracts.config import ConfigError, EnvConfig, RunConfig
from levelray.contracts.families import LevelSet
from levelray.contracts.levels import EDITED_ID_BASE, LEVEL_ID_BASE
from levelray.contracts.spec import EnvSpec
from levelray.level_service.edited_levels import EditedLevels

PREFIX = "corridor:"
SPEC = EnvSpec(obs_shape=(2,), obs_dtype="float32", discrete=True, num_actions=2)
MAX_LENGTH = 32
LENGTH_SET = re.compile(r"^corridor-(\d+)$")


def length(level: int, encodings: dict[int, bytes] | None = None) -> int:
    """The corridor a level id names: a seed's is 2 to 8 cells, `LEVEL_ID_BASE + n` is n cells, and an edited
    one is its encoding (one byte, the length)."""
    level = int(level)
    if level >= EDITED_ID_BASE:
        return (encodings or {})[level][0]
    return level - LEVEL_ID_BASE if level >= LEVEL_ID_BASE else 2 + level % 7


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
        self.lengths[k] = length(self.levels[k], getattr(self._choose.source, "encodings", None))
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


class CorridorEditor(EditedLevels):
    """ACCEL's editor for corridors: a child is its parent made up to `num_edits` cells longer or shorter (at
    least 2, at most `MAX_LENGTH`); queueing and holding the children are `EditedLevels`'."""

    edits_env = PREFIX
    edits_family = "a corridor (--env corridor:<name>)"

    def __init__(self, num_edits: int, queue_limit: int, drop_unsolvable: bool = False):
        super().__init__("corridors", num_edits, queue_limit, drop_unsolvable)

    @classmethod
    def for_run(cls, env: EnvConfig, levels) -> CorridorEditor:
        return cls(levels.num_edits, levels.buffer_size, levels.drop_unsolvable)

    def generated(self, level_id: int) -> int:
        return length(level_id)

    def edit(self, level: int, rng: np.random.Generator) -> int:
        step = int(rng.integers(1, self.num_edits + 1)) * (1 if rng.random() < 0.5 else -1)
        return int(np.clip(level + step, 2, MAX_LENGTH))

    def encode(self, level: int) -> bytes:
        return bytes([level])

    def decode(self, data: bytes) -> int:
        if len(data) != 1 or not 2 <= data[0] <= MAX_LENGTH:
            raise ValueError(f"a corridor is one byte, its length in [2, {MAX_LENGTH}], got {bytes(data)!r}")
        return data[0]

    def family_state(self) -> list[int]:
        return []

    @classmethod
    def for_family_state(cls, values, num_edits: int, queue_limit: int, drop_unsolvable: bool) -> CorridorEditor:
        return cls(num_edits, queue_limit, drop_unsolvable)


class CorridorLengths:
    """The level statistics (`contracts.families.LevelStatistics`): how long the levels a level service holds are."""

    descriptions = {"levels_mean_length": "Corridor runs: mean length of the scored levels, in cells"}

    def __init__(self, resolve):
        self.resolve = resolve  # the level an editor holds, None for a seed

    def summary(self, ids) -> dict[str, float | None]:
        lengths = [self.resolve(i) or length(i) for i in np.unique(np.asarray(ids, dtype=np.int64)).tolist()]
        return {"levels_mean_length": float(np.mean(lengths)) if lengths else None}


class CorridorLevelSets:
    """`corridor-<N>` (`contracts.families.FamilyLevelSets`): the corridor of N cells, level id `LEVEL_ID_BASE + N`."""

    def forms(self) -> list[str]:
        return ["corridor-<N> (the corridor of N cells)"]

    def claims(self, item: str) -> bool:
        match = LENGTH_SET.match(item)
        if match is not None and not 2 <= int(match.group(1)) <= MAX_LENGTH:
            raise ConfigError(f"--levels {item}: a corridor has 2 to {MAX_LENGTH} cells")
        return match is not None

    def plan(self, cfg: RunConfig, item: str, episodes: int, seed: int, planned: list[LevelSet]) -> list[LevelSet]:
        level_id = LEVEL_ID_BASE + int(LENGTH_SET.match(item).group(1))
        return [LevelSet(item, np.array([level_id], dtype=np.int64), cfg.env)]


class CorridorFamily:
    """The family (`contracts.families.EnvFamily`): its ids, its spec, its vector, and its levels' side."""

    level_sets = CorridorLevelSets()

    def level_statistics(self, env: EnvConfig, resolve) -> CorridorLengths:
        return CorridorLengths(resolve)

    def reports_success(self, env: EnvConfig) -> bool:
        return True  # an episode that reaches the last cell is solved (`CorridorVector.step`)

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
