"""Vectors of environments whose every copy plays a level chosen from outside.

Three kinds, one interface (`EnvVector`):
- procgen (`procgen:<game>`): one `ProcgenGym3Env` of K envs. Upstream procgen has no per-env seed
  call, so a chosen level is started by injecting its start state into that env's slot
  (`get_state`/`set_state`, ~2 ms per injection for 16 envs here). Start states are cached by seed;
  a seed never seen is built once with a 1-env `ProcgenGym3Env(num_levels=1, start_level=seed)`.
  Envs are never re-created per episode.
- gymnasium (any registered id): K envs stepped in a loop; the level is the `reset(seed=...)` seed.
  CartPole's K envs step as one NumPy array instead (`CartPoleVector`, same episodes and levels).
- MiniGrid (`minigrid:<name>`, e.g. `minigrid:DoorKey-8x8`): gymnasium envs as above (the level is the
  reset seed, which draws the whole layout), each wrapped by `actors.minigrid_env.MiniGridObs`: the
  symbolic view as one uint8 `[7, 7, 4]` array (`contracts.spec.MINIGRID_OBS`), success = reached the
  goal, MiniGrid's own `max_steps` as truncation.
- Atari (`atari:<game>`, e.g. `atari:breakout`, or `ALE/<Game>-v5`): gymnasium envs as above, each built
  by `actors.atari_env.make` (gymnasium's AtariPreprocessing and frame stacking: uint8 `[84, 84, 4]`);
  `AtariVector` clips the training reward to its sign and keeps the game's reward in `raw_rewards`.

`level_source(env_index) -> int | None` picks the next level of an env when its episode ends (None:
a uniform draw from the training level set). Every step reports the level the env really played:
procgen's own `level_seed`, or the seed the gymnasium env was reset with.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from levelray.contracts.config import EnvConfig
from levelray.contracts.spec import MINIGRID_OBS, EnvSpec

PROCGEN_GAMES = (
    "bigfish",
    "bossfight",
    "caveflyer",
    "chaser",
    "climber",
    "coinrun",
    "dodgeball",
    "fruitbot",
    "heist",
    "jumper",
    "leaper",
    "maze",
    "miner",
    "ninja",
    "plunder",
    "starpilot",
)
MINIGRID_PREFIX = "minigrid:"  # actors.minigrid_env.PREFIX; not imported from there: minigrid loads in ~1 s
ATARI_PREFIX = "atari:"  # actors.atari_env.PREFIX, likewise (ale_py and cv2 load only for Atari)
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


class EnvVector:
    spec: EnvSpec
    num_envs: int

    def reset(self) -> np.ndarray:
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> StepResult:
        raise NotImplementedError

    def current_levels(self) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _LevelChooser:
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


class ProcgenVector(EnvVector):
    def __init__(
        self,
        game: str,
        num_envs: int,
        cfg: EnvConfig,
        level_source: LevelSource | None = None,
        seed: int = 0,
        max_cached_levels: int = 1024,
    ):
        from procgen import ProcgenGym3Env

        self._make = ProcgenGym3Env
        self.game = game
        self.num_envs = num_envs
        self.distribution_mode = cfg.distribution_mode
        self._choose = _LevelChooser(cfg, level_source, np.random.default_rng(seed))
        self.env = ProcgenGym3Env(
            num=num_envs,
            env_name=game,
            num_levels=max(cfg.num_levels, 0),
            start_level=cfg.start_level,
            distribution_mode=cfg.distribution_mode,
            rand_seed=seed,
        )
        self.spec = EnvSpec(obs_shape=(64, 64, 3), obs_dtype="uint8", discrete=True, num_actions=15)
        self._start_states: OrderedDict[int, bytes] = OrderedDict()
        self._max_cached = max_cached_levels
        self._levels = np.zeros(num_envs, dtype=np.int64)
        self.injections = 0
        self.fresh_level_builds = 0

    def _start_state(self, seed: int) -> bytes:
        blob = self._start_states.get(seed)
        if blob is None:
            single = self._make(
                num=1, env_name=self.game, num_levels=1, start_level=seed, distribution_mode=self.distribution_mode
            )
            blob = single.get_state()[0]
            single.close()
            self.fresh_level_builds += 1
            self._start_states[seed] = blob
            if len(self._start_states) > self._max_cached:
                self._start_states.popitem(last=False)
        else:
            self._start_states.move_to_end(seed)
        return blob

    def close(self) -> None:
        """Close the C env now. Left to the garbage collector, gym3's `CEnv.__del__` looks up `libenv_close`
        on the shared cffi library, which takes that library's (non-reentrant) lock: a collection that runs
        while this thread already holds it (inside another lookup) deadlocks. Seen once in the suite: an
        evaluation hung until pytest-timeout's alarm broke the wait 300 s later."""
        self.env.close()

    def _inject(self, env_indices: np.ndarray) -> None:
        """Start a chosen level in each listed env slot (one get_state/set_state for all of them)."""
        states = self.env.get_state()
        for k in env_indices:
            states[k] = self._start_state(self._choose(int(k)))
        self.env.set_state(states)
        self.injections += len(env_indices)
        info = self.env.get_info()
        for k in env_indices:
            self._levels[k] = info[k]["level_seed"]

    def reset(self) -> np.ndarray:
        self._inject(np.arange(self.num_envs))
        _, obs, _ = self.env.observe()
        return obs["rgb"].copy()

    def step(self, actions: np.ndarray) -> StepResult:
        played = self._levels.copy()
        self.env.act(np.asarray(actions, dtype=np.int32))
        rewards, obs, first = self.env.observe()
        ended = np.flatnonzero(first)
        success = {}
        if len(ended):
            # Read before the next level is injected: the info of the step that ended the episode.
            info = self.env.get_info()
            success = {int(k): bool(info[k]["prev_level_complete"]) for k in ended if "prev_level_complete" in info[k]}
            self._inject(ended)
            _, obs, _ = self.env.observe()
        return StepResult(
            obs=obs["rgb"].copy(),
            rewards=np.asarray(rewards, dtype=np.float32),
            terminated=np.asarray(first, dtype=bool).copy(),
            truncated=np.zeros(self.num_envs, dtype=bool),
            level_seeds=played,
            final_obs={},
            success=success,
        )

    def current_levels(self) -> np.ndarray:
        return self._levels.copy()


