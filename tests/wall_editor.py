"""A maze editor whose children only gain walls (the example of docs/guides/writing-a-curriculum.md)."""

from __future__ import annotations

import numpy as np

from levelray.families.maze.editor import MazeEditor
from levelray.families.maze.level import MazeLevel


class WallEditor(MazeEditor):
    """ACCEL's maze editor with another child: `num_edits` floor cells become walls, never the agent's start or
    the goal. Queueing, holding the children as data and saving them with the buffer are `MazeEditor`'s."""

    def edit(self, level: MazeLevel, rng: np.random.Generator) -> MazeLevel:
        walls = level.walls.copy()  # [height, width] bool
        floor = np.flatnonzero(~walls.reshape(-1))  # flat [y, x] indices of the floor cells
        kept = [cell[1] * level.width + cell[0] for cell in (level.agent, level.goal)]
        floor = floor[~np.isin(floor, kept)]
        walls.reshape(-1)[rng.permutation(floor)[: self.num_edits]] = True
        return MazeLevel(level.width, level.height, walls, level.agent, level.agent_dir, level.goal)
