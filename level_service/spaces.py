"""The two level spaces the service runs PLR over, behind one set of functions.

A fixed training set (`--num-levels N`): `LevelSampler` over its seeds. An unbounded space (`--num-levels 0`
with a scored strategy): `LevelBuffer` over `[start_level, MAX_SEED)`. Both draw `(seed, replayed)` pairs,
take the same `LevelFeedback` and save a state that says which it is; `levels_view` reads either the same way.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from levelray.contracts.config import EnvConfig, LevelConfig
from levelray.contracts.validate import editor_space_problems
from levelray.level_service.buffer import LevelBuffer
from levelray.level_service.editor import MazeEditor
from levelray.level_service.sampler import LevelSampler

__all__ = ["LevelView", "Sampler", "check_same_space", "level_encodings", "levels_view", "make_sampler",
           "sampler_from_state"]

Sampler = LevelSampler | LevelBuffer


def make_sampler(seeds, config: LevelConfig | None, *, start_level: int = 0, discount: float = 0.99,
                 rng=None, env: EnvConfig | None = None) -> Sampler:
    """`LevelSampler(seeds)` for a fixed set; `LevelBuffer(start_level)` when `seeds` is None (unbounded), with
    ACCEL's editor over the maze family of `env` where `config.editor` is accel (ValueError, in the words of the
    run config's check `contracts.validate.editor_space_problems`, for a fixed set or an env that is no maze)."""
    editor = None
    if config is not None and config.editor != "none":
        found = editor_space_problems(config.editor, env, unbounded=seeds is None)
        if found:
            raise ValueError("; ".join(p.message for p in found))
        editor = MazeEditor.for_run(env, config)
    if seeds is None:
        return LevelBuffer(start_level, config, discount=discount, rng=rng, editor=editor)
    return LevelSampler(seeds, config, discount=discount, rng=rng)


def level_encodings(sampler: Sampler, ids) -> dict[int, bytes]:
    """`{id: encoding}` of the edited levels among `ids` (empty where the sampler has no editor)."""
    return {} if sampler.editor is None else sampler.editor.encodings_of(ids)


def sampler_from_state(state: Any) -> Sampler:
    """The sampler a `state_dict()` of either kind describes; ValueError if it is not a valid one."""
    if isinstance(state, dict) and state.get("kind") == "buffer":
        return LevelBuffer.from_state_dict(state)
    return LevelSampler.from_state_dict(state)


def check_same_space(loaded: Sampler, expected: Sampler, what: str) -> None:
    """ValueError unless `loaded` runs over the same level space as `expected` (a saved state resumed)."""
    if isinstance(expected, LevelBuffer):
        if not isinstance(loaded, LevelBuffer) or loaded.start_level != expected.start_level:
            raise ValueError(f"{what} was not written for an unbounded level space from seed "
                             f"{expected.start_level} (--num-levels 0 --start-level {expected.start_level})")
        family = [None if e is None else (e.width, e.height, e.blocks) for e in (loaded.editor, expected.editor)]
        if family[0] != family[1]:
            raise ValueError(f"{what} was written with level editor {_editor_name(family[0])}, this run has "
                             f"{_editor_name(family[1])} (levels.editor, --env, --maze-blocks)")
    elif not isinstance(loaded, LevelSampler) or not np.array_equal(loaded.seeds, expected.seeds):
        size = loaded.num_levels if isinstance(loaded, LevelSampler) else "an unbounded space of"
        raise ValueError(f"{what} was written for a different seed set ({size} levels) than the "
                         f"{expected.num_levels} seeds given")


def _editor_name(family) -> str:
    return "none" if family is None else f"accel on {family[0]}x{family[1]} mazes with {family[2]} walls"


class LevelView(NamedTuple):
    """The levels PLR holds, as arrays in one order: every seed of a fixed set, the filled slots of a buffer."""

    seeds: np.ndarray  # [n] int64
    scored: np.ndarray  # [n] bool: the level has a committed score
    scores: np.ndarray  # [n] float64
    staleness: np.ndarray  # [n] int64
    weights: np.ndarray  # [n] the replay distribution
    capacity: int  # what `scored.sum()` is a fraction of: the set's size, or the buffer's
    buffered: bool  # a level buffer (unbounded space)


def levels_view(s: Sampler) -> LevelView:
    if isinstance(s, LevelBuffer):
        n = s.size
        return LevelView(s.buffered_seeds(), np.ones(n, dtype=bool), s.scores(), s.staleness(), s.sample_weights(),
                         s.capacity, True)
    return LevelView(s.seeds, s.seen(), s.scores(), s.staleness(), s.sample_weights(), s.num_levels, False)
