"""What every env family shares: the `EnvVector` interface, its `StepResult`, and the level choice.

An env vector steps K copies of one environment, each copy playing a level chosen from outside:
`level_source(env_index) -> int | None` picks the next level of an env when its episode ends (None: a
uniform draw from the training level set, `LevelChooser`). Every step reports the level each env really
played. The families (`families.procgen_env`, `minigrid_env`, `maze_env`, `atari_env`, `gymnasium_env`) build on
this module; `actors.envs` picks the family of an env id.

A vector built with `render=True` (one env, for an episode video or a level's picture) also gives each env's
current frame as a person sees it, `render(k)`: procgen's 512x512 rendering, MiniGrid's whole grid, Atari's
screen, a gymnasium env's `rgb_array`. Only such a vector renders: rendering costs every step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from levelray.contracts.config import EnvConfig
from levelray.contracts.spec import EnvSpec

LevelSource = Callable[[int], "int | None"]


@dataclass
class StepResult:
    """One step of K envs. `obs` is the next observation, already the first of a new episode where
    the previous one ended; `final_obs[k]` holds the true final observation of truncated env k, and
    `success[k]` whether env k's episode that ended on this step reached its goal, where the env says
    (procgen's `prev_level_complete`, gymnasium's `is_success` info); absent when it does not say.
    `raw_rewards`: the env's own rewards where `rewards` (what the learner trains on) were transformed
    (Atari's reward clipping), else None; episode returns are sums of `episode_rewards`."""

    obs: np.ndarray  # [K, *obs_shape]
    rewards: np.ndarray  # [K] float32
    terminated: np.ndarray  # [K] bool
    truncated: np.ndarray  # [K] bool
    level_seeds: np.ndarray  # [K] int64, the level each env played on this step
    final_obs: dict[int, np.ndarray]
    success: dict[int, bool] = field(default_factory=dict)
    raw_rewards: np.ndarray | None = None  # [K] float32

    @property
    def episode_rewards(self) -> np.ndarray:
        """What episode returns add up: the env's own rewards (`raw_rewards` where rewards were clipped)."""
        return self.rewards if self.raw_rewards is None else self.raw_rewards


class CannotRender(ValueError):
    """The env cannot give RGB frames (a gymnasium env without an `rgb_array` render mode); says which."""


class EnvVector:
    """K envs of one id: `reset()` gives the first observations `[K, *obs_shape]`, `step(actions [K, ...])`
    a `StepResult` (an ended env is restarted on a new level within the same step), `current_levels()` the
    level each env plays now `[K]`, `restart(envs)` starts the given envs on new levels at once; built with
    `render=True`, `render(k)` (see the module doc)."""

    spec: EnvSpec
    num_envs: int
    render_fps: float = 15.0  # the speed a recorded episode plays at: the game's own pace where it has one

    def reset(self) -> np.ndarray:
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> StepResult:
        raise NotImplementedError

    def current_levels(self) -> np.ndarray:
        raise NotImplementedError

    def restart(self, envs: np.ndarray) -> np.ndarray:
        """Abandon the running episodes of envs `envs [n]` and start each on the next level its level source gives
        (a level window's start, `actors.level_windows`): their first observations `[n, *obs_shape]`, in the
        order of `envs`. The caller marks the abandoned episodes' last steps truncated."""
        raise NotImplementedError

    def render(self, k: int = 0) -> np.ndarray:
        """Env k's current frame as a person sees it, uint8 `[H, W, 3]` (a vector built with `render=True`)."""
        raise NotImplementedError(f"{type(self).__name__} was built without render=True")

    def close(self) -> None:
        pass


def rgb_frame(frame, env_id: str) -> np.ndarray:
    """`frame` as a uint8 `[H, W, 3]` array (a copy); CannotRender naming `env_id` for anything else (a
    gymnasium env asked for a render mode it lacks returns None)."""
    array = None if frame is None else np.asarray(frame)
    if array is None or array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8:
        got = "nothing" if array is None else f"{array.dtype} {array.shape}"
        raise CannotRender(f"{env_id} rendered {got}, not an RGB frame (uint8 [H, W, 3])")
    return array.copy()


class LevelDraws:
    """A level source fed by the level service, that remembers whether each env's current level is a replay.

    The service hands out `(level id, replayed)` pairs; `replayed [K]` holds the flag of the level each env plays
    now, so a rollout reads it before a step to know the flag of that step's level (an env whose episode ends
    in the step asks for its next level inside it). Robust PLR trains only on replayed steps; a level this
    source could not give (None: a uniform draw) counts as new. Subclasses say where the pairs come from.

    Levels that exist only as data (ACCEL's children) arrive with their encodings: `encodings` maps their ids
    to them for the env to build the level from at its reset (`families.maze.env`). It keeps what is queued and
    what an env plays, and forgets the rest once it grows past twice that.
    """

    def __init__(self, num_envs: int):
        self.replayed = np.zeros(num_envs, dtype=bool)
        self.playing = np.full(num_envs, -1, dtype=np.int64)  # [K] the level id each env was last handed
        self.encodings: dict[int, bytes] = {}

    def next_level(self) -> tuple[int, bool] | None:
        raise NotImplementedError

    def __call__(self, env_index: int) -> int | None:
        drawn = self.next_level()
        self.replayed[env_index] = drawn is not None and drawn[1]
        self.playing[env_index] = -1 if drawn is None else drawn[0]
        return None if drawn is None else drawn[0]

    def remember(self, encodings: dict[int, bytes], queued: Iterable[int] = ()) -> None:
        """Keep `encodings` (`{id: bytes}` from the service, about to be handed out); `queued`: the ids still
        waiting to be handed out."""
        if not encodings:
            return
        self.encodings.update(encodings)
        queued = list(queued)
        if len(self.encodings) > 2 * (len(queued) + len(encodings) + self.playing.size) + 64:
            keep = {*queued, *encodings, *self.playing.tolist()}
            self.encodings = {i: data for i, data in self.encodings.items() if i in keep}


class WithEncodings:
    """A level source together with the encodings (`{id: bytes}`) of the levels among its ids that exist only as
    data (mazes read from files): the maze family reads them as it reads `LevelDraws.encodings`."""

    def __init__(self, source: LevelSource, encodings: dict[int, bytes]):
        self.source = source
        self.encodings = dict(encodings)

    def __call__(self, env_index: int) -> int | None:
        return self.source(env_index)


class LevelChooser:
    """The next level of env k: `level_source(k)`, or, where there is no source or it returns None, a
    uniform draw from the config's level set (`start_level` + `[0, num_levels)`; `num_levels` 0: any seed)."""

    def __init__(self, cfg: EnvConfig, level_source: LevelSource | None, rng: np.random.Generator):
        self.start, self.count = cfg.start_level, cfg.num_levels
        self.source = level_source
        self.rng = rng

    def __call__(self, env_index: int) -> int:
        seed = self.source(env_index) if self.source is not None else None
        if seed is None:
            hi = self.count if self.count > 0 else 2**31 - 1 - self.start
            seed = self.start + int(self.rng.integers(hi))
        return int(seed)


def spec_of_one_env(make_vector: Callable[[EnvConfig, int], EnvVector], cfg: EnvConfig) -> EnvSpec:
    """A family's spec read off a vector of one env, closed at once."""
    vec = make_vector(cfg, 1)
    try:
        return vec.spec
    finally:
        vec.close()
