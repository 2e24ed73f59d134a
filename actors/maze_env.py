"""The maze family: `--env maze:<W>x<H>` (e.g. `maze:13x13`), mazes of `W x H` inner cells on MiniGrid.

A level is a `contracts.maze.MazeLevel` (walls, the agent's start cell and direction, the goal), and a level id
names one (`contracts.maze.level_for_id`): a seed is the level `generate` makes from it with `env.maze_blocks`
walls (domain randomisation, DCD's generator), and an id of the reserved range is a maze of the test suite.
An edited level (ACCEL's) is played from the encoding that came with its id (`LevelDraws.encodings`).
Each env is a `actors.maze_grid.MazeGridEnv` wrapped by `actors.minigrid_obs.MiniGridObs`, so a maze looks to
the agent exactly as `minigrid:*` does (uint8 `[7, 7, 4]`, 7 actions, `obs_encoding` MINIGRID_OBS: the
`minigrid_cnn` network and the `minigrid` preset apply), and success is reaching the goal.

The time limit is DCD's: 250 steps in its 15x15 grid (13x13 inner cells), where its published zero-shot maze
results were trained, here scaled with the inner area for other sizes (`default_max_steps`), as the path
through a maze grows with its area. MiniGrid's own convention for its open rooms (`4 * size**2`, 900 at
15x15) is looser than DCD's, whose numbers a maze run is compared with. `--max-episode-steps` replaces it.

minigrid itself (~1 s to import) is imported only when a vector is built.
"""

from __future__ import annotations

import dataclasses
import math

from levelray.actors.env_vector import LevelSource, spec_of_one_env
from levelray.actors.gymnasium_env import GymnasiumVector
from levelray.contracts.config import EnvConfig
from levelray.contracts.maze import ENV_FORM as FORM
from levelray.contracts.maze import ENV_PREFIX as PREFIX
from levelray.contracts.maze import maze_size
from levelray.contracts.spec import MINIGRID_OBS, EnvSpec

DCD_MAX_STEPS = 250  # DCD's maze time limit, at 13x13 inner cells
DCD_INNER_CELLS = 13 * 13


def default_max_steps(width: int, height: int) -> int:
    """DCD's 250 steps at 13x13 inner cells, scaled with the inner area (see the module doc)."""
    return math.ceil(DCD_MAX_STEPS * width * height / DCD_INNER_CELLS)


class MazeVector(GymnasiumVector):
    """`maze:<W>x<H>`: see the module doc. Each env resolves the level id it is reset with itself."""

    def __init__(self, env_id: str, num_envs: int, cfg: EnvConfig, level_source: LevelSource | None = None,
                 seed: int = 0, render: bool = False):
        from levelray.actors.maze_grid import MazeGridEnv
        from levelray.actors.minigrid_obs import MiniGridObs
        from levelray.contracts.maze import MazeLevel, level_for_id, parse_blocks

        width, height = maze_size(env_id)
        blocks = parse_blocks(cfg.maze_blocks)
        max_steps = cfg.max_episode_steps or default_max_steps(width, height)
        mode = "rgb_array" if render else None  # render(): the whole grid, as a person sees the level

        encodings = getattr(level_source, "encodings", None)  # `LevelDraws`: levels that exist only as data

        def resolve(level_id: int):
            data = None if encodings is None else level_source.encodings.get(level_id)
            return level_for_id(level_id, width, height, blocks) if data is None else MazeLevel.decode(data)

        def make_env():
            return MiniGridObs(MazeGridEnv(width, height, resolve, max_steps, render_mode=mode))

        # render=False here: the base class would look the id up in gymnasium's registry to check that it can
        # draw frames; a maze env always can (MiniGrid's rgb_array), and `render(k)` needs nothing else.
        super().__init__(env_id, num_envs, cfg, level_source, seed, make_env=make_env, render=False)
        if render:
            self.render_fps = float(self.envs[0].metadata.get("render_fps") or self.render_fps)
        self.spec = dataclasses.replace(self.spec, obs_encoding=MINIGRID_OBS)


def matches(env_id: str) -> bool:
    return env_id.startswith(PREFIX)


def make_vector(cfg: EnvConfig, num_envs: int, level_source: LevelSource | None = None, seed: int = 0, *,
                render: bool = False) -> MazeVector:
    """ValueError naming the form for an id that is not `maze:<W>x<H>`, and naming --maze-blocks for blocks
    `contracts.maze.parse_blocks` cannot read."""
    return MazeVector(cfg.id, num_envs, cfg, level_source, seed, render)


def spec(cfg: EnvConfig) -> EnvSpec:
    return spec_of_one_env(make_vector, cfg)


def ids() -> list[str]:
    return [FORM]
