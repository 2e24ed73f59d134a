"""The maze family: `--env maze:<W>x<H>` (e.g. `maze:13x13`), mazes of `W x H` inner cells, stepped as arrays.

A level is a `families.maze.level.MazeLevel` (walls, the agent's start cell and direction, the goal), and a level id
names one (`families.maze.level.level_for_id`): a seed is the level `generate` makes from it with `env.maze_blocks`
walls (domain randomisation, DCD's generator), and an id of the reserved range is a maze of the test suite.
A level that exists only as data (ACCEL's edited levels, the mazes `levelray evaluate --levels maze-file:PATH`
reads) is played from the encoding that came with its id (the level source's `encodings`, `LevelDraws`).

`MazeVector` steps its K envs together: their state is a few arrays and one compiled loop steps them all
(`families.maze.step`), exactly as MiniGrid steps its `MiniGridEnv` (`families.maze.grid.MazeGridEnv`, the
MiniGrid-built env; a test plays both side by side). A maze looks to the agent exactly as `minigrid:*` does (uint8
`[7, 7, 4]`, 7 actions, `obs_encoding` MINIGRID_OBS: the `minigrid_cnn` network and the `minigrid` preset
apply), and success is reaching the goal. Only rendering uses MiniGrid itself: `render(k)` draws env k's level
and agent with MiniGrid's renderer (whole grid, the agent's view shaded), the frame `minigrid:*` envs give.

`env.maze_view dcd` (`--maze-view dcd`) gives the agent DCD's view instead, so that a comparison with DCD runs
its task: the 5x5 cells ahead seen through walls (`families.maze.step`), `[5, 5, 4]` in the same encoding. The
direction, a separate input of DCD's network, is channel 3 as always (`minigrid_cnn` embeds it, as DCD's network
embeds its one-hot), and `policy.models.MiniGridNet` takes the 5x5 view with DCD's one 3x3 convolution.

The time limit is DCD's: 250 steps in its 15x15 grid (13x13 inner cells), where its published zero-shot maze
results were trained, here scaled with the inner area for other sizes (`default_max_steps`), as the path
through a maze grows with its area. MiniGrid's own convention for its open rooms (`4 * size**2`, 900 at
15x15) is looser than DCD's, whose numbers a maze run is compared with. `--max-episode-steps` replaces it.
DCD evaluates its named mazes with their own, longer limit, `2 * size * size` of the whole grid (`MazeEnv` in
its `envs/multigrid/maze.py`, `max_steps=None`): 450 steps at 13x13 inner cells (`evaluation_max_steps`), which the
family's evaluation level sets play with (`families.maze.level_sets`).

numba (`families.maze.step`) is imported only when a vector is built, minigrid only when one renders.
"""

from __future__ import annotations

import math

import numpy as np

from levelray.actors.env_vector import EnvVector, LevelChooser, LevelSource, StepResult, rgb_frame, spec_of_one_env
from levelray.contracts.config import EnvConfig
from levelray.contracts.spec import MINIGRID_OBS, EnvSpec
from levelray.families.maze.level import ENV_FORM as FORM
from levelray.families.maze.level import ENV_PREFIX as PREFIX
from levelray.families.maze.level import MazeLevel, level_for_id, maze_size, parse_blocks

DCD_MAX_STEPS = 250  # DCD's maze time limit, at 13x13 inner cells
DCD_INNER_CELLS = 13 * 13
VIEWS = ("minigrid", "dcd")  # `env.maze_view`: MiniGrid's 7x7 occluded view, DCD's 5x5 seen through walls
NUM_ACTIONS = 7  # MiniGrid's: left, right, forward, pickup, drop, toggle, done (the last four do nothing here)
LEVEL_CACHE = 4096  # levels kept ready to start (a training set of a few hundred levels stays whole)


def default_max_steps(width: int, height: int) -> int:
    """DCD's 250 steps at 13x13 inner cells, scaled with the inner area (see the module doc)."""
    return math.ceil(DCD_MAX_STEPS * width * height / DCD_INNER_CELLS)


def evaluation_max_steps(width: int, height: int) -> int:
    """DCD's time limit for its test mazes, `2 * size * size` of the whole grid (inner cells and the outer wall):
    450 at 13x13 inner cells; `2 * (W + 2) * (H + 2)` where the grid is not square (DCD's mazes all are)."""
    return 2 * (width + 2) * (height + 2)


