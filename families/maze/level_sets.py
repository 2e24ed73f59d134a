"""The maze family's own level sets for `levelray evaluate --levels` (`contracts.families.FamilyLevelSets`):

- `maze-suite`: every maze of the hand-designed test suite (`families.maze.level.suite_names`), each a level set of
  its own, named by the maze (`results.<maze name>`); `maze-suite:<name>` one of them. Every episode of a maze
  plays that one level (its id is `suite_level_id(name)`).
- `maze-<N>` (e.g. `maze-25`, `maze-50`): levels generated with N walls, whatever the run's `--maze-blocks`, on
  held-out seeds drawn as `test` draws them (another stream for each N), so they are outside the training range;
  with an unbounded training set they are fresh seeds, not held out.
- `maze-file:PATH`: mazes a user brings (`families.maze.files`): a text file of one maze in the suite's format,
  or a folder of them, each maze a level set of its own named after its file (`results.<name>`), played from
  its encoding under an id from `FILE_ID_BASE`. A file that is not a maze is refused naming its line and
  character; a maze of another size than the run's is refused too. PATH ends at the next comma, as every item of
  the list does.

The suite's mazes and the mazes of files are played with DCD's time limit for its test mazes
(`families.maze.env.evaluation_max_steps`, 450 steps at 13x13 where training has 250), as DCD plays its named
mazes: what they measure is whether the agent finds a 60-100-move path, not whether it does so within a limit
set for random levels of 25 walls. `maze-<N>` levels are generated as training levels are, and keep the run's
limit. `levelray evaluate --max-episode-steps N` replaces every set's limit.
"""

from __future__ import annotations

import re

import numpy as np

from levelray.contracts.config import ConfigError, EnvConfig, RunConfig, replace_paths
from levelray.contracts.families import LevelSet
from levelray.contracts.levels import held_out_seeds
from levelray.families.maze.env import evaluation_max_steps
from levelray.families.maze.level import FILE_ID_BASE, maze_size, suite_level, suite_level_id, suite_names

__all__ = ["MazeLevelSets"]

MAZE_SUITE = "maze-suite"
MAZE_BLOCKS_RE = re.compile(r"^maze-(\d+)$")
MAZE_FILE = "maze-file:"


class MazeLevelSets:
    """See the module doc."""

    def forms(self) -> list[str]:
        return ["maze-suite", "maze-suite:<name>", "maze-<blocks> (e.g. maze-25)", "maze-file:PATH"]

    def claims(self, item: str) -> bool:
        if item == MAZE_SUITE or MAZE_BLOCKS_RE.match(item):
            return True
        if item.startswith(MAZE_SUITE + ":"):
            _suite_name(item)
            return True
        if item.startswith(MAZE_FILE):
            _read_maze_files(item)
            return True
        return False

    def plan(self, cfg: RunConfig, item: str, episodes: int, seed: int, planned: list[LevelSet]) -> list[LevelSet]:
        if item.startswith(MAZE_FILE):
            return _file_sets(cfg, item, planned)
        if item == MAZE_SUITE or item.startswith(MAZE_SUITE + ":"):
            _check_suite_size(cfg)
            names = suite_names() if item == MAZE_SUITE else [_suite_name(item)]
            env = _evaluation_env(cfg)
            return [LevelSet(name, np.array([suite_level_id(name)], dtype=np.int64), env, suite=True)
                    for name in names]
        walls = int(MAZE_BLOCKS_RE.match(item).group(1))
        env = replace_paths(cfg, {"env.maze_blocks": str(walls)}).env
        seeds = held_out_seeds(cfg.env, np.random.default_rng([seed, 0x3A2E, walls]), episodes)
        return [LevelSet(item, seeds, env)]


def _evaluation_env(cfg: RunConfig) -> EnvConfig:
    """The run's env with DCD's time limit for test mazes (see the module doc)."""
    return replace_paths(cfg, {"env.max_episode_steps": evaluation_max_steps(*maze_size(cfg.env.id))}).env


def _suite_name(item: str) -> str:
    name = item[len(MAZE_SUITE) + 1:]
    if name not in suite_names():
        raise ConfigError(f"--levels {item}: the maze suite has no maze {name!r}; its mazes are "
                          f"{', '.join(suite_names())}")
    return name


def _check_suite_size(cfg: RunConfig) -> None:
    """ConfigError where the suite's mazes are not of the run's maze size."""
    size = maze_size(cfg.env.id)
    wrong = [n for n in suite_names() if (suite_level(n).width, suite_level(n).height) != size]
    if wrong:
        level = suite_level(wrong[0])
        raise ConfigError(f"--levels maze-suite: the suite's mazes are {level.width}x{level.height} "
                          f"({', '.join(wrong)}), this run's env is {cfg.env.id}")


def _read_maze_files(item: str) -> dict:
    """`{file: MazeLevel}` of `maze-file:PATH` (`families.maze.files.read_maze_files`); ConfigError naming the
    file, line and character of what is wrong."""
    from levelray.families.maze.files import read_maze_files

    path = item[len(MAZE_FILE):]
    if not path:
        raise ConfigError(f"--levels {item}: expected maze-file:PATH, a maze file or a folder of them")
    try:
        return read_maze_files(path)
    except ValueError as exc:
        raise ConfigError(f"--levels {item}: {exc}") from None


def _file_sets(cfg: RunConfig, item: str, planned: list[LevelSet]) -> list[LevelSet]:
    """One level set per maze of `maze-file:PATH`, each its one level under the next id from `FILE_ID_BASE` not
    taken by `planned`, with its encoding; ConfigError naming a file whose maze is not of the run's size."""
    size = maze_size(cfg.env.id)
    taken = [level_id for s in planned for level_id in s.encodings]
    next_id = max(taken, default=FILE_ID_BASE - 1) + 1
    env = _evaluation_env(cfg)
    sets = []
    for file, level in _read_maze_files(item).items():
        if (level.width, level.height) != size:
            raise ConfigError(f"--levels {item}: maze file {file} is {level.width}x{level.height}, this run's env "
                              f"is {cfg.env.id}")
        sets.append(LevelSet(file.stem, np.array([next_id], dtype=np.int64), env, file=str(file),
                             encodings={next_id: level.encode()}))
        next_id += 1
    return sets
