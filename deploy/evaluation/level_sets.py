"""The level sets an evaluation plays (`levelray evaluate --levels`, comma-separated):

- `train`: the config's training levels `[start_level, start_level + num_levels)`, in a random order
  drawn from `--seed` (cycled when there are more episodes than levels).
- `test`: held-out levels, the "full distribution" of the PLR paper: distinct random seeds from
  `[0, 2**31 - 1)` outside the training range (procgen levels; gymnasium and MiniGrid `reset(seed=...)`
  seeds).
  With an unbounded training set (`num_levels == 0`) nothing is held out; the result says so
  (`held_out: false`).
- `A-B`: the explicit seeds A to B, both included, in order.

A maze run (`--env maze:<W>x<H>`) has four more (any other run refuses them, `plan_level_sets`):
- `maze-suite`: every maze of the hand-designed test suite (`contracts.maze.suite_names`), each a level set of
  its own, named by the maze (`results.<maze name>`); `maze-suite:<name>` one of them. Every episode of a maze
  plays that one level (its id is `suite_level_id(name)`).
- `maze-<N>` (the issue's held-out sets are `maze-25` and `maze-50`): levels generated with N walls, whatever
  the run's `--maze-blocks`, on held-out seeds drawn as `test` draws them (another stream for each N), so
  they are outside the training range; with an unbounded training set they are fresh seeds, not held out.
- `maze-file:PATH`: mazes a user brings (`contracts.maze_files`): a text file of one maze in the suite's format,
  or a folder of them, each maze a level set of its own named after its file (`results.<name>`), played from
  its encoding under an id from `FILE_ID_BASE`. A file that is not a maze is refused naming its line and
  character; a maze of another size than the run's, or a name another level set has, is refused too. PATH
  ends at the next comma, as every item of the list does.
"""

from __future__ import annotations

import dataclasses
import itertools
import re

import numpy as np

from levelray.contracts.config import ConfigError, EnvConfig, RunConfig, replace_paths
from levelray.contracts.levels import MAX_SEED, training_range

LEVEL_SET_RE = re.compile(r"^(\d+)-(\d+)$")
MAZE_SUITE = "maze-suite"
MAZE_BLOCKS_RE = re.compile(r"^maze-(\d+)$")
MAZE_FILE = "maze-file:"
_FORMS = ("train, test, A-B (e.g. 1000-1999), maze-suite, maze-suite:<name>, maze-<blocks> (e.g. maze-25) or "
          "maze-file:PATH")


@dataclasses.dataclass(frozen=True)
class LevelSet:
    """One level set of an evaluation: `name`, its key in the results; `seeds [n]` int64, the level ids its
    episodes play (cycled); `env`, the env config they are played with (the run's, but for `maze-<N>`:
    N walls); `suite`, whether it is a maze of the test suite (what the suite's mean is over); `file`, the maze
    file it was read from, and `encodings`, `{id: MazeLevel encoding}` of its levels that exist only as data."""

    name: str
    seeds: np.ndarray
    env: EnvConfig
    suite: bool = False
    file: str | None = None
    encodings: dict[int, bytes] = dataclasses.field(default_factory=dict)


