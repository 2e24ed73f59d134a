"""One maze as a MiniGrid env: `MazeGridEnv` builds its grid at every reset from a `families.maze.level.MazeLevel`.

The maze family (`families.maze.env`) steps its envs as arrays (`families.maze.step`) and uses this env for what
only MiniGrid does, drawing a frame (`MazeVector.render`); the tests step it beside the arrays as the reference
they must match. Apart from the family because this module imports minigrid (~1 s) at the top, to subclass
`MiniGridEnv`; the family imports it only when it renders.

The grid is `(width + 2) x (height + 2)` cells: MiniGrid's outer wall around the level's inner cells, so inner
cell `(x, y)` is grid cell `(x + 1, y + 1)`. Walls, the goal and the agent's start cell and direction are
exactly the level's; nothing is drawn at random. Everything else is MiniGrid's own: the 7 actions (only
left, right and forward do anything here), the agent's 7x7 view (walls occlude, MiniGrid's default; `view=5,
see_through_walls=True` is DCD's view, which DCD's MultiGrid base computes as MiniGrid does), the
reward `1 - 0.9 * step_count / max_steps` on stepping onto the goal (the episode then terminates), and the
time limit `max_steps` (truncation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from minigrid.core.grid import Grid
from minigrid.core.mission import MissionSpace
from minigrid.core.world_object import Goal, Wall
from minigrid.minigrid_env import MiniGridEnv

from levelray.families.maze.level import MazeLevel

MISSION = "get to the green goal square"


def _mission() -> str:
    return MISSION


class MazeGridEnv(MiniGridEnv):
    """A `width x height` maze (inner size). `reset(seed=level_id)` plays `resolve(level_id)`;
    `reset(options={"level": level})` plays a `MazeLevel` given whole (then `seed` only seeds the env's
    random generator, which nothing in a maze uses). `level` is the level of the current episode."""

    def __init__(self, width: int, height: int, resolve: Callable[[int], MazeLevel], max_steps: int,
                 render_mode: str | None = None, view: int = 7, see_through_walls: bool = False):
        super().__init__(mission_space=MissionSpace(mission_func=_mission), width=width + 2, height=height + 2,
                         max_steps=int(max_steps), agent_view_size=view, see_through_walls=see_through_walls,
                         render_mode=render_mode)
        self.inner_size = (int(width), int(height))
        self.resolve = resolve
        self.level: MazeLevel | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        level = (options or {}).get("level")
        if level is None:
            if seed is None:
                raise ValueError("a maze env plays a level id: reset(seed=level_id), or reset(options={'level': "
                                 "MazeLevel(...)})")
            level = self.resolve(int(seed))
        if not isinstance(level, MazeLevel):
            raise ValueError(f"options['level'] must be a MazeLevel, got {type(level).__name__}")
        if (level.width, level.height) != self.inner_size:
            raise ValueError(f"level is {level.width}x{level.height}, this maze env is "
                             f"maze:{self.inner_size[0]}x{self.inner_size[1]}")
        self.level = level
        return super().reset(seed=seed, options=options)

    def _gen_grid(self, width: int, height: int) -> None:
        level = self.level
        self.grid = Grid(width, height)
        self.grid.wall_rect(0, 0, width, height)
        for y, x in np.argwhere(level.walls).tolist():
            self.grid.set(x + 1, y + 1, Wall())
        self.put_obj(Goal(), level.goal[0] + 1, level.goal[1] + 1)
        self.agent_pos = (level.agent[0] + 1, level.agent[1] + 1)
        self.agent_dir = level.agent_dir
        self.mission = MISSION
