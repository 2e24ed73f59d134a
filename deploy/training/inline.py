"""`levelray train --backend inline`: the whole system in one process, synchronously.

For a GPU box without Ray, for debugging, and for machines that cannot install Ray. The same config, services,
learner train step (`LearnerCore`) and rollout code as the Ray backend; only the transport differs. Actors are
`RolloutWorker`s stepped in turn, each acting through a `DevicePolicy` on `actors.device` (auto: the learner's
device, where they act with the learner's own network and leave their unrolls there for it; on a GPU this is the
single-GPU fast path). The level and replay services are their cores called directly: each worker's episode results
go to the level service after each of its unrolls; with level windows each worker asks it for its next window when
one ends, and a Robust PLR explore window's unrolls are counted (`LearnerCore.accept_tally`) but never given to the
update. `deploy.training.driver.run` drives it like any other backend.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import torch

from levelray.actors.device_policy import DevicePolicy
from levelray.actors.env_vector import LevelDraws
from levelray.actors.envs import env_spec, make_env_vector
from levelray.actors.episode_scorer import EpisodeScorer
from levelray.actors.level_windows import ExploreTally, LevelWindows, ServiceWindows, window_unrolls
from levelray.actors.rollout import RolloutWorker
from levelray.contracts.config import RunConfig, uses_level_service, uses_replay
from levelray.contracts.status import StatusSnapshot
from levelray.deploy.training.components import make_level_service, make_replay
from levelray.deploy.training.progress import reached_return
from levelray.learner.core import LearnerCore
from levelray.learner.device import pick_device
from levelray.policy.models import build_model

if TYPE_CHECKING:
    from levelray.level_service.service import LevelServiceCore


class ServiceDraws(LevelDraws):
    """An env asks for its next level when an episode ends: one level from the in-process level service."""

    def __init__(self, levels: LevelServiceCore, num_envs: int):
        super().__init__(num_envs)
        self.levels = levels

    def next_level(self) -> tuple[int, bool]:
        seeds, replayed, encodings = self.levels.draw_levels(1)
        self.remember(encodings)
        return seeds[0], replayed[0]


def acting_device(cfg: RunConfig, learner_device: torch.device) -> torch.device:
    """`actors.device`: auto is the learner's device."""
    return learner_device if cfg.actors.device == "auto" else pick_device(cfg.actors.device)