def parse_level_sets(text: str) -> list[str]:
    """`"train,test"` -> `["train", "test"]`; each item is one of the forms of the module doc (A <= B; a
    suite maze by a name the suite has)."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise ConfigError(f"--levels: expected {_FORMS} (comma-separated), got nothing")
    for item in items:
        if item in ("train", "test", MAZE_SUITE) or MAZE_BLOCKS_RE.match(item):
            continue
        if item.startswith(MAZE_SUITE + ":"):
            _check_suite_name(item)
            continue
        if item.startswith(MAZE_FILE):
            _read_maze_files(item)
            continue
        m = LEVEL_SET_RE.match(item)
        if m is None:
            raise ConfigError(f"--levels: expected {_FORMS}, got {item!r}")
        if int(m.group(1)) > int(m.group(2)):
            raise ConfigError(f"--levels: range {item!r} is empty (A must be <= B)")
        if int(m.group(2)) >= MAX_SEED:
            raise ConfigError(f"--levels: seeds must be < {MAX_SEED}, got {item!r}")
    if len(set(items)) != len(items):
        raise ConfigError(f"--levels: {text!r} names a level set twice")
    return items


def _check_suite_name(item: str) -> str:
    from levelray.contracts.maze import suite_names

    name = item[len(MAZE_SUITE) + 1:]
    if name not in suite_names():
        raise ConfigError(f"--levels {item}: the maze suite has no maze {name!r}; its mazes are "
                          f"{', '.join(suite_names())}")
    return name


def _read_maze_files(item: str) -> dict:
    """`{file: MazeLevel}` of `maze-file:PATH` (`contracts.maze_files.read_maze_files`); ConfigError naming the
    file, line and character of what is wrong."""
    from levelray.contracts.maze_files import read_maze_files

    path = item[len(MAZE_FILE):]
    if not path:
        raise ConfigError(f"--levels {item}: expected maze-file:PATH, a maze file or a folder of them")
    try:
        return read_maze_files(path)
    except ValueError as exc:
        raise ConfigError(f"--levels {item}: {exc}") from None


def _distinct_random(rng: np.random.Generator, n: int, low: int, high: int) -> np.ndarray:
    """`n` distinct integers from `[low, high)` in random order (collisions are re-drawn)."""
    n = min(n, high - low)
    out: list[int] = []
    seen: set[int] = set()
    while len(out) < n:
        for x in rng.integers(low, high, size=n - len(out)).tolist():
            if x not in seen:
                seen.add(x)
                out.append(x)
    return np.asarray(out, dtype=np.int64)


def _held_out(cfg: RunConfig, rng: np.random.Generator, episodes: int) -> np.ndarray:
    """`episodes` distinct seeds outside the training range (any seeds where it is unbounded)."""
    train = training_range(cfg.env)
    if train is None:
        return _distinct_random(rng, episodes, 0, MAX_SEED)
    lo, hi = train
    # draw from [0, MAX_SEED - n_train) and shift the draws at or above `lo` past the training range
    draws = _distinct_random(rng, episodes, 0, MAX_SEED - (hi - lo))
    return np.where(draws >= lo, draws + (hi - lo), draws)


def level_set_seeds(cfg: RunConfig, which: str, episodes: int, seed: int = 0) -> np.ndarray:
    """The seeds (level ids) `[n]` an evaluation of `episodes` episodes on level set `which` plays (see the
    module doc; `maze-suite:<name>`: its one id)."""
    rng = np.random.default_rng([seed, 0x1E7E1])
    train = training_range(cfg.env)
    if which == "train":
        if train is None:
            return _distinct_random(rng, episodes, cfg.env.start_level, MAX_SEED)
        return rng.permutation(np.arange(*train, dtype=np.int64))
    if which == "test":
        return _held_out(cfg, np.random.default_rng([seed, 0x7E57]), episodes)
    blocks = MAZE_BLOCKS_RE.match(which)
    if blocks is not None:
        return _held_out(cfg, np.random.default_rng([seed, 0x3A2E, int(blocks.group(1))]), episodes)
    if which.startswith(MAZE_SUITE + ":"):
        from levelray.contracts.maze import suite_level_id

        return np.array([suite_level_id(_check_suite_name(which))], dtype=np.int64)
    m = LEVEL_SET_RE.match(which)
    if m is None:
        raise ConfigError(f"--levels: expected {_FORMS}, got {which!r}")
    return np.arange(int(m.group(1)), int(m.group(2)) + 1, dtype=np.int64)


def _is_maze_set(item: str) -> bool:
    return (item == MAZE_SUITE or item.startswith((MAZE_SUITE + ":", MAZE_FILE))
            or MAZE_BLOCKS_RE.match(item) is not None)


def _check_maze_run(cfg: RunConfig, items: list[str]) -> None:
    """ConfigError where maze level sets are asked of a run that is not a maze run, or the suite's mazes are
    not of the run's maze size."""
    mazes = [item for item in items if _is_maze_set(item)]
    if not mazes:
        return
    from levelray.actors.maze_env import PREFIX, maze_size

    if not cfg.env.id.startswith(PREFIX):
        raise ConfigError(f"--levels {','.join(mazes)}: maze level sets need a maze run (--env maze:<W>x<H>); "
                          f"this run's env is {cfg.env.id}")
    if any(item == MAZE_SUITE or item.startswith(MAZE_SUITE + ":") for item in mazes):
        from levelray.contracts.maze import suite_level, suite_names

        size = maze_size(cfg.env.id)
        wrong = [n for n in suite_names() if (suite_level(n).width, suite_level(n).height) != size]
        if wrong:
            level = suite_level(wrong[0])
            raise ConfigError(f"--levels maze-suite: the suite's mazes are {level.width}x{level.height} "
                              f"({', '.join(wrong)}), this run's env is {cfg.env.id}")


