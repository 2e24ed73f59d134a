"""The learner's train step and its bookkeeping, written once for both transports.

`LearnerCore.train(fresh)` is everything one update does: mix replayed unrolls into the batch, sample the batch of
the auxiliary loss that trains on replay, if one does (both through `ReplayFeed`), take a V-trace (+ auxiliary)
gradient step and write the new priorities back to replay. The learner never talks to the level service: the actors
score their episodes and tell it (`actors.episode_scorer`). `accept(unroll)` counts what arrives (env steps,
episodes, policy lag) and drops an unroll too stale to learn from. The Ray learner actor (`learner.service`) wraps
it in a queue and a training thread; the inline backend calls it directly. Neither adds maths of its own.

The counters are one record (`contracts.counters.LearnerCounters`): `stats()`, a checkpoint and a resume read it
whole. Thread safety: counters and `stats()` are guarded by one lock, so a driver thread may read them while a
training thread updates. `train` itself must be called from one thread at a time.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from levelray.contracts.clients import ReplayClient
from levelray.contracts.config import RunConfig
from levelray.contracts.counters import (
    BY_REASON,
    MAX,
    TALLIES,
    LearnerCounters,
    budget_fraction,
    budget_reached,
    combine,
    read_counters,
    zero_counters,
)
from levelray.contracts.spec import EnvSpec
from levelray.contracts.status import LearnerCoreStats
from levelray.contracts.trajectory import StepTally, Unroll, validate_tally
from levelray.learner.auxiliary import run_losses
from levelray.learner.learner import Learner, NonFiniteUpdate
from levelray.learner.replay_feed import ReplayFeed

# Upper bounds of the policy-lag histogram (versions); the last bucket is open (+Inf).
LAG_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)
RETURN_WINDOW = 100  # episodes in the mean return, the progress line and stop-at-return


class TrainingDiverged(RuntimeError):
    """`max_nonfinite_updates` updates in a row had a NaN/Inf loss or gradient: the run stops."""


class LearnerCore:
    def __init__(
        self,
        cfg: RunConfig,
        spec: EnvSpec,
        *,
        replay: ReplayClient | None = None,
    ):
        self.cfg = cfg
        self.spec = spec
        # the built-in losses the config turns on, then those `learner.auxiliary_losses` names (in this process)
        self.learner = Learner(spec, cfg.learner, seed=cfg.seed, auxiliary=run_losses(cfg))
        sampling = next((aux for aux in self.learner.auxiliary if aux.sampler is not None), None)
        self.replay_feed = ReplayFeed(cfg.replay, cfg.learner.batch_size, replay, sampling=sampling)
        self.lock = threading.Lock()
        self.counters = zero_counters()  # its learner_version, samples_trained and replay_updates: see `_counters`
        self.job_env_steps: int | None = None  # several learners: every rank's env steps, as of the last update
        self.returns: deque[float] = deque(maxlen=RETURN_WINDOW)
        self.lengths: deque[int] = deque(maxlen=RETURN_WINDOW)
        self.lag_window: deque[float] = deque(maxlen=10 * RETURN_WINDOW)
        self.lag_counts = np.zeros(len(LAG_BUCKETS) + 1, dtype=np.int64)
        self.lag_sum = 0.0
        self.last_metrics: Mapping[str, float] = {}
        self.nonfinite_in_a_row = 0
        self.last_nonfinite: str | None = None

    @property
    def num_fresh(self) -> int:
        """Fresh unrolls per update (the rest of the batch is replayed)."""
        return self.replay_feed.num_fresh

    @property
    def version(self) -> int:
        return self.learner.version

    @property
    def budget_spent(self) -> bool:
        """The run's `total_steps` have been received, or its `total_trained_steps` trained on: from here the
        learner receives nothing more (an unroll or tally that arrives is refused, uncounted, and the actors are
        told to stop: `learner.service`, "The budget"), and a batch begun is trained as it stands, with fewer fresh
        unrolls, so that every unroll received is trained on (under `learner.compile` that one shape compiles once
        more). So the env steps go past `total_steps` by less than
        the one arrival that reached it, and the samples trained past `total_trained_steps` by less than a batch,
        whatever the env's speed and on both transports. With several learners, by the job's env steps as every
        rank last summed them (at an update; before the first, its own) and the samples trained, which every rank
        holds alike: the ranks decide alike, at an update, and a rank finishes a batch begun (a short batch on one
        rank would stall the others' all-reduce); where no update comes (a Robust PLR warm-up), the driver's poll
        of the summed counts ends the run."""
        steps = self.counters["env_steps"] if self.job_env_steps is None else self.job_env_steps
        return budget_reached(self.cfg, steps, self.learner.samples_trained)

    def learning_rate(self, env_steps: int) -> float:
        """`--lr-schedule linear`: IMPALA's (and PPO's MuJoCo) decay to 0 at the budget that ends the run, by the
        job's env steps received or the samples trained (`budget_fraction`), so a resumed run picks up where it
        was. On Pendulum it removed the late-run swings of the policy that a constant rate left in
        (benchmarks/RESULTS.md, "Continuous control preset")."""
        base = self.cfg.learner.learning_rate
        if self.cfg.learner.lr_schedule == "linear":
            return base * max(0.0, 1.0 - budget_fraction(self.cfg, env_steps, self.learner.samples_trained))
        return base

    def _job_env_steps(self) -> int:
        """The env steps of the whole job: this learner's, summed over the ranks when there are several (every
        rank then sets the same learning rate)."""
        data_parallel = self.learner.data_parallel
        env_steps = self.counters["env_steps"]
        if data_parallel is None:
            return env_steps
        self.job_env_steps = int(data_parallel.sum(torch.tensor([float(env_steps)]))[0])
        return self.job_env_steps

    # -- arrivals --------------------------------------------------------------------------------
    def accept(self, unroll: Unroll) -> bool:
        """Count an arrived unroll; False when it is older than `max_policy_lag` versions (dropped:
        V-trace's clipped importance weights make such data nearly worthless and it slows learning)."""
        lag = self.learner.version - int(unroll["policy_version"])
        with self.lock:
            counters = self.counters
            counters["unrolls_received"] += 1
            counters["env_steps"] += int(unroll["rewards"].size)
            counters["learner_samples_received"] += int(unroll["rewards"].size)
            returns = unroll.get("episode_returns")
            if returns is not None and len(returns):
                counters["episodes"] += len(returns)
                counters["episodes_replayed"] += _replayed_episodes(unroll)
                self.returns.extend(float(r) for r in returns)
                self.lengths.extend(int(n) for n in unroll.get("episode_lengths", ()))
            self.lag_counts[np.searchsorted(LAG_BUCKETS, lag)] += 1
            self.lag_sum += lag
            self.lag_window.append(float(lag))
            if lag > self.cfg.learner.max_policy_lag:
                self._count_dropped("policy_lag")
                return False
            mask = self._gradient_mask(unroll)
            counters["learner_samples_with_gradient"] += int(unroll["rewards"].size if mask is None
                                                             else np.count_nonzero(mask))
        return True

    def _gradient_mask(self, steps: Mapping[str, Any]) -> np.ndarray | None:
        """The steps of an unroll or batch (`[T, B]`) that carry gradient, as `Learner.update`'s `mask`: under Robust
        PLR (`levels.robust`) those on replayed levels, as new levels are played to be scored, never learned from;
        None where every step does."""
        return steps["level_replayed"] if self.cfg.levels.robust else None

    def accept_tally(self, tally: StepTally) -> None:
        """Count the env steps and finished episodes of unrolls an actor kept (a Robust PLR explore window's, which
        never reach the learner): they count toward `env_steps` and the episode returns, not toward
        `learner_samples_received`. TrajectoryError naming the field for a bad tally; nothing changes then."""
        validate_tally(tally)
        with self.lock:
            self.counters["env_steps"] += int(tally["env_steps"])
            self.counters["episodes"] += int(tally["episode_returns"].size)
            self.returns.extend(tally["episode_returns"].tolist())
            self.lengths.extend(tally["episode_lengths"].tolist())

    def count_malformed(self, reason: str = "malformed") -> None:
        with self.lock:
            self._count_dropped(reason)

    def _count_dropped(self, reason: str) -> None:
        dropped = self.counters["dropped"]
        dropped[reason] = dropped.get(reason, 0) + 1

    # -- the train step --------------------------------------------------------------------------
    def train(self, fresh: list[Unroll]) -> Mapping[str, float]:
        """One update on `fresh` (`num_fresh` unrolls) plus replayed ones; returns the loss metrics ({} for a
        skipped non-finite update: no priorities from it, they would be NaN too). The metrics stay on the
        learner's device until read (`results.Metrics`): `stats()` reads the last update's, at report time."""
        batch = self.replay_feed.batch(fresh)
        replayed = self.replay_feed.replayed(self.learner.version)
        lr = self.learning_rate(self._job_env_steps())
        self.learner.set_learning_rate(lr)
        arrays = batch.arrays
        mask = self._gradient_mask(arrays)
        if mask is not None:
            arrays = {**arrays, "mask": mask}
        try:
            result = self.learner.update(arrays, replayed)
        except NonFiniteUpdate as exc:
            self._count_nonfinite(str(exc))
            return {}
        self.nonfinite_in_a_row = 0
        extra = {"learning_rate": lr}
        sampling = self.replay_feed.sampling
        if sampling is not None and replayed is None:  # replay held too few unrolls for its batch yet
            extra[f"{sampling.name}_batch_missing"] = 1.0
        metrics = result.metrics.updated(extra)
        self.replay_feed.after_update(batch, result.outputs, replayed, self.learner.version)
        with self.lock:
            self.last_metrics = metrics
        return metrics

    def _count_nonfinite(self, what: str) -> None:
        """Count a skipped update; `max_nonfinite_updates` of them in a row raise `TrainingDiverged`."""
        with self.lock:
            self.counters["nonfinite_updates"] += 1
            self.nonfinite_in_a_row += 1
            self.last_nonfinite = what
        limit = self.cfg.learner.max_nonfinite_updates
        if self.nonfinite_in_a_row >= limit:
            raise TrainingDiverged(
                f"training diverged: {self.nonfinite_in_a_row} updates in a row had a NaN/Inf loss or gradient "
                f"(--max-nonfinite-updates {limit}); none of them changed the model, so the latest checkpoint "
                f"and the final one hold the last good model. Last: {what}"
            )

    # -- reading and saving ----------------------------------------------------------------------
    def _counters(self) -> LearnerCounters:
        """A copy of the counters, safe to hand out; called under `self.lock`. The model keeps its version and the
        samples trained, the replay feed its updates (they advance with them): read into the record here."""
        counters = self.counters
        counters["learner_version"] = self.learner.version
        counters["samples_trained"] = self.learner.samples_trained
        counters["replay_updates"] = self.replay_feed.updates
        return {**counters, "dropped": dict(counters["dropped"])}

    def stats(self) -> LearnerCoreStats:
        """Counters and last losses: what the driver turns into a metrics record and Prometheus series."""
        with self.lock:
            return {
                **self._counters(),
                "episode_return_mean": float(np.mean(self.returns)) if self.returns else None,
                "episode_length_mean": float(np.mean(self.lengths)) if self.lengths else None,
                "episode_returns_window": len(self.returns),
                "policy_lag_mean": float(np.mean(self.lag_window)) if self.lag_window else 0.0,
                "policy_lag_buckets": list(LAG_BUCKETS),
                "policy_lag_counts": self.lag_counts.tolist(),
                "policy_lag_sum": self.lag_sum,
                "last_nonfinite": self.last_nonfinite,
                "metrics": dict(self.last_metrics),
                "device": str(self.learner.device),
                "threads": torch.get_num_threads(),
                "replay_beta": self.replay_feed.beta(),
            }

    def state_dict(self) -> dict[str, Any]:
        """Model, optimiser and counters: what a checkpoint holds of the learner."""
        with self.lock:
            counters = self._counters()
        return {"learner": self.learner.state_dict(), "counters": counters}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Model and optimiser from `state["learner"]` (None: keep the fresh ones), counters from
        `state["counters"]`. The learner version is the larger of the model's and the counters': a restart
        that was given counters seen after the checkpoint (see `monotone_counters`) goes on counting from
        there. Counters without `replay_updates` annealed beta by the learner version."""
        if state.get("learner") is not None:
            self.learner.load_state_dict(state["learner"])
        saved = state.get("counters") or {}
        counters = read_counters(saved)
        with self.lock:
            self.learner.version = max(self.learner.version, counters["learner_version"])
            self.learner.samples_trained = max(self.learner.samples_trained, counters["samples_trained"])
            has_updates = saved.get("replay_updates") is not None
            self.replay_feed.updates = counters["replay_updates"] if has_updates else self.learner.version
            self.counters = counters


def _replayed_episodes(unroll: Unroll) -> int:
    """Of an unroll's finished episodes, those on a replayed level: its `episode_replayed` where it says, else the
    replayed steps that end an episode."""
    flags = unroll.get("episode_replayed")
    if flags is not None:
        return int(np.count_nonzero(flags))
    return int(np.count_nonzero(unroll["level_replayed"] & (unroll["terminated"] | unroll["truncated"])))


def monotone_counters(saved: dict[str, Any] | None, seen: dict[str, Any] | None) -> dict[str, Any]:
    """Counters to restart from: the checkpoint's (`saved`), each counter that resumes by `MAX` raised to the
    highest value the job already reported (`seen`: a learner's last `stats()` or the last `metrics.jsonl` record).

    A checkpoint is older than the job's last report, so restoring its counters would make env steps,
    episodes and updates step back: `metrics.jsonl` would go backwards and Prometheus would see a counter
    reset (a spike in `rate()`). The steps between the checkpoint and the death were really collected and
    are counted; the model restarts from the checkpoint, so its version number skips ahead, which keeps
    checkpoint names and policy lag monotone too."""
    saved, seen = dict(saved or {}), seen or {}
    for name, tally in TALLIES.items():
        if tally.on_resume == MAX and (name in BY_REASON or seen.get(name) is not None):
            saved[name] = combine(name, (saved.get(name), seen.get(name)), max)
    return saved