def max_episode_steps(cfg: EnvConfig) -> int:
    """The time limit `cfg` plays with (`contracts.families`): its own `max_episode_steps`, else the family's
    default for its size; ValueError naming the form for an id that is not `maze:<W>x<H>`."""
    return int(cfg.max_episode_steps or default_max_steps(*maze_size(cfg.id)))


class MazeVector(EnvVector):
    """`maze:<W>x<H>`: see the module doc. `levels[k]` is the `MazeLevel` env k plays, `max_steps` the time
    limit; `render(k)` only where built with `render=True`."""

    def __init__(self, env_id: str, num_envs: int, cfg: EnvConfig, level_source: LevelSource | None = None,
                 seed: int = 0, render: bool = False):
        from levelray.families.maze import step as maze_step

        self._kernels = maze_step
        self.width, self.height = maze_size(env_id)
        self.blocks = parse_blocks(cfg.maze_blocks)
        self.max_steps = int(cfg.max_episode_steps or default_max_steps(self.width, self.height))
        if cfg.maze_view not in VIEWS:
            raise ValueError(f"--maze-view must be one of {', '.join(VIEWS)}, got {cfg.maze_view!r}")
        self._through = cfg.maze_view == "dcd"  # DCD's view (`families.maze.step`)
        self._step = maze_step.step_through if self._through else maze_step.step
        self._observe_envs = maze_step.observe_through if self._through else maze_step.observe
        view = maze_step.DCD_VIEW if self._through else maze_step.VIEW
        self.env_id, self.num_envs = env_id, int(num_envs)
        self.spec = EnvSpec((view, view, 4), "uint8", True, num_actions=NUM_ACTIONS, obs_encoding=MINIGRID_OBS)
        self._choose = LevelChooser(cfg, level_source, np.random.default_rng(seed))
        self._source = level_source  # its `encodings` (`LevelDraws`): levels that exist only as data
        pad = maze_step.PAD
        shape = (self.num_envs, self.height + 2 + 2 * pad, self.width + 2 + 2 * pad)
        self.cells = np.full(shape, maze_step.WALL, dtype=np.uint8)
        self.state = np.zeros((self.num_envs, 4), dtype=np.int64)  # x, y, direction, steps (`families.maze.step`)
        self.levels: list[MazeLevel | None] = [None] * self.num_envs
        self._level_ids = np.zeros(self.num_envs, dtype=np.int64)
        self._ready: dict[object, tuple[MazeLevel, np.ndarray]] = {}  # level key -> (level, its cells)
        self._renderer = None
        if render:
            from levelray.families.maze.grid import MazeGridEnv

            self.render_fps = float(MazeGridEnv.metadata.get("render_fps") or self.render_fps)
            self._renderer = MazeGridEnv(self.width, self.height, self._resolve, self.max_steps,
                                         render_mode="rgb_array", view=view, see_through_walls=self._through)

    def _data(self, level_id: int) -> bytes | None:
        """The encoding the level source holds for `level_id` (read each time: `LevelDraws` replaces its dict)."""
        encodings = getattr(self._source, "encodings", None)
        return None if encodings is None else encodings.get(level_id)

    def _resolve(self, level_id: int, data: bytes | None = None) -> MazeLevel:
        if data is None:
            return level_for_id(level_id, self.width, self.height, self.blocks)
        level = MazeLevel.decode(data)
        if (level.width, level.height) != (self.width, self.height):
            raise ValueError(f"level {level_id} is {level.width}x{level.height}, this maze env is {self.env_id}")
        return level

    def _prepared(self, level_id: int) -> tuple[MazeLevel, np.ndarray]:
        """The level of `level_id` and its padded cells (see `families.maze.step`), kept for the next start."""
        data = self._data(level_id)
        key = level_id if data is None else data  # an id given as data is keyed by its data
        ready = self._ready.get(key)
        if ready is None:
            level = self._resolve(level_id, data)
            kernels, pad = self._kernels, self._kernels.PAD
            cells = np.full(self.cells.shape[1:], kernels.WALL, dtype=np.uint8)
            inner = cells[pad + 1: pad + 1 + self.height, pad + 1: pad + 1 + self.width]
            inner[:] = np.where(level.walls, kernels.WALL, kernels.EMPTY)
            inner[level.goal[1], level.goal[0]] = kernels.GOAL
            if len(self._ready) >= LEVEL_CACHE:
                self._ready.clear()
            ready = self._ready[key] = (level, cells)
        return ready

    def _start(self, k: int) -> None:
        """Env k starts the next level its level source chooses."""
        level_id = self._choose(k)
        level, cells = self._prepared(level_id)
        self.cells[k] = cells
        pad = self._kernels.PAD + 1
        self.state[k] = (level.agent[0] + pad, level.agent[1] + pad, level.agent_dir, 0)
        self.levels[k] = level
        self._level_ids[k] = level_id

    def _observe(self, envs: np.ndarray, obs: np.ndarray) -> None:
        self._observe_envs(self.cells, self.state, envs, obs)

    def reset(self) -> np.ndarray:
        for k in range(self.num_envs):
            self._start(k)
        obs = np.empty((self.num_envs, *self.spec.obs_shape), dtype=np.uint8)
        self._observe(np.arange(self.num_envs), obs)
        return obs

    def restart(self, envs: np.ndarray) -> np.ndarray:
        envs = np.asarray(envs, dtype=np.int64)
        for k in envs.tolist():
            self._start(k)
        obs = np.empty((self.num_envs, *self.spec.obs_shape), dtype=np.uint8)
        self._observe(envs, obs)
        return obs[envs]

    def step(self, actions: np.ndarray) -> StepResult:
        actions = self._check_actions(actions)
        played = self._level_ids.copy()
        K = self.num_envs
        obs = np.empty((K, *self.spec.obs_shape), dtype=np.uint8)
        rewards = np.empty(K, dtype=np.float32)
        terminated = np.empty(K, dtype=bool)
        truncated = np.empty(K, dtype=bool)
        ended = self._step(actions, self.cells, self.state, self.max_steps, obs, rewards, terminated, truncated)
        if ended < 0:
            k = -1 - ended
            raise ValueError(f"{self.env_id}: env {k}'s action {actions[k]} is not one of MiniGrid's "
                             f"{NUM_ACTIONS} actions (0..{NUM_ACTIONS - 1})")
        final_obs, success = {}, {}
        if ended:
            restarted = np.flatnonzero(terminated | truncated)
            for k in restarted.tolist():
                if truncated[k]:
                    final_obs[k] = obs[k].copy()
                success[k] = bool(terminated[k] and rewards[k] > 0)
                self._start(k)
            self._observe(restarted, obs)
        return StepResult(obs, rewards, terminated, truncated, played, final_obs, success)

    def _check_actions(self, actions: np.ndarray) -> np.ndarray:
        """`actions [K]` as int64; whole numbers of another dtype are taken by value, as MiniGrid compares them."""
        actions = np.asarray(actions)
        if actions.dtype == np.int64 and actions.shape == (self.num_envs,):
            return actions
        as_int = actions.astype(np.int64) if actions.dtype.kind in "iuf" else None
        if actions.shape != (self.num_envs,) or as_int is None or not np.array_equal(as_int, actions):
            raise ValueError(f"{self.env_id}: actions must be [{self.num_envs}] whole numbers in "
                             f"0..{NUM_ACTIONS - 1}, got {actions.dtype} {actions.shape}")
        return as_int

    def current_levels(self) -> np.ndarray:
        return self._level_ids.copy()

    def render(self, k: int = 0) -> np.ndarray:
        """Env k as MiniGrid draws it: its level, the agent where it is now, its view shaded."""
        env = self._renderer
        if env is None:
            return super().render(k)
        if env.level is not self.levels[k]:
            env.reset(options={"level": self.levels[k]})
        x, y, direction, steps = self.state[k].tolist()
        env.agent_pos = (x - self._kernels.PAD, y - self._kernels.PAD)
        env.agent_dir, env.step_count = direction, steps
        return rgb_frame(env.render(), self.env_id)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()


def matches(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


def make_vector(cfg: EnvConfig, num_envs: int, level_source: LevelSource | None = None, seed: int = 0, *,
                render: bool = False) -> MazeVector:
    """ValueError naming the form for an id that is not `maze:<W>x<H>`, and naming --maze-blocks for blocks
    `families.maze.level.parse_blocks` cannot read."""
    return MazeVector(cfg.id, num_envs, cfg, level_source, seed, render)


def spec(cfg: EnvConfig) -> EnvSpec:
    return spec_of_one_env(make_vector, cfg)


def ids() -> list[str]:
    return [FORM]