def _maze_file_sets(cfg: RunConfig, item: str, ids) -> list[LevelSet]:
    """One level set per maze of `maze-file:PATH`, each its one level under the next id of `ids` (from
    `FILE_ID_BASE`) with its encoding; ConfigError naming a file whose maze is not of the run's size."""
    from levelray.contracts.maze import maze_size

    size = maze_size(cfg.env.id)
    sets = []
    for file, level in _read_maze_files(item).items():
        if (level.width, level.height) != size:
            raise ConfigError(f"--levels {item}: maze file {file} is {level.width}x{level.height}, this run's env "
                              f"is {cfg.env.id}")
        level_id = next(ids)
        sets.append(LevelSet(file.stem, np.array([level_id], dtype=np.int64), cfg.env, file=str(file),
                             encodings={level_id: level.encode()}))
    return sets


def plan_level_sets(cfg: RunConfig, items: list[str], episodes: int, seed: int = 0) -> list[LevelSet]:
    """The level sets `items` (from `parse_level_sets`) of an evaluation of `cfg`'s policy, in order, with
    `maze-suite` expanded into one set per maze (a maze named twice is played once) and `maze-file:PATH` into one
    set per file; ConfigError for maze sets of a run that is not a maze run, and for a maze file named as another
    level set is."""
    from levelray.contracts.maze import FILE_ID_BASE

    _check_maze_run(cfg, items)
    out: dict[str, LevelSet] = {}
    file_ids = itertools.count(FILE_ID_BASE)
    for item in items:
        if item.startswith(MAZE_FILE):
            sets = _maze_file_sets(cfg, item, file_ids)
        elif item == MAZE_SUITE:
            from levelray.contracts.maze import suite_names

            sets = [_planned(cfg, f"{MAZE_SUITE}:{name}", episodes, seed) for name in suite_names()]
        else:
            sets = [_planned(cfg, item, episodes, seed)]
        for level_set in sets:
            known = out.setdefault(level_set.name, level_set)
            if known is not level_set and (known.file or level_set.file):
                files = " and ".join(f"maze file {s.file}" if s.file else "the suite's maze" if s.suite
                                     else "a level set" for s in (known, level_set))
                raise ConfigError(f"--levels: two level sets are named {level_set.name!r} ({files}): each needs "
                                  f"a name of its own (a maze file is named after its file)")
    return list(out.values())


def _planned(cfg: RunConfig, which: str, episodes: int, seed: int) -> LevelSet:
    """The level set `which` (one suite maze, `maze-<N>`, or a set of seeds)."""
    suite = which.startswith(MAZE_SUITE + ":")
    name = which[len(MAZE_SUITE) + 1:] if suite else which
    blocks = MAZE_BLOCKS_RE.match(which)
    env = replace_paths(cfg, {"env.maze_blocks": blocks.group(1)}).env if blocks is not None else cfg.env
    return LevelSet(name, level_set_seeds(cfg, which, episodes, seed), env, suite)
