"""Per-trajectory priority from per-step absolute TD errors (R2D2 mixture of max and mean), and per unroll from its
items' priorities (an auxiliary loss's, one per item it cut from replay) the same way."""

from __future__ import annotations

import numpy as np

__all__ = ["priorities_by_unroll", "trajectory_priority"]


def _to_numpy(x, name: str) -> np.ndarray:
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor, without importing torch
        x = x.detach().cpu().numpy()
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a numeric array of shape [T, B], got {type(x).__name__}") from exc


def trajectory_priority(abs_td, eta: float = 0.9, mask=None) -> np.ndarray:
    """Priority of each of B trajectories: ``eta * max_t |δ| + (1 - eta) * mean_t |δ|``.

    ``abs_td``: per-step |δ|, time-major ``[T, B]`` (NumPy array, list or CPU torch tensor), finite
    and >= 0. ``mask``: optional ``[T, B]`` (bool or 0/1) marking the valid steps; max and mean are
    taken over valid steps only, and a trajectory with no valid step gets priority 0. Returns
    float64 ``[B]``. Raises ValueError for a bad shape, negative/NaN/infinite values or eta
    outside [0, 1].
    """
    td = _to_numpy(abs_td, "abs_td")
    if td.ndim != 2:
        raise ValueError(f"abs_td must have shape [T, B] (time-major), got shape {td.shape}")
    if td.shape[0] == 0:
        raise ValueError(f"abs_td must have at least one time step, got shape {td.shape}")
    if not np.all(np.isfinite(td)):
        raise ValueError("abs_td must be finite (no NaN or infinity)")
    if np.any(td < 0):
        raise ValueError("abs_td must be >= 0 (pass absolute TD errors |δ|)")
    eta = float(eta)
    if not 0.0 <= eta <= 1.0:
        raise ValueError(f"eta must be in [0, 1], got {eta}")
    if mask is None:
        return eta * td.max(axis=0) + (1.0 - eta) * td.mean(axis=0)
    m = _to_numpy(mask, "mask")
    if m.shape != td.shape:
        raise ValueError(f"mask must have the shape of abs_td {td.shape}, got {m.shape}")
    if not np.all((m == 0) | (m == 1)):
        raise ValueError("mask must be boolean or 0/1")
    valid = m.astype(bool)
    count = valid.sum(axis=0)
    mx = np.where(valid, td, 0.0).max(axis=0)  # td >= 0, so 0 is a neutral fill for max
    mean = np.where(valid, td, 0.0).sum(axis=0) / np.maximum(count, 1)
    return np.where(count > 0, eta * mx + (1.0 - eta) * mean, 0.0)


def priorities_by_unroll(ids: np.ndarray, priorities: np.ndarray, eta: float) -> tuple[np.ndarray, np.ndarray]:
    """One priority per sampled unroll from the priorities `[n]` of its items (`ids [n]`: each item's unroll), as
    the TD priorities aggregate steps: eta * max + (1 - eta) * mean. Returns (unique ids, priorities)."""
    unique, inverse = np.unique(ids, return_inverse=True)
    peak = np.full(len(unique), -np.inf)
    np.maximum.at(peak, inverse, priorities)
    mean = np.bincount(inverse, weights=priorities, minlength=len(unique)) / np.bincount(inverse, minlength=len(unique))
    return unique, eta * peak + (1.0 - eta) * mean
