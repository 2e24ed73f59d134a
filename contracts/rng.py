"""NumPy random generators for the services: built from a seed, and saved and restored exactly.

A service's RNG state is part of its snapshot, so a restored service draws the same numbers as the one that
wrote it. Only NumPy's own bit generators are accepted back from a state.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

__all__ = ["BIT_GENERATORS", "make_rng", "rng_from_state"]

BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def make_rng(rng: Any) -> np.random.Generator:
    """A generator from None (fresh entropy), a non-negative int seed, or a Generator (used as it is)."""
    if rng is None:
        return np.random.default_rng()
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool) and int(rng) >= 0:
        return np.random.default_rng(int(rng))
    raise ValueError(f"rng must be None, a non-negative int or a numpy.random.Generator, got {rng!r}")


def rng_from_state(state: Any, name: str = "rng") -> np.random.Generator:
    """The generator whose `bit_generator.state` is `state`; ValueError naming `name` for anything else."""
    if not isinstance(state, dict) or state.get("bit_generator") not in BIT_GENERATORS:
        raise ValueError(f"{name} must be a bit_generator.state dict of one of {BIT_GENERATORS}")
    bg = getattr(np.random, state["bit_generator"])()
    bg.state = state
    return np.random.Generator(bg)
