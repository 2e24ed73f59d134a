"""One config value: its conversion from YAML or a CLI string to the field's type, and its range and choices.

Apart from `contracts.config` so that the sections there can normalise their own leaves when built.
"""

from __future__ import annotations

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
    if "max" in meta and out > meta["max"]:
        raise ConfigError(f"{path}: must be <= {meta['max']}, got {out!r}")
    return out
