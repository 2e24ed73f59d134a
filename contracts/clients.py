"""What the learner asks of the level and replay services, as typed protocols.

The learner is written against these, never against a transport: in process it is handed the services'
cores (`LevelServiceCore`, `ReplayServiceCore`), on Ray an adapter over the actor handle
(`learner.service.RemoteLevels`, `RemoteReplay`). Both calls keep the one-way data flow: the learner
tells the services what it learned; the services never call back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from levelray.contracts.levels import LevelFeedback
from levelray.contracts.trajectory import Unroll


@runtime_checkable
class LevelClient(Protocol):
    def update_with_rollouts(self, feedback: LevelFeedback) -> None:
        """PLR inputs of one learner batch (see `LevelFeedback` and `LevelSampler.update_with_rollouts`)."""


@runtime_checkable
class ReplayClient(Protocol):
    def sample(self, batch_size: int, beta: float) -> dict[str, Any] | None:
        """`{"items": [Unroll], "ids": [n], "weights": [n]}`, or None when nothing can be sampled now."""

    def insert(self, items: Sequence[Unroll], priorities: np.ndarray | None = None) -> Any:
        """Add unrolls with their priorities `[n]`."""

    def update_priorities(self, ids: np.ndarray, priorities: np.ndarray) -> Any:
        """New priorities `[n]` for sampled ids (stale ids are ignored by the service)."""
