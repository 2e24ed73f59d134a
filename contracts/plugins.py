"""One way to plug in: every kind of plug-in is a `PluginKind`, named the same way wherever the config names one.

A plug-in is given either by a short name, one of the built-ins that register themselves beside their code
(`@LEVEL_EDITORS.register("accel")` on ACCEL's maze editor), or as `module:attribute`, a user's own, imported where
it runs (the directory levelray is started in is on the path, as for `python -m`): on the command line or in YAML,
with no edit of the package. A name that is neither is refused naming the
flag, the kind and what exists.

A kind lives in the part that uses its plug-ins (the level service's editors in `level_service.editors`, ...) and
imports the modules of its built-ins by name the first time it is asked for one, so that naming a kind costs
nothing until a run needs it. This module is the mechanism alone: it names no plug-in.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import sys
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from levelray.contracts.config_values import ConfigError

__all__ = ["IMPORT_PATH", "PluginKind", "check_plugin_name"]

T = TypeVar("T")
IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
SHORT_NAME = re.compile(r"[a-z][a-z0-9_-]*")


def check_plugin_name(text: str) -> None:
    """A config leaf's form: a built-in's short name (`accel`) or `module:attribute`; ValueError otherwise."""
    if not (SHORT_NAME.fullmatch(text) or IMPORT_PATH.fullmatch(text)):
        raise ValueError(f"expected a built-in's name (lower case, e.g. accel) or module:attribute of your own "
                         f"(e.g. my_editors:WallEditor), got {text!r}")


class PluginKind(Generic[T]):
    """The plug-ins of one kind: `kind` in words ("level editor"), the config `key` and command-line `flag` that name
    one, the modules whose import registers the built-ins, and (`noun`) what `module:attribute` names, in words.

    `builtin_package` names a package whose every module and sub-package is imported (not their sub-modules) before
    the built-ins are read: the env families (`levelray.families`), where a new built-in is a new folder and edits
    no list."""

    def __init__(self, kind: str, key: str, flag: str, builtin_modules: Sequence[str] = (), *,
                 noun: str | None = None, builtin_package: str | None = None):
        self.kind, self.key, self.flag = kind, key, flag
        self.noun = kind if noun is None else noun  # what `module:attribute` names, in a refusal
        self._builtin_modules = tuple(builtin_modules)
        self._builtin_package = builtin_package  # every module and sub-package of it is imported (see the class doc)
        self._builtins: dict[str, T] = {}
        self._imported = False

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: the built-in `name` is what it decorates. A name registered twice is a ValueError."""
        check_plugin_name(name)

        def add(plugin: T) -> T:
            if name in self._builtins and self._builtins[name] is not plugin:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._builtins[name] = plugin
            return plugin

        return add

    def names(self) -> list[str]:
        """The built-ins' names, sorted."""
        self._import_builtins()
        return sorted(self._builtins)

    def load(self, spec: str) -> T:
        """The plug-in `spec` names: a built-in by its name, or `module:attribute` imported here. ConfigError naming
        the flag, the kind and what exists (or why the module did not import)."""
        if IMPORT_PATH.fullmatch(spec):
            return self._imported_plugin(spec)
        self._import_builtins()
        if spec not in self._builtins:
            raise ConfigError(f"{self.flag} {spec!r} ({self.key}): no {self.kind} is called that; built in: "
                              f"{', '.join(self.names()) or 'none'}; or name one of your own as module:attribute")
        return self._builtins[spec]

    def _imported_plugin(self, spec: str) -> T:
        """`module:attribute` imported, the working directory on the path as `python -m` puts it there (the
        `levelray` command's own script does not): a module beside where levelray is started imports."""
        module_name, _, attribute = spec.partition(":")
        if os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            article = "an" if self.kind[0] in "aeiou" else "a"
            raise ConfigError(f"{self.flag} {spec} ({self.key}): cannot import {module_name!r} ({exc}); {article} "
                              f"{self.kind} of your own must import where it runs, from the directory levelray is "
                              f"started in or the Python path") from None
        if not hasattr(module, attribute):
            raise ConfigError(f"{self.flag} {spec} ({self.key}): {module_name!r} has no {self.noun} {attribute!r}")
        return getattr(module, attribute)

    def _import_builtins(self) -> None:
        if not self._imported:
            modules = list(self._builtin_modules)
            if self._builtin_package is not None:
                package = importlib.import_module(self._builtin_package)
                modules += sorted(f"{package.__name__}.{info.name}" for info in pkgutil.iter_modules(package.__path__))
            for module in modules:
                importlib.import_module(module)
            self._imported = True
