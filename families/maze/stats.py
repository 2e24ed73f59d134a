"""How complex the maze levels the level service holds are: "seeing the curriculum" of a maze run.

`MazeComplexity.summary(ids)` gives `LEVEL_COMPLEXITY_KEYS` over the distinct level ids it is
handed (the buffered levels of an unbounded space, the scored training levels of a fixed set):

    levels_mean_walls           mean wall count (`MazeLevel.num_walls`)
    levels_mean_path_length     mean shortest path start -> goal (`shortest_path_length`, BFS), over the
                                levels whose goal is reachable; None when none is
    levels_unsolvable_fraction  the share of the levels whose goal is unreachable

all None when no id is given. A level is resolved (`level_for_id`) and searched once while it stays held:
the service reports every few seconds, over the same few thousand ids each time, so each report only
measures the ids that arrived since the last one (a NumPy set difference over sorted ids) and forgets the
ones that left, which keeps the cache the size of what the service holds however long the run. Measuring a
13x13 level (generate it, then BFS) takes ~0.15 ms, so all 4,000 of a full buffer at once (a resumed run's
first report) take ~0.6 s, but a report over 4,000 held levels that are already measured ~0.1 ms.

Pure NumPy (`families.maze.level`): no env library, no Ray. `resolve` gives the levels an editor holds (edited
ones, held as encodings; None for any other id), and the family makes every other level from its id.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from levelray.contracts.config import EnvConfig
from levelray.families.maze.level import (
    ENV_PREFIX,
    MazeLevel,
    level_for_id,
    maze_size,
    parse_blocks,
    shortest_path_length,
)

__all__ = ["LEVEL_COMPLEXITY_KEYS", "MazeComplexity", "level_statistics"]

UNREACHABLE = -1  # the path length kept for a level whose goal cannot be reached


class MazeComplexity:
    """Wall counts and shortest-path lengths of maze levels, cached by level id (see the module doc).

    `num_measured` counts the levels resolved and searched so far (each id once while it is held)."""

    descriptions = {
        "levels_mean_walls": "Maze runs: mean wall count of the scored levels",
        "levels_mean_path_length": "Maze runs: mean shortest path start to goal (BFS, cell moves) of the scored levels "
                                   "whose goal is reachable",
        "levels_unsolvable_fraction": "Maze runs: fraction of the scored levels whose goal cannot be reached",
    }

    def __init__(self, width: int, height: int, blocks: tuple[int, int],
                 resolve: Callable[[int], MazeLevel | None] | None = None):
        self.width, self.height, self.blocks = width, height, blocks
        self._resolve = resolve or (lambda level_id: None)
        self._ids = np.empty(0, dtype=np.int64)  # [n] sorted, distinct
        self._walls = np.empty(0, dtype=np.int64)  # [n]
        self._paths = np.empty(0, dtype=np.int64)  # [n] UNREACHABLE where the goal cannot be reached
        self.num_measured = 0

    @classmethod
    def for_env(cls, env: EnvConfig | None, resolve: Callable[[int], MazeLevel | None] | None = None
                ) -> MazeComplexity | None:
        """The tracker of a run's `env` section (its maze size and `maze_blocks`), resolving ids with `resolve`;
        None for an env that is not `maze:<W>x<H>`, or no section: those levels have no walls to count."""
        if env is None or not str(env.id).startswith(ENV_PREFIX):
            return None
        width, height = maze_size(env.id)
        return cls(width, height, parse_blocks(env.maze_blocks), resolve)

    def level(self, level_id: int) -> MazeLevel:
        """The level `level_id` names: the one `resolve` gives (an edited level), else a seed or suite maze."""
        level = self._resolve(level_id)
        return level_for_id(level_id, self.width, self.height, self.blocks) if level is None else level

    def _measure(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`(walls [m], paths [m])` of the levels `ids [m]`, each resolved and searched."""
        walls = np.empty(len(ids), dtype=np.int64)
        paths = np.empty(len(ids), dtype=np.int64)
        for i, level_id in enumerate(ids.tolist()):
            level = self.level(level_id)
            length = shortest_path_length(level)
            walls[i] = level.num_walls
            paths[i] = UNREACHABLE if length is None else length
        self.num_measured += len(ids)
        return walls, paths

    def _hold(self, ids: np.ndarray) -> None:
        """Make the cache exactly the distinct ids `ids` (sorted): keep the known ones, measure the new ones."""
        if np.array_equal(ids, self._ids):
            return
        kept = np.isin(self._ids, ids, assume_unique=True)
        new = ids[~np.isin(ids, self._ids, assume_unique=True)]
        walls, paths = self._measure(new)
        all_ids = np.concatenate([self._ids[kept], new])
        order = np.argsort(all_ids, kind="stable")
        self._ids = all_ids[order]
        self._walls = np.concatenate([self._walls[kept], walls])[order]
        self._paths = np.concatenate([self._paths[kept], paths])[order]

    def summary(self, ids) -> dict[str, float | None]:
        """The `LEVEL_COMPLEXITY_KEYS` over the distinct levels of `ids` ([n] int level ids,
        any order)."""
        self._hold(np.unique(np.asarray(ids, dtype=np.int64)))
        if self._ids.size == 0:
            return dict.fromkeys(LEVEL_COMPLEXITY_KEYS)
        solvable = self._paths != UNREACHABLE
        return {
            "levels_mean_walls": float(self._walls.mean()),
            "levels_mean_path_length": float(self._paths[solvable].mean()) if solvable.any() else None,
            "levels_unsolvable_fraction": float((~solvable).mean()),
        }


def level_statistics(env: EnvConfig, resolve: Callable[[int], MazeLevel | None]) -> MazeComplexity | None:
    """The maze family's level statistics (`contracts.families.LevelStatistics`) of a run's `env` section."""
    return MazeComplexity.for_env(env, resolve)


LEVEL_COMPLEXITY_KEYS = tuple(MazeComplexity.descriptions)  # in the level service's stats and a maze run's records
