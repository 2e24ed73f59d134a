"""Replay service: ``ReplayServiceCore`` (plain class, usable inline) and ``ReplayService`` (Ray actor).

Behaviour
---------
* ``sample`` returns ``None`` when the buffer is not ready: empty, below ``min_size``, refused by the
  rate limiter (``samples_per_insert``), or fewer remaining uses than ``batch_size`` under
  ``max_use``. Bad arguments raise ``ValueError`` in the caller; the actor stays alive.
* ``insert`` raises ``RateLimitedError`` (a ValueError) when the rate limiter refuses it: the caller
  should back off and retry (``can_insert(n)`` tells beforehand). Nothing is inserted then.
* Rate limiting (``samples_per_insert`` not None) is Reverb's ``SampleToInsertRatio`` with
  ``min_size_to_sample = min_size`` and ``error_buffer`` (default
  ``max(1, samples_per_insert) * max(min_size, 1024)``, so batches up to ~1000 never deadlock).
  Without ``samples_per_insert`` only ``min_size`` gates sampling.
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
import ray

from levelray.contracts import snapshot as snap
from levelray.replay_service.core import PrioritizedReplay
from levelray.replay_service.rate_limiter import NotReadyError, RateLimiter

__all__ = ["ReplayServiceCore", "ReplayService"]

# Fixed bin edges of the priority histogram: 0, then decades and half-decades from 1e-3 to 1e3 (the last
# bin also holds everything above). Fixed so that a Prometheus series per bin stays the same series for the
# whole job; data-dependent edges made new series on every scrape.
PRIORITY_HIST_EDGES = np.concatenate([[0.0], np.logspace(-3, 3, 13)])


class ReplayServiceCore:
    """The replay service's logic, without Ray."""

    def __init__(
        self,
        capacity: int,
        *,
        alpha: float = 0.6,
        eps: float = 1e-6,
        max_use: int | None = None,
        min_size: int = 1,
        samples_per_insert: float | None = None,
        error_buffer: float | tuple[float, float] | None = None,
        seed: int | None = None,
        snapshot_path: str | None = None,
        snapshot_interval_s: float = 300.0,
        snapshot_max_item_bytes: int = 256 << 20,
        initial_state: dict | None = None,
    ) -> None:
        limiter = None
        if samples_per_insert is not None:
            if error_buffer is None:
                error_buffer = max(1.0, float(samples_per_insert)) * max(int(min_size), 1024)
            limiter = RateLimiter(samples_per_insert, min_size, error_buffer)
        elif error_buffer is not None:
            raise ValueError("error_buffer needs samples_per_insert")
        self._lock = threading.RLock()
        self._replay = PrioritizedReplay(
            capacity, alpha=alpha, eps=eps, max_use=max_use, min_size=min_size, rng=seed, rate_limiter=limiter
        )
        if float(snapshot_interval_s) <= 0:
            raise ValueError(f"snapshot_interval_s must be > 0, got {snapshot_interval_s!r}")
        self._snapshot_path = None if snapshot_path is None else str(snapshot_path)
        self._schedule = snap.SnapshotSchedule("replay service", snapshot_interval_s)
        self._snapshot_max_item_bytes = int(snapshot_max_item_bytes)
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
            # Keep this service's policy (min_size, rate-limiter config) but the snapshot's counters.
            restored._min_size = r.min_size
            if r.rate_limiter is not None:
                lim = r.rate_limiter
                if restored.rate_limiter is not None:
                    old = restored.rate_limiter
                    lim.inserts, lim.samples, lim.deletes = old.inserts, old.samples, old.deletes
                else:
                    lim.inserts, lim.deletes = restored.inserts, restored.inserts - len(restored)
                    lim.samples = restored.samples
            restored._limiter = r.rate_limiter
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

    def can_insert(self, n: int) -> bool:
        with self._lock:
            return self._replay.can_insert(n)

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
            lim = r.rate_limiter
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
                "rate_limiter": None if lim is None else lim.state_dict(),
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

    def ping(self) -> bool:
        return True


ReplayService = ray.remote(num_cpus=1)(ReplayServiceCore)
