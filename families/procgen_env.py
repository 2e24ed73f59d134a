"""The procgen family: `--env procgen:<game>` (e.g. `procgen:coinrun`).

K envs are one `ProcgenGym3Env` per `PART_SIZE` of them. Upstream procgen has no per-env seed call, so a chosen level
is started by injecting its start state into that env's slot (`get_state`/`set_state` of every env of its part, ~2 ms
per injection for 16 envs here): in one vector of hundreds of envs, where some env ends an episode on most steps,
those whole-vector state swaps would be the cost of a step, so a large vector is stepped as parts. Start states are
cached by seed; a seed never seen is built once with a 1-env `ProcgenGym3Env(num_levels=1, start_level=seed)`. Envs
are never re-created per episode. Each step reports procgen's own `level_seed` as the level played, and
`prev_level_complete` as an ended episode's success. A vector built with `render=True` asks procgen for its human
view (`render_mode="rgb_array"`: each step also draws the 512x512 frame into `info["rgb"]`, which `render(k)`
returns; an injected start state is drawn there too).

procgen itself is imported only when a vector is built.
"""

from __future__ import annotations

import difflib
from collections import OrderedDict

import numpy as np

from levelray.actors.env_vector import EnvVector, LevelChooser, LevelSource, StepResult, rgb_frame
from levelray.contracts.config import EnvConfig
from levelray.contracts.families import register_family
from levelray.contracts.spec import EnvSpec

PREFIX = "procgen:"
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
# Every procgen game: 64x64 RGB frames and the 15 actions of the full action set.
SPEC = EnvSpec(obs_shape=(64, 64, 3), obs_dtype="uint8", discrete=True, num_actions=15)
# Envs per `ProcgenGym3Env` of a vector. BigFish with 200 levels, random actions, one core of this machine, env steps/s
# (2026-11-28, two rounds, 4-5 s each): 16 envs in one vector 31,000, in parts of 8 42,000-45,000, of 4
# 51,000-54,000, of 2 45,000-47,000; 256 envs in one vector 6,500 (each step swapping the state of all 256 for the
# ~2 episodes that ended in it), in parts of 16 26,500, of 8 27,000-30,000, of 4 30,000-35,000, of 2 22,000-31,000.
PART_SIZE = 4


def import_procgen():
    """The `procgen` module, imported without the notice of the old `gym` package (procgen registers its envs
    with it): `import gym` prints `gym_notices.notices[gym.__version__]` ("Gym has been unmaintained since
    2022 ...") to stderr, a print and not a warning, in every process that imports procgen (Ray workers too).
    That one entry is taken out of `gym_notices` for the import only: whatever else gym or procgen print or
    raise still shows."""
    import sys

    if "procgen" in sys.modules:
        return sys.modules["procgen"]
    try:
        import gym_notices.notices as gym_notices
    except ImportError:  # no notices to print
        gym_notices = None
    saved = getattr(gym_notices, "notices", None)
    if isinstance(saved, dict):
        gym_notices.notices = {}
    try:
        import procgen
    finally:
        if isinstance(saved, dict):
            gym_notices.notices = saved
    return procgen


