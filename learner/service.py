"""The learner on Ray: a bounded inbound queue of unrolls, a training thread, weights by version.

`LearnerService` is a plain thread-safe class; `LearnerActor` is its Ray shell (a threaded actor, so
`submit_batch` calls from many env actors block on the queue while the training thread drains it).

- `submit_batch(unrolls)` validates each unroll (a malformed one is rejected with the field named
  and counted; nothing else changes), then waits for room in the queue: a slow learner makes actors
  wait (backpressure) and memory stays bounded. It returns a receipt `(version, [weights_ref])`.
- the training thread takes `batch_size - replayed` fresh unrolls, drops those older than
  `max_policy_lag` versions (counted by reason), mixes in replayed ones, updates, and publishes the
  new weights once with `ray.put` (one object per version, shared by every actor).
- after each update it sends the level service the batch's PLR inputs (one call per update,
  fire-and-forget) and, with replay on, the replay service its inserts and new priorities.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import traceback
from collections import Counter, deque

import numpy as np
from levelray.contracts.config import from_dict
from levelray.contracts.spec import EnvSpec
from levelray.contracts.trajectory import TrajectoryError, validate_unroll
from levelray.deploy.components import level_seeds
from levelray.learner.learner import Learner
from levelray.learner.level_feedback import level_update_calls
from levelray.learner.replay_mixer import ReplayMixer

log = logging.getLogger(__name__)

LAG_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)


class _RemoteReplay:
    """ReplayServiceCore's interface over the Ray actor (sample waits; writes do not).

    While the replay service restarts (it comes back from its snapshot), `sample` returns None and
    the learner trains on fresh unrolls only; the failures are counted."""

    def __init__(self, handle):
        import ray

        self._ray, self.handle = ray, handle
        self.failures = 0

    def sample(self, batch_size, beta):
        try:
            return self._ray.get(self.handle.sample.remote(batch_size, beta), timeout=60)
        except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError,
                self._ray.exceptions.ActorUnavailableError) as exc:
            self.failures += 1
            log.warning("replay service unavailable (%s); training on fresh unrolls only", type(exc).__name__)
            return None

    def insert(self, items, priorities=None):
        self.handle.insert.remote(items, priorities)

    def update_priorities(self, ids, priorities):
        self.handle.update_priorities.remote(ids, priorities)


class LearnerService:
    def __init__(self, cfg_dict: dict, spec_dict: dict, level_service=None, replay_service=None,
                 resume_state: dict | None = None):
        import ray
        import torch

        self._ray = ray
        self.cfg = from_dict(cfg_dict)
        self.spec = EnvSpec.from_dict(spec_dict)
        torch.set_num_threads(max(1, min(torch.get_num_threads(), 4)))
        self.learner = Learner(self.spec, self.cfg.learner, seed=self.cfg.seed)
        self.level_service = level_service
        replay = _RemoteReplay(replay_service) if replay_service is not None else None
        self.mixer = ReplayMixer(self.cfg.replay, self.cfg.learner.batch_size, replay)
        seeds = level_seeds(self.cfg.env)
        self.level_range = (int(seeds[0]), int(seeds[-1]) + 1) if seeds is not None else None
        self.queue: queue.Queue = queue.Queue(maxsize=self.cfg.learner.queue_size)
        self.lock = threading.Lock()  # counters and the published weights
        self.update_lock = threading.Lock()  # the model and optimiser, held for a whole update
        self.env_steps = 0
        self.episodes = 0
        self.unrolls_received = 0
        self.dropped: Counter[str] = Counter()
        self.returns: list[float] = []
        self.lag_counts = np.zeros(len(LAG_BUCKETS) + 1, dtype=np.int64)
        self.lag_sum = 0.0
        self.lag_window: list[float] = []
        self.rate_points: deque[tuple[float, int]] = deque(maxlen=4096)  # (time, env_steps) per unroll
        self.last_metrics: dict[str, float] = {}
        self.error: str | None = None
        self._level_refs: list = []
        self.level_update_errors = 0
        if resume_state is not None:
            self.learner.load_state_dict(resume_state["learner"])
            counters = resume_state.get("counters", {})
            self.env_steps = int(counters.get("env_steps", 0))
            self.episodes = int(counters.get("episodes", 0))
        self._publish()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._train_loop, name="learner", daemon=True)
        self._thread.start()

    # -- called by env actors ------------------------------------------------------------------
    def submit_batch(self, unrolls: list[dict]):
        """Several unrolls in one call: an actor that sends n at a time pays Ray's per-call cost
        (task dispatch, reply, receipt) once for n. Each one is validated on its own; a malformed
        one is dropped and counted without affecting the others."""
        with self.lock:
            version = self.learner.version
        if not isinstance(unrolls, (list, tuple)):
            unrolls = [unrolls]
        for unroll in unrolls:
            try:
                validate_unroll(unroll, self.spec, unroll_length=self.cfg.actors.unroll_length,
                                level_range=self.level_range, current_version=version)
            except TrajectoryError as exc:
                with self.lock:
                    self.dropped["malformed"] += 1
                log.warning("rejected unroll from actor %s: %s", unroll.get("actor_id") if isinstance(unroll, dict)
                            else "?", exc)
                continue
            while not self._stop.is_set():
                try:
                    self.queue.put(unroll, timeout=0.5)
                    break
                except queue.Full:
                    continue
        return self.latest_weights()

    def latest_weights(self):
        with self.lock:
            return self.version_published, [self.weights_ref]

    # -- training ------------------------------------------------------------------------------
    def _publish(self) -> None:
        version, weights = self.learner.get_weights()
        ref = self._ray.put(weights)
        with self.lock:
            self.version_published, self.weights_ref = version, ref

    def _take_fresh(self, n: int) -> list[dict] | None:
        fresh = []
        while len(fresh) < n:
            try:
                unroll = self.queue.get(timeout=0.2)
            except queue.Empty:
                if self._stop.is_set():
                    return None
                continue
            self._account(unroll)
            lag = self.learner.version - int(unroll["policy_version"])
            if lag > self.cfg.learner.max_policy_lag:
                with self.lock:
                    self.dropped["policy_lag"] += 1
                continue
            fresh.append(unroll)
        return fresh

    def _account(self, unroll: dict) -> None:
        lag = self.learner.version - int(unroll["policy_version"])
        with self.lock:
            self.unrolls_received += 1
            self.env_steps += int(unroll["rewards"].size)
            self.rate_points.append((time.time(), self.env_steps))
            rets = unroll.get("episode_returns")
            if rets is not None and len(rets):
                self.episodes += len(rets)
                self.returns.extend(float(r) for r in rets)
                del self.returns[:-100]
            self.lag_counts[np.searchsorted(LAG_BUCKETS, lag)] += 1
            self.lag_sum += lag
            self.lag_window.append(lag)
            del self.lag_window[:-200]

    def _train_loop(self) -> None:
        try:
            while not self._stop.is_set():
                fresh = self._take_fresh(self.mixer.num_fresh)
                if fresh is None:
                    return
                batch, book = self.mixer.build_batch(fresh)
                with self.update_lock:
                    metrics = self.learner.update(batch)
                    outputs = self.learner.last_outputs
                    self._publish()
                self.mixer.after_update(book, outputs["abs_td"])
                if self.level_service is not None:
                    self._check_level_updates()
                    for call in level_update_calls(self.cfg.levels.strategy, batch, outputs, book["widths"],
                                                   len(book["fresh"])):
                        self._level_refs.append(self.level_service.update_with_rollouts.remote(**call))
                with self.lock:
                    self.last_metrics = metrics
        except Exception:  # surfaced through stats() so the driver can stop with the cause
            self.error = traceback.format_exc()
            log.error("learner thread failed:\n%s", self.error)

    def _check_level_updates(self) -> None:
        """Level updates are not waited for, but their failures are counted and logged."""
        if not self._level_refs:
            return
        done, self._level_refs = self._ray.wait(self._level_refs, num_returns=len(self._level_refs), timeout=0)
        for ref in done:
            try:
                self._ray.get(ref)
            except self._ray.exceptions.RayError as exc:
                with self.lock:
                    self.level_update_errors += 1
                log.warning("level service refused a score update: %s", str(exc).splitlines()[-1][:300])

    # -- driver side ---------------------------------------------------------------------------
    def _steps_per_second(self, window_s: float = 10.0) -> float:
        now = time.time()
        recent = [(t, s) for t, s in self.rate_points if now - t <= window_s]
        if len(recent) < 2 or recent[-1][0] <= recent[0][0]:
            return 0.0
        return (recent[-1][1] - recent[0][1]) / (now - recent[0][0])

    def stats(self) -> dict:
        with self.lock:
            return {
                "env_steps_per_second": self._steps_per_second(),
                "learner_version": self.learner.version,
                "env_steps": self.env_steps,
                "episodes": self.episodes,
                "unrolls_received": self.unrolls_received,
                "samples_trained": self.learner.samples_trained,
                "episode_return_mean": float(np.mean(self.returns)) if self.returns else None,
                "episode_returns_window": len(self.returns),
                "policy_lag_mean": float(np.mean(self.lag_window)) if self.lag_window else 0.0,
                "policy_lag_buckets": list(LAG_BUCKETS),
                "policy_lag_counts": self.lag_counts.tolist(),
                "policy_lag_sum": self.lag_sum,
                "queue_depth": self.queue.qsize(),
                "dropped": dict(self.dropped),
                "metrics": dict(self.last_metrics),
                "device": str(self.learner.device),
                "node": self._ray.get_runtime_context().get_node_id(),
                "replay_beta": self.mixer.beta(),
                "level_update_errors": self.level_update_errors,
                "replay_failures": self.mixer.replay.failures if self.mixer.replay is not None else 0,
                "error": self.error,
                "time": time.time(),
            }

    def state(self) -> dict:
        """Learner state and counters for a checkpoint (taken between updates)."""
        with self.update_lock:
            learner_state = self.learner.state_dict()
        with self.lock:
            counters = {"env_steps": self.env_steps, "episodes": self.episodes}
        return {"learner": learner_state, "counters": counters}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


LEARNER_NAME = "levelray-learner"


def learner_actor_class(num_gpus: float):
    """The Ray shell, asking for a GPU when the cluster has one. Not restarted by Ray: Ray would
    re-run the constructor with the job's original arguments, not the latest checkpoint; the driver
    restarts it from the checkpoint instead (`RayJob.restart_learner`)."""
    import ray

    # No task events: actors call submit_batch() hundreds of times a second, and the GCS would keep a
    # record of every call (measured: +45 MB in a minute of CartPole).
    # MALLOC_ARENA_MAX: the submit threads deserialise unrolls of several MB each; glibc gives every
    # thread its own arena, and freed blocks stranded in many arenas made the learner's RSS creep
    # (+14% over 24 min of procgen in benchmarks/soak.py).
    return ray.remote(num_cpus=1, num_gpus=num_gpus, max_concurrency=256, max_restarts=0,
                      enable_task_events=False,
                      runtime_env={"env_vars": {"MALLOC_ARENA_MAX": "2"}})(LearnerService)