class InlineBackend:
    uses_ray = False

    def __init__(self, cfg: RunConfig, *, resume_state: dict[str, Any] | None = None):
        self.cfg = cfg
        self.spec = env_spec(cfg.env)
        resume_state = resume_state or {}
        self.levels = make_level_service(cfg, resume_state.get("levels")) if uses_level_service(cfg) else None
        self.replay = make_replay(cfg) if uses_replay(cfg) else None
        if self.replay is not None and resume_state.get("replay") is not None:
            self.replay.load_state_dict(resume_state["replay"])
        self.core = LearnerCore(cfg, self.spec, replay=self.replay)
        if resume_state.get("learner") is not None:
            self.core.load_state_dict(resume_state["learner"])
        K = cfg.actors.envs_per_actor
        self.acting_device = acting_device(cfg, self.core.learner.device)
        # on the learner's device the workers act with the learner's own network: no weights to copy
        self._shares_network = self.acting_device == self.core.learner.device
        self.workers = []
        for i in range(max(1, cfg.actors.num_actors)):
            windows = None
            if self.levels is not None and window_unrolls(cfg):
                windows = LevelWindows(ServiceWindows(self.levels, K), K, window_unrolls(cfg),
                                       withhold=cfg.levels.robust)
            draws = windows.levels if windows is not None else ServiceDraws(self.levels, K) if self.levels else None
            self.workers.append(RolloutWorker(
                make_env_vector(cfg.env, K, draws, seed=cfg.seed * 1000 + i),
                cfg.actors.unroll_length,
                learner=cfg.learner,
                actor_id=i,
                env_id_offset=i * K,
                level_draws=draws,
                scorer=EpisodeScorer.for_run(cfg) if self.levels is not None else None,
                windows=windows,
                policy=self._acting_policy(K, seed=cfg.seed * 1000 + i),
            ))
        self._broadcast()
        self._next_worker = 0
        self._fresh: list = []  # unrolls for the next update, collected so far
        self._tally = ExploreTally()

    def _acting_policy(self, num_envs: int, seed: int) -> DevicePolicy:
        """A worker's policy on `acting_device`: the learner's network (values scaled to reward units by its value
        head's `value_scale`, PopArt's statistics read at each step, as published weights are), or a copy of it on
        another device."""
        learner, cfg = self.core.learner, self.cfg
        if self._shares_network:
            return DevicePolicy(learner.model, self.spec, cfg.learner, num_envs, seed, self.acting_device,
                                value_scale=learner.value_norm.value_scale)
        model = build_model(self.spec, cfg.learner.model, tuple(cfg.learner.hidden_sizes), cfg.learner.lstm_size)
        return DevicePolicy(model.to(self.acting_device).eval(), self.spec, cfg.learner, num_envs, seed,
                            self.acting_device)

    def _broadcast(self) -> None:
        """The workers act with the learner's latest weights: its version only, where they share its network."""
        version = self.core.version
        weights = None if self._shares_network else self.core.learner.get_weights()[1]
        for worker in self.workers:
            worker.policy.sync(version, weights)

    def train_step(self, until_time: float | None = None) -> dict[str, float]:
        """Collect unrolls round-robin over the workers until `num_fresh` reach the learner, then one
        `LearnerCore.train`. Unrolls a worker keeps (explore windows under Robust PLR) are only counted; where
        they delay the update past `until_time` (the unrolls collected wait for the next call), or the budget is spent
        before a batch begins, {} without an update. Once the budget is spent no worker steps again, and a batch
        begun is trained as it stands (`LearnerCore.budget_spent`): the driver stops on the budget, and a batch left
        waiting would be received, never trained, while finishing it could take many explore windows' steps."""
        while len(self._fresh) < self.core.num_fresh:
            if self.core.budget_spent:  # the run's last batch, short (or none)
                if not self._fresh:
                    return {}
                break
            worker = self.workers[self._next_worker]
            self._next_worker = (self._next_worker + 1) % len(self.workers)
            unroll = worker.unroll()
            results = worker.scorer.take() if worker.scorer is not None else None
            if results is not None:
                self.levels.report_episodes(results)
            if worker.withheld:
                self._tally.add(unroll)
                self.core.accept_tally(self._tally.take())
                if until_time is not None and time.time() >= until_time and not self.core.budget_spent:
                    return {}  # a report is due; past the budget the begun batch is trained first
            elif self.core.accept(unroll):
                self._fresh.append(unroll)
        fresh, self._fresh = self._fresh, []
        metrics = self.core.train(fresh)
        self._broadcast()
        return metrics

    # -- Backend -------------------------------------------------------------------------------
    def advance(self, until_time: float, until_version: int, stop: threading.Event) -> None:
        """At least one update (so a zero report interval still makes progress), then more until a limit."""
        while not stop.is_set():
            if self.core.budget_spent or reached_return(self.cfg, self.core.stats()):
                return
            self.train_step(until_time)
            if time.time() >= until_time or self.core.version >= until_version:
                return

    def poll(self) -> StatusSnapshot:
        """The learner's stats and the services'; no supervisor: the actors are this process's workers, and a
        failure anywhere raises instead of being reported."""
        snap: StatusSnapshot = {
            "learner": {**self.core.stats(), "queue_depth": 0},  # unrolls go straight to the learner
            "in_process_actors": len(self.workers),
        }
        if self.levels is not None:
            snap["levels"] = self.levels.stats()
        if self.replay is not None:
            snap["replay"] = self.replay.stats()
        return snap

    def policy_weights(self) -> tuple[int, Any]:
        return self.core.learner.get_weights()

    def checkpoint_state(self) -> dict[str, Any]:
        return {
            **self.core.state_dict(),
            "levels": self.levels.state_dict() if self.levels is not None else None,
            "replay": self.replay.state_dict() if self.replay is not None else None,
        }

    def publish(self, record: dict[str, Any]) -> None:
        """Nothing outside this process reads an inline job."""

    def stop(self) -> None:
        """Nothing runs between calls: stopping is not calling `advance` again."""

    def close(self) -> None:
        for worker in self.workers:
            worker.envs.close()