class GymnasiumVector(EnvVector):
    def __init__(
        self,
        env_id: str,
        num_envs: int,
        cfg: EnvConfig,
        level_source: LevelSource | None = None,
        seed: int = 0,
        make_env: Callable[[], object] | None = None,
    ):
        """`make_env`: builds one env copy (default: `gym.make(env_id)` with the config's time limit)."""
        if make_env is None:
            import gymnasium as gym

            kwargs = {"disable_env_checker": True}  # the checker wraps every step; the spec is checked below
            if cfg.max_episode_steps is not None:
                kwargs["max_episode_steps"] = cfg.max_episode_steps

            def make_env():
                return gym.make(env_id, **kwargs)

        self.envs = [make_env() for _ in range(num_envs)]
        self.num_envs = num_envs
        self._choose = _LevelChooser(cfg, level_source, np.random.default_rng(seed))
        self._levels = np.zeros(num_envs, dtype=np.int64)
        self.spec = _gymnasium_spec(self.envs[0], env_id)
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
        import gymnasium as gym
        from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv

        max_steps = cfg.max_episode_steps or gym.spec(env_id).max_episode_steps
        self.env = CartPoleVectorEnv(num_envs=num_envs, max_episode_steps=max_steps)
        self.env.reset(seed=seed)
        self.num_envs = num_envs
        self._choose = _LevelChooser(cfg, level_source, np.random.default_rng(seed))
        self._levels = np.zeros(num_envs, dtype=np.int64)
        single = gym.make(env_id, disable_env_checker=True)
        self.spec = _gymnasium_spec(single, env_id)
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


class MiniGridVector(GymnasiumVector):
    """`minigrid:<name>`: see the module doc and `actors.minigrid_env`. `cfg.max_episode_steps` replaces
    MiniGrid's own `max_steps` (rather than adding a second time limit on top of it)."""

    def __init__(
        self, name: str, num_envs: int, cfg: EnvConfig, level_source: LevelSource | None = None, seed: int = 0
    ):
        from levelray.actors import minigrid_env

        self.gym_id = minigrid_env.gymnasium_id(name)
        super().__init__(self.gym_id, num_envs, cfg, level_source, seed,
                         make_env=lambda: minigrid_env.make(self.gym_id, cfg.max_episode_steps))
        self.spec = dataclasses.replace(self.spec, obs_encoding=MINIGRID_OBS)


