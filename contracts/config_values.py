"""One config value: its conversion from YAML or a CLI string to the field's type, and its range and choices;
and what every config section is built on (`Section`, `flag`).

Apart from `contracts.config` so that the sections there (and `contracts.config_env`) can normalise their own
leaves when built.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any


class ConfigError(ValueError):
    """A config value or key is wrong; the message names the dotted path."""


def _unwrap_optional(tp) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


@functools.cache
def field_types(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def coerce_value(path: str, tp, value: Any, meta: dict | None = None) -> Any:
    """Convert `value` (from YAML or a CLI string) to type `tp`, checking choices and bounds."""
    meta = meta or {}
    base, optional = _unwrap_optional(tp)
    if value is None or (optional and isinstance(value, str) and value.lower() in ("none", "null")):
        if optional:
            return None
        raise ConfigError(f"{path}: must be a {getattr(base, '__name__', base)}, got null")
    try:
        if base is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                out = value.lower() in ("true", "1", "yes")
            elif isinstance(value, bool):
                out = value
            else:
                raise ValueError
        elif base is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            out = int(value)
        elif base is float:
            if isinstance(value, bool):
                raise ValueError
            out = float(value)
            if out != out or out in (float("inf"), float("-inf")):
                raise ValueError
        elif base is str:
            if meta.get("numbers_as_text") and isinstance(value, int) and not isinstance(value, bool):
                value = str(value)
            if not isinstance(value, str):
                raise ValueError
            out = value
        elif typing.get_origin(base) is list:
            (item_tp,) = typing.get_args(base)
            items = value.split(",") if isinstance(value, str) else value
            if not isinstance(items, list | tuple):
                raise ValueError
            out = [coerce_value(f"{path}[{i}]", item_tp, v) for i, v in enumerate(items)]
        else:
            raise ConfigError(f"{path}: unsupported type {base}")
    except ConfigError:
        raise
    except (TypeError, ValueError):
        expected = getattr(base, "__name__", str(base)) + (" or null" if optional else "")
        raise ConfigError(f"{path}: expected {expected}, got {value!r}") from None
    if "choices" in meta and out not in meta["choices"]:
        raise ConfigError(f"{path}: expected one of {', '.join(meta['choices'])}, got {out!r}")
    if "min" in meta and out < meta["min"]:
        raise ConfigError(f"{path}: must be >= {meta['min']}, got {out!r}")
    if "above" in meta and not out > meta["above"]:
        raise ConfigError(f"{path}: must be > {meta['above']}, got {out!r}")
    if "max" in meta and out > meta["max"]:
        raise ConfigError(f"{path}: must be <= {meta['max']}, got {out!r}")
    if "check" in meta:
        try:
            meta["check"](out)
        except ValueError as exc:
            raise ConfigError(f"{path}: {exc}") from None
    return out


def flag(name: str, help: str, **kw) -> dict:
    """A leaf's metadata: its CLI flag, its help, and optional `choices`, `min`, `above` (a lower bound the value
    must exceed, such as a temperature's 0, which a transform divides by) and `max`; `check`, a function that
    raises ValueError for a value of the right type that still means nothing (its message follows the dotted
    path); `numbers_as_text`, a str leaf that also takes a YAML number as its text (`coerce_value`);
    `resumable`, a leaf a resumed run may change (`contracts.config.RESUMABLE_KEYS`)."""
    return {"flag": name, "help": help, **kw}


class Section:
    """Every section is frozen (passed whole, never changed in place) and normalises its leaves when built, as
    the CLI would: `learning_rate="0.001"` in Python becomes the float 0.001. A value that does not convert is
    kept as given, for `contracts.validate` to refuse with its dotted path."""

    def __post_init__(self) -> None:
        hints = field_types(type(self))
        for f in dataclasses.fields(self):
            tp = hints[f.name]
            if dataclasses.is_dataclass(tp):
                continue
            try:
                value = coerce_value(f.name, tp, getattr(self, f.name), dict(f.metadata))
            except ConfigError:
                continue
            object.__setattr__(self, f.name, value)
