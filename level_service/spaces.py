"""The two level spaces the service runs PLR over, each a level source (`level_service.curriculum.LevelSource`).

A fixed training set (`--num-levels N`): `LevelSampler` over its seeds. An unbounded space (`--num-levels 0`
with a scored strategy): `LevelBuffer` over `[start_level, MAX_SEED)`, with the editor `levels.editor` names.
This module is where a run's config becomes a source, and a saved state the source it describes; the service
uses the source only through the protocol.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from levelray.contracts.config import EnvConfig, LevelConfig
from levelray.level_service.buffer import LevelBuffer
from levelray.level_service.curriculum import LevelSource, LevelView
from levelray.level_service.editors import make_editor
from levelray.level_service.sampler import LevelSampler

__all__ = ["LevelSource", "LevelView", "check_same_space", "level_encodings", "levels_view", "make_sampler",
           "sampler_from_state"]

def make_sampler(seeds, config: LevelConfig | None, *, start_level: int = 0, discount: float = 0.99,
                 rng=None, env: EnvConfig | None = None) -> LevelSource:
    """`LevelSampler(seeds)` for a fixed set; `LevelBuffer(start_level)` when `seeds` is None (unbounded), with the
    editor `config.editor` names over the env family of `env` (`level_service.editors.make_editor`: ValueError, in
    the words of the run config's check, for a fixed set or an env of another family)."""
    editor = None if config is None else make_editor(env, config, unbounded=seeds is None)
    if seeds is None:
        return LevelBuffer(start_level, config, discount=discount, rng=rng, editor=editor)
    return LevelSampler(seeds, config, discount=discount, rng=rng)


def level_encodings(sampler: LevelSource, ids) -> dict[int, bytes]:
    """`{id: encoding}` of the edited levels among `ids` (empty where the sampler has no editor)."""
    return {} if sampler.editor is None else sampler.editor.encodings_of(ids)


def sampler_from_state(state: Any) -> LevelSource:
    """The sampler a `state_dict()` of either kind describes; ValueError if it is not a valid one."""
    if isinstance(state, dict) and state.get("kind") == "buffer":
        return LevelBuffer.from_state_dict(state)
    return LevelSampler.from_state_dict(state)


def check_same_space(loaded: LevelSource, expected: LevelSource, what: str) -> None:
    """ValueError unless `loaded` runs over the same level space as `expected` (a saved state resumed)."""
    if isinstance(expected, LevelBuffer):
        if not isinstance(loaded, LevelBuffer) or loaded.start_level != expected.start_level:
            raise ValueError(f"{what} was not written for an unbounded level space from seed "
                             f"{expected.start_level} (--num-levels 0 --start-level {expected.start_level})")
        family = [None if s.editor is None else f"{s.config.editor} on {s.editor.family}" for s in (loaded, expected)]
        if family[0] != family[1]:
            raise ValueError(f"{what} was written with level editor {_editor_name(family[0])}, this run has "
                             f"{_editor_name(family[1])} (levels.editor, --env, --maze-blocks)")
    elif not isinstance(loaded, LevelSampler) or not np.array_equal(loaded.seeds, expected.seeds):
        size = loaded.num_levels if isinstance(loaded, LevelSampler) else "an unbounded space of"
        raise ValueError(f"{what} was written for a different seed set ({size} levels) than the "
                         f"{expected.num_levels} seeds given")


def _editor_name(family: str | None) -> str:
    return "none" if family is None else family


def levels_view(s: LevelSource) -> LevelView:
    """The levels `s` holds, as arrays in one order (`LevelSource.view`)."""
    return s.view()
