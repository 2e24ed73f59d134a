"""Cutting a `[T, N]` rollout batch into episodes: the feedback's column checks and the segmentation.

A column is one env of one actor, identified across batches by its actor id; `dones[t, n]` is True on the
LAST step of an episode. Each column is cut after every done into segments; a column's first segment may
continue an episode begun in an earlier batch (a pending fragment), its last one may go on in the next.
Segments are found with `np.add.reduceat` over the column-major flattening (flat index k = n * T + t), with
no Python loop over steps or levels.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from levelray.contracts.levels import LevelFeedback
from levelray.level_service.checks import as_int_array

__all__ = [
    "Pending", "Segments", "check_constant_levels", "chronological_ends", "feedback_columns", "merge_pending",
    "open_tails", "segment",
]


class Segments(NamedTuple):
    """The episode segments of a batch, in column-major order (all arrays `[S]` unless said)."""

    starts: np.ndarray  # flat index of each segment's first step
    ends: np.ndarray  # flat index one past each segment's last step
    sums: np.ndarray  # float64: sum of the step scores
    lengths: np.ndarray  # int64: number of steps
    ended: np.ndarray  # bool: the segment's last step is done (the episode is complete)
    levels: np.ndarray  # level index of each segment
    first: np.ndarray  # [N] the segment that opens each column
    last: np.ndarray  # [N] the segment that closes each column


def feedback_columns(feedback: LevelFeedback) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """`(seeds [T, N] int64, dones [T, N] bool, actor ids [N])` of `feedback`, checked; actor ids default
    to 0..N-1."""
    if not isinstance(feedback, LevelFeedback):
        raise ValueError(f"feedback must be a contracts.levels.LevelFeedback, got {type(feedback).__name__}")
    seeds = as_int_array("seeds", feedback.seeds, 2)
    T, N = seeds.shape
    if T == 0 or N == 0:
        raise ValueError(f"seeds must have shape [T, N] with T, N >= 1, got {seeds.shape}")
    try:
        d = np.asarray(feedback.dones)
    except Exception as exc:
        raise ValueError(f"dones must be a boolean array of shape [T={T}, N={N}]: {exc}") from exc
    if d.shape != (T, N):
        raise ValueError(f"dones must have shape [T={T}, N={N}] like seeds, got {d.shape}")
    if d.dtype != bool:
        if d.dtype.kind not in "iuf" or not np.isin(d, (0, 1)).all():
            raise ValueError("dones must be booleans (or 0/1 numbers)")
        d = d.astype(bool)
    if feedback.actor_ids is None:
        return seeds, d, list(range(N))
    ids = as_int_array("actor_ids", feedback.actor_ids, 1)
    if ids.size != N:
        raise ValueError(f"actor_ids must have shape [N={N}], got {ids.shape}")
    if np.unique(ids).size != N:
        raise ValueError("actor_ids must be distinct")
    return seeds, d, ids.tolist()


def check_constant_levels(levels: np.ndarray, dones: np.ndarray) -> None:
    """ValueError unless each column's level `[T, N]` changes only after a done."""
    if levels.shape[0] > 1:
        broken = (levels[1:] != levels[:-1]) & ~dones[:-1]
        if broken.any():
            t, n = np.argwhere(broken)[0]
            raise ValueError(
                f"seeds must be constant within an episode: seeds[{t + 1}, {n}] != seeds[{t}, {n}] "
                f"but dones[{t}, {n}] is False"
            )


def segment(step: np.ndarray, dones: np.ndarray, levels: np.ndarray) -> Segments:
    """The segments of step scores `step [T, N]` cut after every done of `dones [T, N]`."""
    T, N = step.shape
    s_flat = np.ascontiguousarray(step.T).ravel()
    d_cm = np.ascontiguousarray(dones.T)
    start = np.empty((N, T), dtype=bool)
    start[:, 0] = True
    start[:, 1:] = d_cm[:, :-1]
    starts = np.flatnonzero(start)
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[-1] = N * T
    return Segments(
        starts=starts,
        ends=ends,
        sums=np.add.reduceat(s_flat, starts),
        lengths=ends - starts,
        ended=d_cm.ravel()[ends - 1],
        levels=np.ascontiguousarray(levels.T).ravel()[starts],
        first=np.flatnonzero(starts % T == 0),  # one per column, in column order
        last=np.flatnonzero(ends % T == 0),
    )


Pending = dict[int, tuple[int, float, int]]  # actor id -> (level, score sum, steps) of its unfinished episode


def merge_pending(pending: Pending, seg: Segments, ids: list[int]) -> int:
    """Add each column's pending fragment to its first segment when the level matches (in place on `seg`);
    returns how many fragments are dropped because the column's level changed (an actor restarted
    mid-episode). `pending` is read, not changed."""
    if not pending:
        return 0
    N = len(ids)
    p_lvl = np.full(N, -1, dtype=np.int64)
    p_sum = np.zeros(N)
    p_steps = np.zeros(N, dtype=np.int64)
    for n, a in enumerate(ids):
        p = pending.get(a)
        if p is not None:
            p_lvl[n], p_sum[n], p_steps[n] = p
    has = p_lvl >= 0
    match = has & (p_lvl == seg.levels[seg.first])
    seg.sums[seg.first[match]] += p_sum[match]
    seg.lengths[seg.first[match]] += p_steps[match]
    return int((has & ~match).sum())


def open_tails(seg: Segments, ids: list[int]) -> Pending:
    """The unfinished last segment of each column, keyed by its actor id: the next call's pending fragments."""
    open_tail = ~seg.ended[seg.last]
    return {
        ids[n]: (int(seg.levels[k]), float(seg.sums[k]), int(seg.lengths[k]))
        for n, k in enumerate(seg.last.tolist())
        if open_tail[n]
    }


def chronological_ends(seg: Segments, T: int) -> np.ndarray:
    """The indices of the complete episodes of `seg`, in the order they ended: end step, then column."""
    com = np.flatnonzero(seg.ended)
    return com[np.lexsort(((seg.starts[com] // T), (seg.ends[com] - 1) % T))]
