"""One learner batch: the stacked arrays and which of their columns came from which unroll.

A batch is `U` unrolls stacked side by side along the column axis (`contracts.trajectory.stack_unrolls`):
the fresh ones first, in arrival order, then the replayed ones. Unroll `i` owns columns
`bounds[i]:bounds[i + 1]`; the bounds are computed here once and read by everything that maps per-column
outputs back to unrolls (replay priorities, the values stored with them for a loss that samples replay, level
feedback).

An unroll from the inline backend's fast path (`actors.device_policy`) holds its observations, behaviour parameters
and core state as tensors on the learner's device: they are joined there (`concatenate`), with any host array of the
same field (a replayed unroll's) copied over, so the batch is never brought back to the host. `on_host` is the same
unroll with NumPy arrays, for the replay service, which keeps host memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from levelray.contracts.trajectory import Unroll, stack_unrolls


def concatenate(parts: Sequence[np.ndarray | torch.Tensor], axis: int = 0) -> np.ndarray | torch.Tensor:
    """`np.concatenate`, or, where any part is a tensor, `torch.cat` on that tensor's device."""
    tensor = next((p for p in parts if isinstance(p, torch.Tensor)), None)
    if tensor is None:
        return np.concatenate(parts, axis=axis)
    return torch.cat([torch.as_tensor(p).to(tensor.device) for p in parts], dim=axis)


def on_host(unroll: Unroll) -> Unroll:
    """`unroll` with every tensor field as a NumPy array (copied from its device)."""
    return {key: value.cpu().numpy() if isinstance(value, torch.Tensor) else value  # type: ignore[misc]
            for key, value in unroll.items()}


@dataclass(frozen=True)
class Batch:
    """`arrays`: the stacked `Unroll` fields, time-major (`obs [T+1, B, ...]`, `rewards [T, B]`, ...), plus
    `sample_weights [B]` (each column's replay importance weight, 1 for fresh columns): what
    `Learner.update` takes. `fresh`: the fresh unrolls as they arrived (they go into replay after the
    update). `replay_ids [R]` / `replay_weights [R]`: the replayed unrolls' ids and importance weights,
    in batch order after the fresh ones. `bounds [U + 1]`: column bounds, `U = len(fresh) + R`."""

    arrays: dict[str, Any]
    fresh: list[Unroll]
    replay_ids: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    replay_weights: np.ndarray = field(default_factory=lambda: np.empty(0))
    bounds: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))

    @classmethod
    def stack(cls, fresh: Sequence[Unroll], replayed: Sequence[Unroll] = (), replay_ids: np.ndarray | None = None,
              replay_weights: np.ndarray | None = None) -> Batch:
        """Fresh unrolls, then replayed ones with their replay ids and importance weights `[R]`."""
        unrolls = [*fresh, *replayed]
        ids = np.empty(0, dtype=np.int64) if replay_ids is None else np.asarray(replay_ids)
        weights = np.empty(0) if replay_weights is None else np.asarray(replay_weights)
        widths = [u["obs"].shape[1] for u in unrolls]
        arrays = stack_unrolls(unrolls, concatenate)
        per_unroll_weight = np.concatenate([np.ones(len(fresh)), weights]).astype(np.float32)
        arrays["sample_weights"] = np.repeat(per_unroll_weight, widths)
        return cls(arrays, list(fresh), ids, weights, np.cumsum([0, *widths]))

    @property
    def num_fresh(self) -> int:
        return len(self.fresh)

    def columns(self, i: int) -> slice:
        """The columns of unroll `i` (batch order: fresh first)."""
        return slice(int(self.bounds[i]), int(self.bounds[i + 1]))

    def unroll_columns(self) -> Iterator[slice]:
        """The columns of every unroll, in batch order."""
        return (self.columns(i) for i in range(len(self.bounds) - 1))
