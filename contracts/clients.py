"""What the learner asks of the replay service, as a typed protocol.

The learner is written against it, never against a transport: in process it is handed the service's core
(`ReplayServiceCore`), on Ray an adapter over the actor handle (`learner.service.RemoteReplay`). The calls keep
the one-way data flow: the learner tells the service what it learned; the service never calls back. The learner
has no level client: the actors tell the level service their episodes' results themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from levelray.contracts.trajectory import Unroll


@runtime_checkable
class ReplayClient(Protocol):
    def sample(self, batch_size: int, beta: float) -> dict[str, Any] | None:
        """`{"items": [Unroll], "ids": [n], "weights": [n]}`, or None when nothing can be sampled now."""

    def insert(self, items: Sequence[Unroll], priorities: np.ndarray | None = None) -> Any:
        """Add unrolls with their priorities `[n]`."""

    def update_priorities(self, ids: np.ndarray, priorities: np.ndarray) -> Any:
        """New priorities `[n]` for sampled ids (stale ids are ignored by the service)."""
