"""Replay service: ``ReplayServiceCore``, the Ray-free core of the service (a ``*ServiceCore`` always is;
tests and the inline backend use it directly), and ``ReplayService``, the same class as a Ray actor.

Behaviour
---------
* ``sample`` returns ``None`` when the buffer is not ready: empty, below ``min_size``, or fewer
  remaining uses than ``batch_size`` under ``max_use``. Bad arguments raise ``ValueError`` in the
  caller; the actor stays alive.
* No rate limiter: the learner mixes a fixed fraction (``replay.replay_ratio``) of replayed unrolls into
  every batch, so the ratio of replayed to fresh unrolls is held by construction, however fast the actors
  run; ``min_size`` alone gates sampling.
* Snapshots: ``snapshot()`` writes the core's ``state_dict`` (items newest first up to
  ``snapshot_max_item_bytes``) plus the service counters atomically to ``snapshot_path``. A snapshot
  is also taken after any call once ``snapshot_interval_s`` has passed since the last one (no
  background thread: the actor is single-threaded). On construction an existing ``snapshot_path`` is
  restored; a corrupt/truncated file raises ``SnapshotError`` naming the path, a snapshot of another
  configuration (capacity, alpha, eps, max_use) raises ValueError.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

from levelray.contracts import snapshot as snap
from levelray.contracts.config import ReplayConfig
from levelray.replay_service.prioritized import NotReadyError, PrioritizedReplay

__all__ = ["ReplayServiceCore", "ReplayService"]

# Fixed bin edges of the priority histogram: 0, then decades and half-decades from 1e-3 to 1e3 (the last
# bin also holds everything above). Fixed so that a Prometheus series per bin stays the same series for the
# whole job.
PRIORITY_HIST_EDGES = np.concatenate([[0.0], np.logspace(-3, 3, 13)])


class ReplayServiceCore:
    """The replay service's logic, without Ray: a `PrioritizedReplay` configured by the `replay` section.

    The section's buffer fields (`capacity`, `alpha`, `max_use`, `min_size`) and snapshot fields
    (`snapshot_interval_s`, `snapshot_max_item_bytes`) are read here; `replay_ratio`, `beta`,
    `beta_anneal_updates` and `eta` are the learner's. `eps` is the priority offset of `PrioritizedReplay`
    (no config field); `seed` seeds its sampling.
    """

    def __init__(
        self,
        config: ReplayConfig,
        *,
        seed: int | None = None,
        eps: float = 1e-6,
        snapshot_path: str | None = None,
        initial_state: dict | None = None,
    ) -> None:
        if not isinstance(config, ReplayConfig):
            raise ValueError(f"config must be a contracts.config.ReplayConfig, got {type(config).__name__}")
        self._lock = threading.RLock()
        self._replay = PrioritizedReplay(
            config.capacity, alpha=config.alpha, eps=eps, max_use=config.max_use, min_size=config.min_size, rng=seed
        )
        if float(config.snapshot_interval_s) <= 0:
            raise ValueError(f"snapshot_interval_s must be > 0, got {config.snapshot_interval_s!r}")
        self._snapshot_path = None if snapshot_path is None else str(snapshot_path)
        self._schedule = snap.SnapshotSchedule("replay service", config.snapshot_interval_s)
        self._snapshot_max_item_bytes = int(config.snapshot_max_item_bytes)
        self._sample_calls = 0
        self._not_ready = 0
        self._snapshots = 0
        self._restored_from: str | None = None
        if self._snapshot_path is not None and Path(self._snapshot_path).exists():
            self._restore(self._snapshot_path)
        elif initial_state is not None:  # e.g. the replay state of a checkpoint being resumed
            self.load_state_dict(initial_state, source="initial_state")
        self._schedule.written()  # the first periodic snapshot is one interval after the start

    def _restore(self, path: str) -> None:
        state = snap.load(path)  # SnapshotError (a ValueError) names the path for bad files
        self.load_state_dict(state, source=f"snapshot {path}")
        self._restored_from = path

    def state_dict(self) -> dict[str, Any]:
        """What a snapshot holds (items up to `snapshot_max_item_bytes`); also used by checkpoints."""
        with self._lock:
            return {
                "replay": self._replay.state_dict(include_items=True, max_item_bytes=self._snapshot_max_item_bytes),
                "service": {"sample_calls": self._sample_calls, "not_ready": self._not_ready},
            }

    def load_state_dict(self, state: dict[str, Any], *, source: str = "state") -> None:
        """Replace the buffer with `state` (from `state_dict` or a snapshot); on any error the
        service keeps its current state."""
        if not isinstance(state, dict) or "replay" not in state:
            raise snap.SnapshotError(f"{source} is not a replay service snapshot")
        with self._lock:
            r = self._replay
            try:
                restored = PrioritizedReplay.from_state_dict(state["replay"])
            except ValueError as exc:
                raise snap.SnapshotError(f"{source} holds a malformed replay state: {exc}") from exc
            for key in ("capacity", "alpha", "eps", "max_use"):
                if getattr(restored, key) != getattr(r, key):
                    raise ValueError(
                        f"{source} was taken with {key}={getattr(restored, key)!r}, "
                        f"the service is configured with {key}={getattr(r, key)!r}"
                    )
            # Keep this service's min_size but the snapshot's counters.
            restored._min_size = r.min_size
            self._replay = restored
            svc = state.get("service", {})
            self._sample_calls = int(svc.get("sample_calls", 0))
            self._not_ready = int(svc.get("not_ready", 0))

    # ------------------------------------------------------------------ API
    def insert(self, items, priorities=None) -> np.ndarray:
        with self._lock:
            ids = self._replay.insert(items, priorities)
            self._maybe_snapshot()
            return ids

    def sample(self, batch_size: int, beta: float) -> dict[str, Any] | None:
        with self._lock:
            self._sample_calls += 1
            try:
                s = self._replay.sample(batch_size, beta)
            except NotReadyError:
                self._not_ready += 1
                return None
            self._maybe_snapshot()
            return {"ids": s.ids, "items": s.items, "weights": s.weights, "probabilities": s.probabilities}

    def update_priorities(self, ids, priorities) -> None:
        with self._lock:
            self._replay.update_priorities(ids, priorities)
            self._maybe_snapshot()

    def can_sample(self, batch_size: int) -> bool:
        with self._lock:
            return self._replay.can_sample(batch_size)

    def __len__(self) -> int:
        return len(self._replay)

    def size(self) -> int:
        return len(self._replay)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            r = self._replay
            raw = r.raw_priorities()
            uses = r.use_counts()
            edges = PRIORITY_HIST_EDGES
            counts, _ = np.histogram(np.clip(raw, 0.0, edges[-1]), bins=edges)
            return {
                "size": len(r),
                "capacity": r.capacity,
                "inserts": r.inserts,
                "samples": r.samples,
                "updates": r.updates,
                "updates_ignored": r.updates_ignored,
                "evicted": r.evicted,
                "removed_max_use": r.removed_max_use,
                "sample_calls": self._sample_calls,
                "not_ready": self._not_ready,
                "priority_hist": {"edges": edges.tolist(), "counts": counts.astype(int).tolist()},
                "mean_uses": float(uses.mean()) if uses.size else 0.0,
                "max_priority": r.max_priority,
                "snapshots": self._snapshots,
                "snapshot_errors": self._schedule.errors,
                "last_snapshot_error": self._schedule.last_error,
                "restored_from": self._restored_from,
            }

    def snapshot(self, path: str | None = None) -> str:
        """Write a snapshot (to ``path`` or the configured ``snapshot_path``); returns the path."""
        with self._lock:
            path = path if path is not None else self._snapshot_path
            if path is None:
                raise ValueError("no snapshot path: pass one or configure snapshot_path")
            snap.save(path, self.state_dict())
            self._snapshots += 1
            self._schedule.written()
            return str(path)

    def _maybe_snapshot(self) -> None:
        self._schedule.run_if_due(self._snapshot_path, self.snapshot)


try:  # Ray is optional: the Ray-free (inline) backend imports only ReplayServiceCore.
    import ray
except ImportError:  # pragma: no cover - exercised only where Ray is not installed
    ray = None

ReplayService = ray.remote(num_cpus=1)(ReplayServiceCore) if ray is not None else None
