"""The gymnasium family: any registered gymnasium id (`CartPole-v1`, `Pendulum-v1`, ...).

K envs stepped in a loop (`GymnasiumVector`); the level is the `reset(seed=...)` seed, and the action space
is seeded with it too. CartPole's K envs step as one NumPy array instead (`CartPoleVector`, the same episodes
and levels) unless `env.native_vector` is off, or the vector renders (`render=True`: envs made with
`render_mode="rgb_array"`, looped, since the NumPy CartPole draws nothing). The MiniGrid and Atari families
build on `GymnasiumVector`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from levelray.actors.env_vector import (
    CannotRender,
    EnvVector,
    LevelChooser,
    LevelSource,
    StepResult,
    rgb_frame,
    spec_of_one_env,
)
from levelray.contracts.config import EnvConfig
from levelray.contracts.families import register_family
from levelray.contracts.spec import EnvSpec


class GymnasiumVector(EnvVector):
    def __init__(
        self,
        env_id: str,
        num_envs: int,
        cfg: EnvConfig,
        level_source: LevelSource | None = None,
        seed: int = 0,
        make_env: Callable[[], gym.Env] | None = None,
        render: bool = False,
    ):
        """`make_env`: builds one env copy (default: `gym.make(env_id)` with the config's time limit, and
        `render_mode="rgb_array"` when `render`; a family's own `make_env` sets the render mode itself)."""
        if make_env is None:
            kwargs = {"disable_env_checker": True}  # the checker wraps every step; the spec is checked below
            if cfg.max_episode_steps is not None:
                kwargs["max_episode_steps"] = cfg.max_episode_steps
            if render:
                kwargs["render_mode"] = "rgb_array"

            def make_env():
                return gym.make(env_id, **kwargs)

        if render:
            check_rgb_array(env_id)
            # rgb_array frames are drawn off screen (pygame surfaces: CartPole, the Box2D envs); SDL still looks for a
            # display at pygame.init() and, on a headless machine, prints "XDG_RUNTIME_DIR is invalid" errors.
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        self.envs = [make_env() for _ in range(num_envs)]
        self.num_envs = num_envs
        self.env_id = env_id
        if render:
            self.render_fps = float(self.envs[0].metadata.get("render_fps") or self.render_fps)
        self._choose = LevelChooser(cfg, level_source, np.random.default_rng(seed))
        self._levels = np.zeros(num_envs, dtype=np.int64)
        self.spec = gymnasium_spec(self.envs[0], env_id)
        self._obs_dtype = np.dtype(self.spec.obs_dtype)
        if not self.spec.discrete:
            self._low = np.asarray(self.spec.action_low, dtype=np.float32)
            self._high = np.asarray(self.spec.action_high, dtype=np.float32)

    def _reset_env(self, k: int) -> np.ndarray:
        level = self._choose(k)
        obs, _ = self.envs[k].reset(seed=level)
        self.envs[k].action_space.seed(level)
        self._levels[k] = level
        return np.asarray(obs, dtype=self._obs_dtype)

    def reset(self) -> np.ndarray:
        return np.stack([self._reset_env(k) for k in range(self.num_envs)])

    def restart(self, envs: np.ndarray) -> np.ndarray:
        obs = [self._reset_env(int(k)) for k in np.asarray(envs, dtype=np.int64).tolist()]
        return np.stack(obs) if obs else np.empty((0, *self.spec.obs_shape), dtype=self._obs_dtype)

    def step(self, actions: np.ndarray) -> StepResult:
        played = self._levels.copy()
        # Python lists, one conversion each at the end: per-element writes into NumPy arrays cost
        # about as much as CartPole's own step.
        actions = actions.tolist() if self.spec.discrete else np.clip(actions, self._low, self._high)
        obs, rewards, terminated, truncated = [], [], [], []
        final_obs, success = {}, {}
        for k, env in enumerate(self.envs):
            o, r, term, trunc, info = env.step(actions[k])
            trunc = bool(trunc) and not term
            rewards.append(r)
            terminated.append(term)
            truncated.append(trunc)
            if term or trunc:
                if trunc:
                    final_obs[k] = np.asarray(o, dtype=self._obs_dtype)
                if "is_success" in info:
                    success[k] = bool(info["is_success"])
                o = self._reset_env(k)
            obs.append(o)
        return StepResult(
            np.asarray(obs, dtype=self._obs_dtype),
            np.asarray(rewards, dtype=np.float32),
            np.asarray(terminated, dtype=bool),
            np.asarray(truncated, dtype=bool),
            played,
            final_obs,
            success,
        )

    def current_levels(self) -> np.ndarray:
        return self._levels.copy()

    def render(self, k: int = 0) -> np.ndarray:
        return rgb_frame(self.envs[k].render(), self.env_id)

    def close(self) -> None:
        for env in self.envs:
            env.close()


class CartPoleVector(EnvVector):
    """K CartPoles stepped as one NumPy array: gymnasium's `CartPoleVectorEnv` for the dynamics, with each
    env's episodes started here so they are exactly those of `GymnasiumVector`.

    A CartPole episode is its initial state, which `CartPoleEnv.reset(seed=level)` draws as
    `default_rng(level).uniform(-0.05, 0.05, 4)`; this class draws the same state for the same level and
    writes it into the vector's state, so levels, PLR and held-out seeds mean what they mean for the
    looped envs (a test steps both side by side). The vector's own autoreset (on the step *after* an
    episode ended, with reward 0 and the action ignored) never fires: an ended env is restarted at once,
    as the `EnvVector` contract has it. Measured end to end in `benchmarks/RESULTS.md`.
    """

    IDS = ("CartPole-v0", "CartPole-v1")

    def __init__(self, env_id: str, num_envs: int, cfg: EnvConfig, level_source: LevelSource | None = None,
                 seed: int = 0):
        from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

        max_steps = cfg.max_episode_steps or gym.spec(env_id).max_episode_steps
        self.env = CartPoleVectorEnv(num_envs=num_envs, max_episode_steps=max_steps)
        self.env.reset(seed=seed)
        self.num_envs = num_envs
        self._choose = LevelChooser(cfg, level_source, np.random.default_rng(seed))
        self._levels = np.zeros(num_envs, dtype=np.int64)
        single = gym.make(env_id, disable_env_checker=True)
        self.spec = gymnasium_spec(single, env_id)
        single.close()

    def _start(self, envs) -> None:
        env = self.env
        for k in envs:
            level = self._choose(int(k))
            env.state[:, k] = np.random.default_rng(level).uniform(low=-0.05, high=0.05, size=(4,))
            self._levels[k] = level
        env.steps[envs] = 0
        env.prev_done[envs] = False

    def reset(self) -> np.ndarray:
        self._start(np.arange(self.num_envs))
        return self.env.state.T.astype(np.float32)

    def restart(self, envs: np.ndarray) -> np.ndarray:
        envs = np.asarray(envs, dtype=np.int64)
        self._start(envs)
        return self.env.state.T[envs].astype(np.float32)

    def step(self, actions: np.ndarray) -> StepResult:
        played = self._levels.copy()
        obs, rewards, terminated, truncated, _ = self.env.step(np.asarray(actions, dtype=np.int64))
        truncated = truncated & ~terminated
        ended = np.flatnonzero(terminated | truncated)
        final_obs = {int(k): obs[k].copy() for k in np.flatnonzero(truncated)}
        if len(ended):
            self._start(ended)
            obs = self.env.state.T.astype(np.float32)
        return StepResult(obs, rewards.astype(np.float32, copy=False), terminated, truncated, played, final_obs)

    def current_levels(self) -> np.ndarray:
        return self._levels.copy()


def check_rgb_array(env_id: str) -> None:
    """CannotRender naming `env_id` where its env class lists no `rgb_array` render mode; read off the class,
    before an env is made (`gym.make` would pass the render mode to a constructor that may not take one)."""
    from gymnasium.envs.registration import load_env_creator

    entry_point = gym.spec(env_id).entry_point
    creator = entry_point if callable(entry_point) else load_env_creator(entry_point)
    metadata = getattr(creator, "metadata", None)
    modes = list(metadata.get("render_modes") or []) if isinstance(metadata, dict) else []
    if "rgb_array" not in modes:
        raise CannotRender(f"{env_id} cannot render RGB frames: its render modes are "
                           f"{', '.join(map(str, modes)) or 'none'}, without rgb_array")


def gymnasium_spec(env: gym.Env, env_id: str) -> EnvSpec:
    """The `EnvSpec` of a gymnasium env: a Box observation (uint8 `[H, W, C]` is an image, anything else
    float32) and a Discrete (from 0) or 1-d Box action space; ValueError for anything else."""
    obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(obs_space, spaces.Box):
        raise ValueError(f"{env_id}: observation space {obs_space} is not a Box; levelray needs array observations")
    image = obs_space.dtype == np.uint8 and len(obs_space.shape) == 3
    obs_dtype = "uint8" if image else "float32"
    if isinstance(act_space, spaces.Discrete):
        if act_space.start != 0:
            raise ValueError(f"{env_id}: Discrete action spaces must start at 0, got start={act_space.start}")
        return EnvSpec(tuple(obs_space.shape), obs_dtype, True, num_actions=int(act_space.n))
    if isinstance(act_space, spaces.Box) and len(act_space.shape) == 1:
        return EnvSpec(
            tuple(obs_space.shape),
            obs_dtype,
            False,
            action_dim=int(act_space.shape[0]),
            action_low=tuple(float(x) for x in act_space.low),
            action_high=tuple(float(x) for x in act_space.high),
        )
    raise ValueError(f"{env_id}: action space {act_space} is neither Discrete nor a 1-d Box")


def matches(env_id: str) -> bool:
    return env_id in gym.envs.registry


def make_vector(cfg: EnvConfig, num_envs: int, level_source: LevelSource | None = None, seed: int = 0, *,
                render: bool = False) -> EnvVector:
    if cfg.native_vector and cfg.id in CartPoleVector.IDS and not render:
        return CartPoleVector(cfg.id, num_envs, cfg, level_source, seed)
    return GymnasiumVector(cfg.id, num_envs, cfg, level_source, seed, render=render)


def spec(cfg: EnvConfig) -> EnvSpec:
    return spec_of_one_env(make_vector, cfg)


def ids() -> list[str]:
    return sorted(gym.envs.registry.keys())


DISPATCH_RANK = 90  # tried last by `env.family auto`: it takes any registered gymnasium id
register_family("gymnasium", __name__)  # at the end: the family is this module's functions above
