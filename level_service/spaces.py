"""Where a run's config becomes a level source, and a saved state the source it describes: the curricula a run may
name (`levels.source`, `--level-source`), a plug-in kind (`contracts.plugins`).

The built-ins are `plr` (the default): Prioritized Level Replay over either level space, `LevelSampler` over a fixed
training set (`--num-levels N`), `LevelBuffer` over an unbounded space (`--num-levels 0` with a scored strategy,
from `start_level` to `MAX_SEED`, with the editor `levels.editor` names); and `sfl`, Sampling For Learnability
(`level_service.sfl`, registered beside its code and imported by this kind the first time a curriculum is named).
A curriculum of one's own is named by `module:attribute`, a class implementing `level_service.curriculum.LevelSource`,
imported where the level service runs: adding one edits no file of the package. A saved state names the curriculum
that wrote it (its `config.source`) and is read back by that curriculum's class; a run that names another is
refused. The service uses the source only through the protocol.
"""

from __future__ import annotations

from typing import Any

from levelray.contracts.config import ConfigError, EnvConfig, LevelConfig
from levelray.contracts.levels import UNSCORED_STRATEGIES
from levelray.contracts.plugins import PluginKind
from levelray.contracts.rng import make_rng
from levelray.level_service.buffer import LevelBuffer
from levelray.level_service.checks import as_int_array
from levelray.level_service.curriculum import Curriculum, CurriculumSetup, LevelSource, LevelView
from levelray.level_service.sampler import LevelSampler
from levelray.policy.level_scores import load_level_score

__all__ = ["CURRICULA", "LevelSource", "LevelView", "PLR", "check_curriculum", "check_same_space", "curriculum_class",
           "level_encodings", "levels_view", "make_sampler", "sampler_from_state"]

CURRICULA: PluginKind[Curriculum] = PluginKind("level source", "levels.source", "--level-source",
                                               builtin_modules=("levelray.level_service.sfl",))


@CURRICULA.register("plr")
class PLR:
    """Prioritized Level Replay, `levels.source plr`: a `LevelSampler` over a fixed set, a `LevelBuffer` (PLR's
    level buffer, Robust PLR, ACCEL with an editor) over an unbounded space. Not a source itself: it picks one."""

    @classmethod
    def for_run(cls, setup: CurriculumSetup) -> LevelSource:
        return (LevelBuffer if setup.seeds is None else LevelSampler).for_run(setup)

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> LevelSource:
        if isinstance(d, dict) and d.get("kind") == "buffer":
            return LevelBuffer.from_state_dict(d)
        return LevelSampler.from_state_dict(d)


def curriculum_class(name: str) -> Curriculum:
    """The curriculum `name` names (ConfigError, a ValueError, naming `--level-source`, the kind and the built-ins, or
    what the one found lacks)."""
    curriculum = CURRICULA.load(name)
    missing = [m for m in ("for_run", "from_state_dict") if not callable(getattr(curriculum, m, None))]
    if missing:
        raise ConfigError(f"--level-source {name} (levels.source) has no {' or '.join(missing)}: a curriculum is a "
                          f"level_service.curriculum.LevelSource class")
    return curriculum


def check_curriculum(levels: LevelConfig, env: EnvConfig | None = None) -> None:
    """A run's curriculum and level score (`levels.strategy`, a scored one), before the run starts: ConfigError naming
    the flag, the kind and what exists for one that does not load (`deploy.training.driver.prepare_run_dir`); and,
    with the run's `env` section, what a curriculum needs of the run, where it says (an optional classmethod
    `check_run(levels, env)` raising ConfigError: SFL's success signal)."""
    curriculum = curriculum_class(levels.source)
    check_run = getattr(curriculum, "check_run", None)
    if env is not None and callable(check_run):
        check_run(levels, env)
    if levels.strategy not in UNSCORED_STRATEGIES:
        load_level_score(levels.strategy)


def make_sampler(seeds, config: LevelConfig | None, *, start_level: int = 0, discount: float = 0.99,
                 rng=None, env: EnvConfig | None = None) -> LevelSource:
    """The source of the curriculum `config.source` names over `seeds` (None: the unbounded space from
    `start_level`), for the run's `env` section (its editor's family); `plr`: `LevelSampler(seeds)` for a fixed set,
    `LevelBuffer(start_level)` with the editor `config.editor` names when unbounded (ValueError, in the words of the
    run config's check, for an editor on a fixed set or an env of another family)."""
    levels = LevelConfig() if config is None else config
    space = None if seeds is None else as_int_array("seeds", seeds, 1)
    setup = CurriculumSetup(space, start_level, levels, discount, make_rng(rng), env)
    return curriculum_class(levels.source).for_run(setup)


def level_encodings(sampler: LevelSource, ids) -> dict[int, bytes]:
    """`{id: encoding}` of the edited levels among `ids` (empty where the sampler has no editor)."""
    return {} if sampler.editor is None else sampler.editor.encodings_of(ids)


def sampler_from_state(state: Any) -> LevelSource:
    """The source a `state_dict()` describes, read back by the curriculum that wrote it (its `config.source`;
    `plr` for a state written before curricula were named); ValueError if it is not a valid one."""
    saved = state.get("config") if isinstance(state, dict) else None
    name = saved.get("source", "plr") if isinstance(saved, dict) else "plr"
    if not isinstance(name, str):
        raise ValueError(f"state['config']['source'] must be a level source's name, got {name!r}")
    return curriculum_class(name).from_state_dict(state)


def check_same_space(loaded: LevelSource, expected: LevelSource, what: str) -> None:
    """ValueError unless `loaded` was written by the curriculum of `expected` (the run's) over the same level space
    (`LevelSource.check_same_space`): a saved state resumed."""
    written, named = loaded.config.source, expected.config.source
    if written != named:
        raise ValueError(f"{what} was written by curriculum {written}, this run has {named} (levels.source, "
                         f"--level-source): a state resumes only with the curriculum that wrote it")
    expected.check_same_space(loaded, what)


def levels_view(s: LevelSource) -> LevelView:
    """The levels `s` holds, as arrays in one order (`LevelSource.view`)."""
    return s.view()
