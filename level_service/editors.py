"""The level editors a run may name (`levels.editor`): each is an entry of `contracts.levels.EDITORS`, the import path
of a `level_service.curriculum.LevelEditor` class and the env family it edits, imported here where the level service
runs. Adding an editor is its own module and one line in that table; nothing here names a concrete editor.
"""

from __future__ import annotations

import importlib

from levelray.contracts.config import EnvConfig, LevelConfig
from levelray.contracts.levels import EDITORS
from levelray.contracts.validate import editor_space_problems
from levelray.level_service.curriculum import LevelEditor

__all__ = ["editor_class", "make_editor"]


def editor_class(name: str) -> type[LevelEditor]:
    """The editor class registered as `name`; ValueError naming `levels.editor` where none is or it does not import."""
    entry = EDITORS.get(name)
    if entry is None:
        editors = ", ".join(k for k, v in EDITORS.items() if v is not None)
        raise ValueError(f"levels.editor {name!r} names no level editor (registered: {editors})")
    module, _, attribute = entry.editor.partition(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"levels.editor {name}: {entry.editor} does not import ({exc})") from exc


def make_editor(env: EnvConfig | None, levels: LevelConfig, *, unbounded: bool) -> LevelEditor | None:
    """The editor `levels.editor` names, for the run's `env` section (None for "none"); ValueError, in the words of the
    run config's check (`contracts.validate.editor_space_problems`), where the env is not the editor's family or the
    level space is a fixed set (`unbounded` False)."""
    if EDITORS.get(levels.editor) is None:
        return None
    found = editor_space_problems(levels.editor, env, unbounded=unbounded)
    if found:
        raise ValueError("; ".join(p.message for p in found))
    return editor_class(levels.editor).for_run(env, levels)
