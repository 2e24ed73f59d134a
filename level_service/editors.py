"""The level editors a run may name (`levels.editor`): a plug-in kind (`contracts.plugins`). A built-in is named by the
name it registers beside its code (`accel`: ACCEL's maze editor, `families.maze.editor`), a user's own by
`module:attribute`, imported where the level service runs: adding an editor edits no file of the package.

An editor class says which env family it edits: `edits_env` (the prefix of the env ids of that family) and
`edits_family` (that family in the words of the refusal, "levels.editor X needs <family>, not <env>"). What any
editor needs of the level space (an unbounded one) is the run config's rule (`contracts.validate`); both are checked
before a run starts (`editor_problems`, from `deploy.training.driver.prepare_run_dir`) and again where the level
service makes the editor, in the same words.
"""

from __future__ import annotations

from levelray.contracts.config import ConfigError, EnvConfig, LevelConfig
from levelray.contracts.plugins import PluginKind
from levelray.contracts.validate import Problem, editor_needs, editor_space_problems
from levelray.level_service.curriculum import LevelEditor

__all__ = ["LEVEL_EDITORS", "check_editor", "editor_class", "editor_problems", "make_editor"]

# The built-in editors register in their families' folders (`@LEVEL_EDITORS.register("accel")` on the maze's).
LEVEL_EDITORS: PluginKind[type[LevelEditor]] = PluginKind("level editor", "levels.editor", "--level-editor",
                                                          builtin_package="levelray.families")


def editor_class(name: str) -> type[LevelEditor]:
    """The editor class `name` names (ConfigError, a ValueError, naming `levels.editor` and the editors there are)."""
    return LEVEL_EDITORS.load(name)


def editor_problems(editor: str, env: EnvConfig | None, *, unbounded: bool) -> list[Problem]:
    """What `editor` needs of the run: the env family it edits, and an unbounded level space (`unbounded`)."""
    if editor == "none":
        return []
    cls = editor_class(editor)
    env_id = None if env is None else env.id
    found = []
    if not str(env_id).startswith(cls.edits_env):
        found.append(editor_needs(editor, "env.id", f"{cls.edits_family}, not {env_id}"))
    return found + editor_space_problems(editor, unbounded=unbounded)


def check_editor(env: EnvConfig, levels: LevelConfig) -> None:
    """A run's editor, before the run starts: ConfigError naming what it needs, or one that does not load."""
    found = editor_problems(levels.editor, env, unbounded=env.num_levels == 0)
    if found:
        raise ConfigError("; ".join(p.message for p in found))


def make_editor(env: EnvConfig | None, levels: LevelConfig, *, unbounded: bool) -> LevelEditor | None:
    """The editor `levels.editor` names, for the run's `env` section (None for "none"); ValueError, in the words of
    `editor_problems`, where the env is not the editor's family or the level space is a fixed set (`unbounded`
    False)."""
    if levels.editor == "none":
        return None
    found = editor_problems(levels.editor, env, unbounded=unbounded)
    if found:
        raise ValueError("; ".join(p.message for p in found))
    return editor_class(levels.editor).for_run(env, levels)
