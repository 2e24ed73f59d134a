"""The level sets an evaluation plays (`levelray evaluate --levels`, comma-separated):

- `train`: the config's training levels `[start_level, start_level + num_levels)`, in a random order
  drawn from `--seed` (cycled when there are more episodes than levels).
- `test`: held-out levels, the "full distribution" of the PLR paper: distinct random seeds from
  `[0, 2**31 - 1)` outside the training range (procgen levels; gymnasium and MiniGrid `reset(seed=...)`
  seeds).
  With an unbounded training set (`num_levels == 0`) nothing is held out; the result says so
  (`held_out: false`).
- `A-B`: the explicit seeds A to B, both included, in order.

A maze run (`--env maze:<W>x<H>`) has three more (any other run refuses them, `plan_level_sets`):
- `maze-suite`: every maze of the hand-designed test suite (`contracts.maze.suite_names`), each a level set of
  its own, named by the maze (`results.<maze name>`); `maze-suite:<name>` one of them. Every episode of a maze
  plays that one level (its id is `suite_level_id(name)`).
- `maze-<N>` (the issue's held-out sets are `maze-25` and `maze-50`): levels generated with N walls, whatever
  the run's `--maze-blocks`, on held-out seeds drawn as `test` draws them (another stream for each N), so
  they are outside the training range; with an unbounded training set they are fresh seeds, not held out.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from levelray.contracts.config import ConfigError, EnvConfig, RunConfig, replace_paths
from levelray.contracts.levels import MAX_SEED, training_range

LEVEL_SET_RE = re.compile(r"^(\d+)-(\d+)$")
MAZE_SUITE = "maze-suite"
MAZE_BLOCKS_RE = re.compile(r"^maze-(\d+)$")
_FORMS = "train, test, A-B (e.g. 1000-1999), maze-suite, maze-suite:<name> or maze-<blocks> (e.g. maze-25)"


@dataclasses.dataclass(frozen=True)
class LevelSet:
    """One level set of an evaluation: `name`, its key in the results; `seeds [n]` int64, the level ids its
    episodes play (cycled); `env`, the env config they are played with (the run's, but for `maze-<N>`:
    N walls); `suite`, whether it is a maze of the test suite (what the suite's mean is over)."""

    name: str
    seeds: np.ndarray
    env: EnvConfig
    suite: bool = False


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
    return item == MAZE_SUITE or item.startswith(MAZE_SUITE + ":") or MAZE_BLOCKS_RE.match(item) is not None


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
    if any(not MAZE_BLOCKS_RE.match(item) for item in mazes):
        from levelray.contracts.maze import suite_level, suite_names

        size = maze_size(cfg.env.id)
        wrong = [n for n in suite_names() if (suite_level(n).width, suite_level(n).height) != size]
        if wrong:
            level = suite_level(wrong[0])
            raise ConfigError(f"--levels maze-suite: the suite's mazes are {level.width}x{level.height} "
                              f"({', '.join(wrong)}), this run's env is {cfg.env.id}")


def plan_level_sets(cfg: RunConfig, items: list[str], episodes: int, seed: int = 0) -> list[LevelSet]:
    """The level sets `items` (from `parse_level_sets`) of an evaluation of `cfg`'s policy, in order, with
    `maze-suite` expanded into one set per maze (a maze named twice is played once); ConfigError for maze sets
    of a run that is not a maze run."""
    _check_maze_run(cfg, items)
    out: dict[str, LevelSet] = {}
    for item in items:
        if item == MAZE_SUITE:
            from levelray.contracts.maze import suite_names

            expanded = [f"{MAZE_SUITE}:{name}" for name in suite_names()]
        else:
            expanded = [item]
        for which in expanded:
            suite = which.startswith(MAZE_SUITE + ":")
            name = which[len(MAZE_SUITE) + 1:] if suite else which
            blocks = MAZE_BLOCKS_RE.match(which)
            env = (replace_paths(cfg, {"env.maze_blocks": blocks.group(1)}).env if blocks is not None
                   else cfg.env)
            out.setdefault(name, LevelSet(name, level_set_seeds(cfg, which, episodes, seed), env, suite))
    return list(out.values())
