"""Input checks shared by the sampler's constructor, its feedback reader and its state reader.

Each raises ValueError naming the field and the form it expects, so a bad call through Ray is readable in
the caller.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from levelray.contracts.config import LevelConfig
from levelray.contracts.levels import EpisodeResults
from levelray.contracts.validate import leaf_problems

INT64_MAX = np.iinfo(np.int64).max


def check_real(name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False) -> float:
    """`value` as a float in `[lo, hi]` (`(lo, hi]` with `lo_open`)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v > hi or v < lo or (lo_open and v == lo):
        bracket = "(" if lo_open else "["
        raise ValueError(f"{name} must be a finite number in {bracket}{lo}, {hi}], got {value!r}")
    return v


def as_int_array(name: str, value: Any, ndim: int) -> np.ndarray:
    """`value` as an int64 array of `ndim` dimensions (an empty list counts as integers)."""
    try:
        arr = np.asarray(value)
    except Exception as exc:
        raise ValueError(f"{name} must be an integer array of {ndim} dimensions: {exc}") from exc
    if arr.size == 0 and arr.dtype.kind in "fb":  # np.asarray([]) is float64
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must be an integer array of {ndim} dimensions, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {arr.shape}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > INT64_MAX:
        raise ValueError(f"{name} holds values beyond int64")
    return arr.astype(np.int64, copy=False)


def as_float_array(name: str, value: Any, shape: tuple[int, ...]) -> np.ndarray:
    """`value` as a finite float64 array of exactly `shape`."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except Exception as exc:
        raise ValueError(f"{name} must be a real array of shape {shape}: {exc}") from exc
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return arr


def checked_config(config: LevelConfig) -> LevelConfig:
    """`config`, checked leaf by leaf against the ranges and choices of its fields' metadata (the rule the run
    config is checked with, `contracts.validate.leaf_problems`); ValueError naming the first bad field."""
    if not isinstance(config, LevelConfig):
        raise ValueError(f"config must be a contracts.config.LevelConfig, got {type(config).__name__}")
    found = leaf_problems(config, "levels.")
    if found:
        raise ValueError(found[0].message)
    return config


def episode_columns(results: Any) -> tuple[np.ndarray, np.ndarray]:
    """`(levels [E] int64, scores [E] float64)` of `contracts.levels.EpisodeResults`, every field checked (shapes
    alike, scores and returns finite, lengths >= 1, solved and (where given) replayed booleans); ValueError naming
    the first bad field."""
    if not isinstance(results, EpisodeResults):
        raise ValueError(f"results must be a contracts.levels.EpisodeResults, got {type(results).__name__}")
    levels = as_int_array("levels", results.levels, 1)
    shape = levels.shape
    scores = as_float_array("scores", results.scores, shape)
    as_float_array("returns", results.returns, shape)
    lengths = as_int_array("lengths", results.lengths, 1)
    if lengths.shape != shape:
        raise ValueError(f"lengths must have shape {shape} like levels, got {lengths.shape}")
    if lengths.size and int(lengths.min()) < 1:
        raise ValueError(f"lengths must be >= 1 (steps of a finished episode), got {int(lengths.min())}")
    solved = np.asarray(results.solved)
    if solved.shape != shape or (solved.size and solved.dtype != bool):
        raise ValueError(f"solved must be a boolean array of shape {shape}, got {solved.dtype} {solved.shape}")
    if results.replayed is not None:
        replayed = np.asarray(results.replayed)
        if replayed.shape != shape or (replayed.size and replayed.dtype != bool):
            raise ValueError(f"replayed must be a boolean array of shape {shape} or None, got {replayed.dtype} "
                             f"{replayed.shape}")
    return levels, scores
