"""The learner's one link to the replay service: replayed unrolls into the V-trace batch, the batch of the auxiliary
loss that samples replay (if any: `AuxiliaryLoss.sampler`), and priorities back after the update.

`replay_ratio` r is the fraction of each batch's unrolls drawn from replay: with `batch_size` n,
round(r * n) are replayed and the rest are fresh (LASER, Schmitt et al. 2020, found r in 0.5-0.875 stable;
r = 1 is refused: a batch without fresh data stops tracking the current policy). Fresh unrolls enter the
buffer after the update with their own priority, so they are not replayed in the batch that trained on them.
β, the importance-sampling exponent (Schaul et al. 2016, "Prioritized Experience Replay"), is annealed
linearly from `beta` to 1 over `beta_anneal_updates`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from levelray.contracts.clients import ReplayClient
from levelray.contracts.config import ReplayConfig
from levelray.contracts.trajectory import Unroll
from levelray.learner.auxiliary import AuxiliaryLoss
from levelray.learner.batch import Batch, on_host
from levelray.learner.learner import StepOutputs
from levelray.learner.priorities import priorities_by_unroll, trajectory_priority


class ReplayFeed:
    """Everything the learner asks of replay, through a `ReplayClient` (the core in process, or `RemoteReplay`
    over Ray; None: no replay service).

    Round trips per update: up to two samples before it — `batch` (the V-trace batch's replayed unrolls, when
    `replay_ratio > 0`) and `replayed` (the unrolls that `sampling`, the auxiliary loss that samples replay, cuts
    its batch from) — and up to three writes after it in `after_update`: the fresh unrolls inserted, the replayed
    unrolls' new TD priorities, and the priorities of the unrolls `sampling` trained on, where replay takes its
    priorities (`AuxiliaryLoss.replay_priorities`, which then replace the TD ones). Over Ray the samples wait for
    their reply and the writes do not."""

    def __init__(self, cfg: ReplayConfig, batch_size: int, replay: ReplayClient | None, *,
                 sampling: AuxiliaryLoss | None = None):
        if not 0.0 <= cfg.replay_ratio < 1.0:
            raise ValueError(f"replay_ratio must be in [0, 1), got {cfg.replay_ratio}")
        self.cfg = cfg
        self.replay = replay
        self.sampling = sampling
        self.num_replayed = int(round(cfg.replay_ratio * batch_size))
        self.num_fresh = batch_size - self.num_replayed
        if self.num_fresh < 1:
            raise ValueError(f"replay_ratio {cfg.replay_ratio} leaves no fresh unroll in a batch of {batch_size}")
        self.updates = 0

    def beta(self) -> float:
        frac = min(1.0, self.updates / self.cfg.beta_anneal_updates)
        return self.cfg.beta + frac * (1.0 - self.cfg.beta)

    def batch(self, fresh: list[Unroll]) -> Batch:
        """The fresh unrolls stacked with `num_replayed` replayed ones (fewer while replay is not ready)."""
        if self.num_replayed and self.replay is not None:
            sample = self.replay.sample(self.num_replayed, self.beta())
            if sample is not None:
                return Batch.stack(fresh, list(sample["items"]), sample["ids"], sample["weights"])
        return Batch.stack(fresh)

    def replayed(self, version: int) -> Any:
        """The batch `sampling`'s sampler cuts from replay for the update at learner `version` (None: no loss
        samples replay, or replay is not ready yet / unavailable; the update then leaves that loss out)."""
        if self.sampling is None or self.replay is None:
            return None
        sampler = self.sampling.sampler
        sample = self.replay.sample(sampler.num_unrolls(), self.beta())
        if sample is None or not len(sample["items"]):
            return None
        return sampler.gather(sample, version)

    def after_update(self, batch: Batch, outputs: StepOutputs, replayed: Any, version: int) -> None:
        """Write the update's results to replay. TD priorities: one per unroll from `abs_td [T, B]`
        (eta * max + (1 - eta) * mean over its columns), for the fresh unrolls as they go in and for the
        replayed ones. Where replay takes `sampling`'s priorities instead: fresh unrolls go in with the largest
        priority seen so far, replayed ones keep theirs, and the unrolls `replayed` was cut from get their items'
        priorities (`outputs.sampled_priorities`, folded the same way over each unroll's items)."""
        self.updates += 1
        if self.replay is None:
            return
        # replay keeps host memory, whatever device an unroll was kept on
        fresh = [on_host(u) for u in self._stored(batch, outputs, version)]
        if self.sampling is not None and self.sampling.replay_priorities:
            if fresh:
                self.replay.insert(fresh, None)
            if replayed is not None:
                self.replay.update_priorities(*priorities_by_unroll(
                    self.sampling.sampler.replay_ids(replayed), outputs.sampled_priorities, self.cfg.eta))
            return
        prios = np.array([float(trajectory_priority(outputs.abs_td[:, cols].reshape(-1, 1), eta=self.cfg.eta)[0])
                          for cols in batch.unroll_columns()])
        if fresh:
            self.replay.insert(fresh, prios[:batch.num_fresh])
        if len(batch.replay_ids):
            self.replay.update_priorities(batch.replay_ids, prios[batch.num_fresh:])

    def _stored(self, batch: Batch, outputs: StepOutputs, version: int) -> list[Unroll]:
        """Fresh unrolls as replay keeps them: as `sampling`'s sampler stores them (with the learner's values on
        each, its columns of `outputs.values [T+1, B]` and `outputs.final_values [T, B]`), or as they came."""
        if self.sampling is None:
            return batch.fresh
        stored = self.sampling.sampler.stored
        return [stored(u, outputs.values[:, cols], outputs.final_values[:, cols], version)
                for u, cols in zip(batch.fresh, batch.unroll_columns(), strict=False)]
