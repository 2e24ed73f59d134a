"""ACCEL's level editor for the maze family: children of replayed levels, held as encodings by the level service.

Parker-Holder et al., "Evolving Curricula with Regret-Based Environment Design" (ICML 2022), as
`facebookresearch/dcd` runs it on MiniGrid mazes: after a replayed level's episode is scored, the editor makes a
child with `num_edits` small random edits; the child is played as a new level (with Robust PLR, to be scored
only) and enters the level buffer by the buffer's rule. Starting from empty rooms (`--maze-blocks 0`), the
buffer's levels grow more complex only as far as the agent's regret rewards it.

An edit (`edit_maze`) is DCD's: `num_edits` distinct cells, drawn uniformly from every cell but the agent's start,
each become wall, floor or goal with probability 1/3 each, in the order drawn. A cell made goal moves the goal
there (its old cell becomes floor); the goal's own cell made wall or floor removes the goal, and a child left
without one gets it on a floor cell drawn uniformly (never the agent's). So the goal moves in most children
(1 - (1 - 1/3)^num_edits of them at least, 0.87 at 5 edits) and a child adds num_edits / 3 walls on average. The
agent's cell is never edited, so never walled. A child whose goal cannot be reached from the agent's start (BFS)
is counted (`num_unsolvable`) and kept, as DCD and JaxUED keep them; `drop_unsolvable` (the run's
`levels.drop_unsolvable`) drops it instead.

Edited levels exist only as encodings (`MazeLevel.encode`, 30 bytes at 13x13) under ids from
`contracts.levels.EDITED_ID_BASE` upwards, a range no seed or suite maze can reach; queueing, holding and saving
them is what every editor does (`level_service.edited_levels.EditedLevels`), and this module is the maze's part.
Pure NumPy.
"""

from __future__ import annotations

import functools

import numpy as np

from levelray.contracts.config import EnvConfig, LevelConfig
from levelray.families.maze.level import MazeLevel, level_for_id, maze_size, parse_blocks, shortest_path_length
from levelray.level_service.edited_levels import EditedLevels
from levelray.level_service.editors import LEVEL_EDITORS

__all__ = ["EDIT_KINDS", "MazeEditor", "edit_maze"]

EDIT_KINDS = ("wall", "floor", "goal")  # what an edited cell becomes, each with probability 1/3 (DCD's editor actions)


@functools.lru_cache(maxsize=4096)
def _generated(level_id: int, width: int, height: int, blocks: tuple[int, int]) -> MazeLevel:
    """`level_for_id`, kept for the levels replayed most: a buffered seed is edited each time it is replayed, and
    generating it anew (a NumPy Generator per seed) cost as much as the edit itself."""
    return level_for_id(level_id, width, height, blocks)


def edit_maze(level: MazeLevel, num_edits: int, rng: np.random.Generator) -> MazeLevel:
    """A child of `level` with `num_edits` edits (see the module doc); the agent's start never changes.

    Draws, in this order: a permutation of the cells (the first `num_edits` but the agent's are edited), one kind
    per edited cell (an index into `EDIT_KINDS`), and, only where the goal was removed, its new cell."""
    width, height = level.width, level.height
    agent = level.agent[1] * width + level.agent[0]  # flat [y, x] indices
    goal: int | None = level.goal[1] * width + level.goal[0]
    order = rng.permutation(width * height)
    cells = order[order != agent][:num_edits]
    kinds = rng.integers(len(EDIT_KINDS), size=cells.size)
    walls = level.walls.reshape(-1).copy()
    for cell, kind in zip(cells.tolist(), kinds.tolist(), strict=True):
        walls[cell] = kind == 0
        if kind == 2:
            goal = cell
        elif cell == goal:
            goal = None
    if goal is None:
        free = np.flatnonzero(~walls)
        free = free[free != agent]
        if free.size:
            goal = int(free[rng.integers(free.size)])
        else:  # every other cell a wall: the goal stays where it was, on floor
            goal = level.goal[1] * width + level.goal[0]
            walls[goal] = False
    return MazeLevel(width, height, walls.reshape(height, width), level.agent, level.agent_dir,
                     (goal % width, goal // width))


@LEVEL_EDITORS.register("accel")
class MazeEditor(EditedLevels):
    """ACCEL's children of the levels of one maze run (see the module doc; the queue, the encodings held and the
    state are `EditedLevels`').

    `blocks` is the family's `--maze-blocks` range, with which a seed becomes a level; `drop_unsolvable` drops the
    children whose goal is unreachable instead of queueing them."""

    edits_env = "maze:"
    edits_family = "a maze family (--env maze:<W>x<H>)"

    def __init__(self, width: int, height: int, blocks: tuple[int, int], num_edits: int, queue_limit: int,
                 drop_unsolvable: bool = False):
        super().__init__(f"{width}x{height} mazes with {blocks} walls", num_edits, queue_limit, drop_unsolvable)
        self.width, self.height, self.blocks = width, height, blocks

    @classmethod
    def for_run(cls, env: EnvConfig, levels: LevelConfig) -> MazeEditor:
        """The editor of a maze run's `env` and `levels` sections (`maze:<W>x<H>`: what the editor needs of a run
        is checked by `level_service.editors.editor_problems` before this is called); at most
        `levels.buffer_size` children wait to be played."""
        width, height = maze_size(env.id)
        return cls(width, height, parse_blocks(env.maze_blocks), levels.num_edits, levels.buffer_size,
                   drop_unsolvable=levels.drop_unsolvable)

    def generated(self, level_id: int) -> MazeLevel:
        return _generated(level_id, self.width, self.height, self.blocks)

    def edit(self, level: MazeLevel, rng: np.random.Generator) -> MazeLevel:
        """A child of `level`: DCD's edit (`edit_maze`). An editor of other children overrides only this."""
        return edit_maze(level, self.num_edits, rng)

    def encode(self, level: MazeLevel) -> bytes:
        return level.encode()

    def decode(self, data: bytes) -> MazeLevel:
        return MazeLevel.decode(data)

    def solvable(self, level: MazeLevel) -> bool:
        return shortest_path_length(level) is not None

    def family_state(self) -> list[int]:
        return [self.width, self.height, *self.blocks]

    @classmethod
    def for_family_state(cls, values: list[int], num_edits: int, queue_limit: int,
                         drop_unsolvable: bool) -> MazeEditor:
        width, height, low, high = values
        return cls(width, height, (low, high), num_edits, queue_limit, drop_unsolvable=drop_unsolvable)

    def check_saved(self, level_id: int, level: MazeLevel) -> None:
        if (level.width, level.height) != (self.width, self.height):
            raise ValueError(f"state['editor'] level {level_id} is {level.width}x{level.height}, the editor's "
                             f"maze family is {self.width}x{self.height}")
