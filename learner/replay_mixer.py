"""Learner side of prioritized replay: mix replayed unrolls into each batch, weight the losses by
their importance weights, and write new priorities back after the update.

`replay_ratio` r is the fraction of each batch's unrolls drawn from replay: with `batch_size` n,
round(r * n) are replayed and the rest are fresh (LASER found r in 0.5-0.875 stable; r = 1 is not
allowed: an all-replay batch was not). Fresh unrolls enter the buffer after the update with their
own priority, so they are not replayed in the batch that trained on them. β is annealed linearly
from `beta` to 1 over `beta_anneal_updates`.
"""

from __future__ import annotations

import numpy as np

from levelray.contracts.config import ReplayConfig
from levelray.contracts.trajectory import stack_unrolls
from levelray.learner.priorities import trajectory_priority


class ReplayMixer:
    """`replay` is anything with the ReplayServiceCore methods (`insert`, `sample`,
    `update_priorities`): the core itself inline, or an adapter over the Ray actor."""

    def __init__(self, cfg: ReplayConfig, batch_size: int, replay):
        if not 0.0 <= cfg.replay_ratio < 1.0:
            raise ValueError(f"replay_ratio must be in [0, 1), got {cfg.replay_ratio}")
        self.cfg = cfg
        self.replay = replay
        self.num_replayed = int(round(cfg.replay_ratio * batch_size))
        self.num_fresh = batch_size - self.num_replayed
        if self.num_fresh < 1:
            raise ValueError(f"replay_ratio {cfg.replay_ratio} leaves no fresh unroll in a batch of {batch_size}")
        self.updates = 0

    def beta(self) -> float:
        frac = min(1.0, self.updates / self.cfg.beta_anneal_updates)
        return self.cfg.beta + frac * (1.0 - self.cfg.beta)

    def build_batch(self, fresh: list[dict]) -> tuple[dict, dict]:
        """Stack fresh unrolls with replayed ones; returns (batch, bookkeeping for `after_update`)."""
        replayed, ids, weights = [], np.empty(0, dtype=np.int64), np.empty(0)
        if self.num_replayed and self.replay is not None:
            sample = self.replay.sample(self.num_replayed, self.beta())
            if sample is not None:
                replayed, ids, weights = list(sample["items"]), np.asarray(sample["ids"]), np.asarray(sample["weights"])
        unrolls = list(fresh) + replayed
        batch = stack_unrolls(unrolls)
        widths = [u["obs"].shape[1] for u in unrolls]
        per_unroll_weight = np.concatenate([np.ones(len(fresh)), weights]).astype(np.float32)
        batch["sample_weights"] = np.repeat(per_unroll_weight, widths)
        return batch, {"fresh": list(fresh), "ids": ids, "widths": widths}

    def after_update(self, book: dict, abs_td: np.ndarray, *, td_priorities: bool = True) -> None:
        """`abs_td [T, B]` from the update: one priority per unroll (eta*max + (1-eta)*mean).

        `td_priorities=False` (the model loss writes the priorities, `model.priority model`): fresh unrolls
        enter with the largest priority seen so far and replayed ones keep theirs."""
        self.updates += 1
        if self.replay is None:
            return
        if not td_priorities:
            if book["fresh"]:
                self.replay.insert(book["fresh"], None)
            return
        bounds = np.cumsum([0, *book["widths"]])
        prios = np.array(
            [
                float(trajectory_priority(abs_td[:, lo:hi].reshape(-1, 1), eta=self.cfg.eta)[0])
                for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
            ]
        )
        n_fresh = len(book["fresh"])
        if n_fresh:
            self.replay.insert(book["fresh"], prios[:n_fresh])
        if len(book["ids"]):
            self.replay.update_priorities(book["ids"], prios[n_fresh:])
