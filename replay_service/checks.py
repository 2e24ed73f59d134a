"""Argument checks of the replay buffer: each raises ValueError naming the argument and its expected form,
before the buffer changes."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np


def positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_beta(beta: Any) -> float:
    """The importance-sampling exponent as a finite float > 0."""
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real):
        raise ValueError(f"beta must be a real number > 0, got {beta!r}")
    beta = float(beta)
    if not (math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    return beta


def check_priorities(priorities: Any, n: int) -> np.ndarray:
    """Raw priorities `[n]` (float64, finite, >= 0) for `n` ids or items."""
    try:
        p = np.asarray(priorities, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"priorities must be a 1-D array of {n} real numbers >= 0") from exc
    if p.ndim != 1 or p.shape[0] != n:
        raise ValueError(f"priorities must have shape ({n},) to match the ids/items, got shape {p.shape}")
    if n and not (p.min() >= 0.0 and p.max() < np.inf):  # NaN fails both comparisons
        if not np.all(np.isfinite(p)):
            raise ValueError("priorities must be finite (got NaN or infinity)")
        raise ValueError(f"priorities must be >= 0 (raw priorities such as |TD error|), got {p.min()}")
    return p


def check_ids(ids: Any) -> np.ndarray:
    """Item ids `[n]` as int64 >= 0."""
    a = np.asarray(ids)
    if a.ndim != 1:
        raise ValueError(f"ids must be a 1-D integer array, got shape {a.shape}")
    if a.size == 0:
        return a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise ValueError(f"ids must be a 1-D integer array (int64 ids from insert/sample), got dtype {a.dtype}")
    if a.dtype.kind == "u" and a.max() > np.iinfo(np.int64).max:
        raise ValueError("ids must fit in int64")
    a = a.astype(np.int64, copy=False)
    if a.min() < 0:
        raise ValueError(f"ids must be >= 0, got {a.min()}")
    return a