class AtariVector(GymnasiumVector):
    """`atari:<game>` / `ALE/<Game>-v5`: see `actors.atari_env`. The learner trains on `sign(reward)`
    (the IMPALA and DQN papers' reward clipping; Atari scores are integers, so this is also clipping to
    [-1, 1]); `raw_rewards` keeps the game's own, from which episode returns are summed."""

    def __init__(
        self, env_id: str, num_envs: int, cfg: EnvConfig, level_source: LevelSource | None = None, seed: int = 0
    ):
        from levelray.actors import atari_env

        self.gym_id = atari_env.gymnasium_id(env_id)
        self.game = atari_env.game_name(self.gym_id)
        super().__init__(self.gym_id, num_envs, cfg, level_source, seed,
                         make_env=lambda: atari_env.make(self.gym_id, cfg.max_episode_steps))

    def step(self, actions: np.ndarray) -> StepResult:
        step = super().step(actions)
        step.raw_rewards = step.rewards
        step.rewards = np.sign(step.rewards).astype(np.float32)
        return step


def _gymnasium_spec(env, env_id: str) -> EnvSpec:
    from gymnasium import spaces

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


def available_env_ids() -> list[str]:
    import gymnasium as gym

    return ([f"procgen:{g}" for g in PROCGEN_GAMES] + ["minigrid:<name>", "atari:<game>"]
            + sorted(gym.envs.registry.keys()))


def make_env_vector(cfg: EnvConfig, num_envs: int, level_source: LevelSource | None = None, seed: int = 0) -> EnvVector:
    """Build the env vector for `cfg.id`; an unknown id raises ValueError listing what exists."""
    env_id = cfg.id
    if env_id.startswith("procgen:"):
        game = env_id.split(":", 1)[1]
        if game not in PROCGEN_GAMES:
            close = difflib.get_close_matches(game, PROCGEN_GAMES, n=3)
            hint = f" Did you mean {', '.join('procgen:' + c for c in close)}?" if close else ""
            raise ValueError(f"unknown procgen game {game!r}.{hint} Games: {', '.join(PROCGEN_GAMES)}")
        return ProcgenVector(game, num_envs, cfg, level_source, seed)
    if env_id.startswith(MINIGRID_PREFIX):
        return MiniGridVector(env_id[len(MINIGRID_PREFIX):], num_envs, cfg, level_source, seed)
    if env_id.startswith("MiniGrid-"):
        from levelray.actors import minigrid_env

        name = minigrid_env.canonical_name(minigrid_env.gymnasium_id(env_id[len("MiniGrid-"):]))
        raise ValueError(f"{env_id!r} is a MiniGrid env: use --env {name} (levelray encodes MiniGrid's dict "
                         f"observation into one array only under that name)")
    if env_id.startswith((ATARI_PREFIX, "ALE/")):
        return AtariVector(env_id, num_envs, cfg, level_source, seed)
    import gymnasium as gym

    registered = gym.envs.registry.get(env_id)
    if registered is None or "ale_py" in str(registered.entry_point):
        from levelray.actors import atari_env  # registers the ALE ids (<Game>NoFrameskip-v4 and the others)

        if atari_env.is_ale_id(env_id):  # never a bare ALE env: raw frames, ALE's own frame skipping
            return AtariVector(env_id, num_envs, cfg, level_source, seed)
    if env_id not in gym.envs.registry:
        ids = available_env_ids()
        close = difflib.get_close_matches(env_id, ids, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise ValueError(f"unknown environment id {env_id!r}.{hint} Available: {', '.join(ids)}")
    if cfg.native_vector and env_id in CartPoleVector.IDS:
        return CartPoleVector(env_id, num_envs, cfg, level_source, seed)
    return GymnasiumVector(env_id, num_envs, cfg, level_source, seed)


def env_spec(cfg: EnvConfig) -> EnvSpec:
    """The spec of `cfg.id` without keeping an env around."""
    vec = make_env_vector(cfg, 1)
    try:
        return vec.spec
    finally:
        vec.close()
