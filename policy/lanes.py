"""Where an LSTM's fused calls run over an unroll with episodes starting inside it: the unroll's episode fragments
laid side by side as lanes, so that no call has a reset inside it.

A fused LSTM call (oneDNN's on a CPU, cuDNN's on a GPU) runs a batch of sequences from their initial states and
cannot zero one sequence's state in the middle. An unroll `[T, B]` has episodes starting at random steps in each
env, so cutting it at every step where some env starts an episode (one call per stretch between them) makes ~70
calls of ~4 steps at DCD's maze batch (T = 256, B = 32), each paying for its setup and its own weight gradients,
which autograd then adds up: in bf16 that was 40% of the core's time (benchmarks/RESULTS.md, "The learner at
compiled speed (issue 57, third part)").

Instead each env's unroll is cut into its fragments (from step 0 or an episode's first step, to the step before
the next first step or the unroll's end), and every fragment becomes a lane that starts at lane time 0 from its
own initial state: the state the unroll carries for a fragment at step 0, zeros for one an episode starts. Lanes
are ordered longest first, so the lanes still running at lane time τ are a prefix, and the lane times are cut
into chunks, each one fused call over the lanes still running at its start; a lane that ends inside a chunk
runs on over zero inputs to the chunk's end, outputs never read. Where the chunks are cut (`plan_lanes`) trades
those padded steps against a call's setup, with every lane end whose cell state is wanted on a cut.

Rows are flat: the unroll's `(t, b)` is row `t * B + b` (`[T, B, ...]` flattened); the computed rows are the
chunks' outputs concatenated, each chunk's `[length, lanes]` time-major.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

# A fused call's setup (its allocations, zeroed weight gradients and their sum into the other calls') counted in
# lane steps (one sample's forward and backward through the core): the best of 32, 64 and 128 on this project's CPU
# at LSTM-256 (benchmarks/RESULTS.md, "The learner at compiled speed (issue 57, third part)").
CALL_COST_IN_LANE_STEPS = 64
# The longest call: oneDNN's fp32 LSTM ran 256 steps 1.2x slower than two calls of 128 here (its workspace
# outgrowing the caches); bf16's ran the same.
MAX_CALL_LENGTH = 128


@dataclass(frozen=True)
class LanePlan:
    """How an unroll `[T, B]` runs as lanes (see the module doc). Index arrays are int64.

    `gather [S]`: for each computed row, the unroll row it reads, or `T * B` (a zero row) for a lane's padding.
    `scatter [T * B]`: each unroll row's computed row. `initial [F]`: each lane's initial state, a row of the
    unroll's state `[B]` or `B` (zeros). `chunks`: `(length, lanes)` of each fused call, in order.
    `cell_rows [M]`: the unroll rows whose cell state is kept, and `cell_sources [M]` the row of the chunks' final
    cell states (concatenated, `[sum of lanes]`) that holds it."""

    T: int
    B: int
    gather: np.ndarray
    scatter: np.ndarray
    initial: np.ndarray
    chunks: tuple[tuple[int, int], ...]
    cell_rows: np.ndarray
    cell_sources: np.ndarray


def plan_lanes(starts: np.ndarray, cells: np.ndarray | None = None,
               call_cost: float = CALL_COST_IN_LANE_STEPS) -> LanePlan:
    """The lanes of an unroll whose episodes start where `starts [T, B]` is set (step 0's start is already in the
    state the unroll is given), keeping the cell state after step t of env b where `cells [T, B]` is set: each
    such step must end its fragment (t = T - 1, or an episode starts at t + 1)."""
    starts = np.asarray(starts, dtype=bool)
    T, B = starts.shape
    first = starts.T.copy()  # [B, T]: where each env's fragments begin, env-major
    first[:, 0] = True
    fragment = np.cumsum(first.ravel()) - 1  # [B * T]: the fragment of each (b, t), env-major
    lengths = np.bincount(fragment)
    begins = np.flatnonzero(first.ravel())  # [F]: each fragment's first (b, t), env-major
    order = np.argsort(-lengths, kind="stable")  # lane i is fragment order[i]
    lane_of = np.empty_like(order)
    lane_of[order] = np.arange(len(order))
    lane_lengths = lengths[order]

    wanted = np.zeros((B, T), dtype=bool) if cells is None else np.asarray(cells, dtype=bool).T
    ends = np.ones((B, T), dtype=bool)
    ends[:, :-1] = first[:, 1:]
    if (wanted & ~ends).any():
        b, t = np.argwhere(wanted & ~ends)[0]
        raise ValueError(f"the cell state is kept only where a fragment ends, not at step {t} of env {b}: "
                         f"no episode starts at step {t + 1}")
    forced = lengths[fragment[wanted.ravel()]]
    cuts = _cuts(lane_lengths, forced, call_cost)

    tau = np.arange(B * T) - begins[fragment]  # each (b, t)'s lane time
    lane = lane_of[fragment]
    chunk = np.searchsorted(cuts, tau, side="right") - 1
    lanes = np.array([int((lane_lengths > cut).sum()) for cut in cuts[:-1]])
    offsets = np.concatenate([[0], np.cumsum(np.diff(cuts) * lanes)])
    computed = offsets[chunk] + (tau - cuts[chunk]) * lanes[chunk] + lane  # env-major
    rows = (np.arange(B * T) % T) * B + np.arange(B * T) // T  # env-major (b, t) -> row t * B + b
    scatter = np.empty(T * B, dtype=np.int64)
    scatter[rows] = computed
    gather = np.full(int(offsets[-1]), T * B, dtype=np.int64)
    gather[computed] = rows

    initial = np.where(begins % T == 0, begins // T, B)[order]
    final_offsets = np.concatenate([[0], np.cumsum(lanes)])
    kept = np.flatnonzero(wanted.ravel())  # env-major
    kept_chunk = np.searchsorted(cuts, lengths[fragment[kept]]) - 1  # the chunk whose end is the lane's end
    return LanePlan(T, B, gather, scatter, initial.astype(np.int64),
                    tuple((int(n), int(k)) for n, k in zip(np.diff(cuts), lanes, strict=True)),
                    rows[kept].astype(np.int64), (final_offsets[kept_chunk] + lane[kept]).astype(np.int64))


def _cuts(lane_lengths: np.ndarray, forced: np.ndarray, call_cost: float) -> np.ndarray:
    """`[0, ..., max length]`: the lane times where chunks begin and the last one ends, the cheapest cut by dynamic
    programming over the lanes' distinct lengths, a chunk `[a, b)` costing `(b - a) * lanes running at a +
    call_cost` lane steps, with a cut at each of `forced` (lane lengths), then chunks longer than
    `MAX_CALL_LENGTH` cut into calls of that length."""
    ends = np.unique(lane_lengths)  # ascending
    points = np.concatenate([[0], ends])  # candidate cuts
    running = (lane_lengths[None, :] > points[:, None]).sum(axis=1)  # lanes running at each candidate
    must = np.isin(points, forced)
    best = np.zeros(len(points))
    previous = np.zeros(len(points), dtype=np.int64)
    lowest = 0
    for j in range(1, len(points)):
        a = np.arange(lowest, j)
        costs = best[a] + (points[j] - points[a]) * running[a] + call_cost
        k = int(np.argmin(costs))
        best[j], previous[j] = costs[k], a[k]
        if must[j]:
            lowest = j
    chosen = [len(points) - 1]
    while chosen[-1]:
        chosen.append(int(previous[chosen[-1]]))
    cuts = points[chosen[::-1]]
    return np.unique(np.concatenate([cuts, *(np.arange(a, b, MAX_CALL_LENGTH) for a, b in itertools.pairwise(cuts))]))