class ProcgenVector(EnvVector):
    def __init__(
        self,
        game: str,
        num_envs: int,
        cfg: EnvConfig,
        level_source: LevelSource | None = None,
        seed: int = 0,
        max_cached_levels: int = 1024,
        render: bool = False,
    ):
        self._make = import_procgen().ProcgenGym3Env
        self.game = game
        self.num_envs = num_envs
        self.distribution_mode = cfg.distribution_mode
        self._choose = LevelChooser(cfg, level_source, np.random.default_rng(seed))
        # env k is slot k % PART_SIZE of part k // PART_SIZE
        self.parts = [self._make(
            num=min(PART_SIZE, num_envs - start),
            env_name=game,
            num_levels=max(cfg.num_levels, 0),
            start_level=cfg.start_level,
            distribution_mode=cfg.distribution_mode,
            rand_seed=seed + start // PART_SIZE,
            **({"render_mode": "rgb_array"} if render else {}),
        ) for start in range(0, num_envs, PART_SIZE)]
        self._render = render
        self.spec = SPEC
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
        """Close the C envs now. Left to the garbage collector, gym3's `CEnv.__del__` looks up `libenv_close`
        on the shared cffi library, which takes that library's (non-reentrant) lock: a collection that runs
        while this thread already holds it (inside another lookup) deadlocks. Seen once in the suite: an
        evaluation hung until pytest-timeout's alarm broke the wait 300 s later."""
        for part in self.parts:
            part.close()

    def _inject(self, env_indices: np.ndarray) -> None:
        """Start a chosen level in each listed env slot (one get_state/set_state for each part they are in), the
        levels chosen in the order of `env_indices` (ascending)."""
        for p in np.unique(np.asarray(env_indices) // PART_SIZE):
            part, first = self.parts[p], p * PART_SIZE
            slots = [int(k) - first for k in env_indices if first <= k < first + PART_SIZE]
            states = part.get_state()
            for j in slots:
                states[j] = self._start_state(self._choose(first + j))
            part.set_state(states)
            info = part.get_info()
            for j in slots:
                self._levels[first + j] = info[j]["level_seed"]
        self.injections += len(env_indices)

    def _observe(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`(rewards [K], obs [K, 64, 64, 3], first [K])` of every part, joined (the observations a new array)."""
        rewards, obs, first = zip(*(part.observe() for part in self.parts), strict=True)
        return np.concatenate(rewards), np.concatenate([o["rgb"] for o in obs]), np.concatenate(first)

    def _infos(self, envs: np.ndarray) -> dict[int, dict]:
        """procgen's info dict of each of `envs`, each part's read once."""
        parts = {int(p): self.parts[p].get_info() for p in np.unique(envs // PART_SIZE)}
        return {int(k): parts[int(k) // PART_SIZE][int(k) % PART_SIZE] for k in envs}

    def reset(self) -> np.ndarray:
        self._inject(np.arange(self.num_envs))
        return self._observe()[1]

    def restart(self, envs: np.ndarray) -> np.ndarray:
        envs = np.asarray(envs, dtype=np.int64)
        if envs.size:
            self._inject(envs)
        return self._observe()[1][envs]

    def step(self, actions: np.ndarray) -> StepResult:
        played = self._levels.copy()
        actions = np.asarray(actions, dtype=np.int32)
        for p, part in enumerate(self.parts):  # every part's step is issued before any is read
            part.act(actions[p * PART_SIZE:(p + 1) * PART_SIZE])
        rewards, obs, first = self._observe()
        ended = np.flatnonzero(first)
        success = {}
        if len(ended):
            # Read before the next level is injected: the info of the step that ended the episode.
            infos = self._infos(ended)
            success = {k: bool(info["prev_level_complete"]) for k, info in infos.items()
                       if "prev_level_complete" in info}
            self._inject(ended)
            obs = self._observe()[1]
        return StepResult(
            obs=obs,
            rewards=np.asarray(rewards, dtype=np.float32),
            terminated=np.asarray(first, dtype=bool),
            truncated=np.zeros(self.num_envs, dtype=bool),
            level_seeds=played,
            final_obs={},
            success=success,
        )

    def current_levels(self) -> np.ndarray:
        return self._levels.copy()

    def render(self, k: int = 0) -> np.ndarray:
        if not self._render:
            return super().render(k)
        return rgb_frame(self._infos(np.array([k]))[k]["rgb"], PREFIX + self.game)


def _game(env_id: str) -> str:
    """`procgen:coinrun` -> `coinrun`; ValueError with close matches for a game procgen does not have."""
    game = env_id[len(PREFIX):]
    if game not in PROCGEN_GAMES:
        close = difflib.get_close_matches(game, PROCGEN_GAMES, n=3)
        hint = f" Did you mean {', '.join(PREFIX + c for c in close)}?" if close else ""
        raise ValueError(f"unknown procgen game {game!r}.{hint} Games: {', '.join(PROCGEN_GAMES)}")
    return game


def matches(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


def make_vector(cfg: EnvConfig, num_envs: int, level_source: LevelSource | None = None, seed: int = 0, *,
                render: bool = False) -> ProcgenVector:
    return ProcgenVector(_game(cfg.id), num_envs, cfg, level_source, seed, render=render)


def spec(cfg: EnvConfig) -> EnvSpec:
    """Every game's spec is `SPEC`: known without starting procgen."""
    _game(cfg.id)
    return SPEC


def ids() -> list[str]:
    return [PREFIX + game for game in PROCGEN_GAMES]


def reports_success(cfg: EnvConfig) -> bool:
    """Every game says whether an ended episode completed its level (`prev_level_complete`): SFL's success rates."""
    return True


DISPATCH_RANK = 10  # where `env.family auto` tries it (contracts.families)
register_family("procgen", __name__)  # at the end: the family is this module's functions above
