"""The model loss's batch: sequences cut from replayed unrolls, and what replay keeps of a fresh unroll for it.

`SequenceSampler.gather(sample, version)` turns a replay sample (`ids`, `items`, `weights`) into
`model_loss.batch_size` sequences, each one column of one stored unroll from a uniformly drawn start t.
`SEQUENCES_PER_UNROLL` columns come from each sampled unroll, so fewer unrolls cross the wire. NumPy, no
gradients. It is the model loss's `sampler` (`learner.auxiliary.ReplaySampler`): `stored` adds `MODEL_FIELDS` to a
fresh unroll, and `replay_ids` says which unroll each sequence's priority belongs to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from levelray.contracts.config import ModelLossConfig
from levelray.contracts.trajectory import Unroll

# Sequences drawn from one sampled unroll (distinct columns while it has enough): an unroll of a procgen
# actor is ~4 MB, so drawing each sequence from its own unroll would move batch_size of them per update.
SEQUENCES_PER_UNROLL = 4

# What a replayed unroll must carry for the model loss: written by `SequenceSampler.stored` when the unroll went
# in fresh.
MODEL_FIELDS = ("model_values", "model_final_values", "inserted_at")


@dataclass
class ModelBatch:
    """`n` sequences (one column of a stored unroll each), time-major `[T(+1), n, ...]` NumPy arrays."""

    obs: np.ndarray  # [T+1, n, *obs_shape]
    actions: np.ndarray  # [T, n]
    rewards: np.ndarray  # [T, n] raw rewards
    terminated: np.ndarray  # [T, n]
    truncated: np.ndarray  # [T, n]
    behaviour_params: np.ndarray  # [T, n, A] the behaviour policy's logits
    values: np.ndarray  # [T+1, n] stored values (reward units)
    final_values: np.ndarray  # [T, n] stored V(final obs) at truncated steps, 0 elsewhere
    final_obs: np.ndarray  # [M, *obs_shape], final observations of truncated steps (for reanalyse)
    final_obs_index: np.ndarray  # [M, 2] (t, i) of each
    age: np.ndarray  # [n] learner updates since the unroll was inserted
    starts: np.ndarray  # [n]
    weights: np.ndarray  # [n] replay importance weights
    ids: np.ndarray  # [n] replay id of each sequence's unroll


# One sampled unroll's share of the batch: (index into the sample's items, columns [k], starts [k]).
Block = tuple[int, np.ndarray, np.ndarray]


class SequenceSampler:
    """Draws the model batch's columns and starts with its own generator (saved in checkpoints)."""

    def __init__(self, cfg: ModelLossConfig, seed: int):
        self.batch_size = cfg.batch_size
        self.rng = np.random.default_rng(seed + 0x6D75)

    def num_unrolls(self) -> int:
        """Unrolls to sample from replay for one model batch."""
        return math.ceil(self.batch_size / SEQUENCES_PER_UNROLL)

    def _blocks(self, items: list[Unroll]) -> list[Block]:
        """Sequence j comes from item (j // SEQUENCES_PER_UNROLL) mod len(items), with a column drawn without
        replacement while the unroll has enough and a start drawn uniformly in [0, T). The draws alternate
        columns then starts, block by block: that order is what a seed reproduces."""
        blocks: list[Block] = []
        picked = 0
        while picked < self.batch_size:
            i = len(blocks) % len(items)
            T, width = items[i]["rewards"].shape
            take = min(SEQUENCES_PER_UNROLL, self.batch_size - picked)
            columns = self.rng.choice(width, size=take, replace=take > width)
            blocks.append((i, columns, self.rng.integers(0, T, size=take)))
            picked += take
        return blocks

    def gather(self, sample: dict[str, Any], version: int) -> ModelBatch:
        """`batch_size` sequences from a replay sample (`ids`, `items`, `weights`) at learner `version`;
        windows that run off the stored data are masked by the targets."""
        items, ids, weights = sample["items"], np.asarray(sample["ids"]), np.asarray(sample["weights"])
        blocks = self._blocks(items)
        unrolls = [items[i] for i, _, _ in blocks]
        for key in MODEL_FIELDS:
            if any(key not in u for u in unrolls):
                raise ValueError(f"replayed unroll has no {key!r}: it was not inserted by a learner with the "
                                 f"model loss (model_loss.loss muzero) on")

        def column(key: str) -> np.ndarray:  # one gather per unroll, not per sequence
            return np.concatenate([u[key][:, c] for u, (_, c, _) in zip(unrolls, blocks, strict=True)], axis=1)

        obs = column("obs")
        final_obs, final_obs_index = _final_observations(unrolls, blocks, obs)
        sizes = [len(c) for _, c, _ in blocks]
        which = np.repeat([i for i, _, _ in blocks], sizes)  # each sequence's item
        inserted_at = np.array([int(u["inserted_at"]) for u in unrolls], dtype=np.int64)
        return ModelBatch(
            obs=obs,
            actions=column("actions"),
            rewards=column("rewards").astype(np.float32, copy=False),
            terminated=column("terminated"),
            truncated=column("truncated"),
            behaviour_params=column("behaviour_params").astype(np.float32, copy=False),
            values=column("model_values").astype(np.float32, copy=False),
            final_values=column("model_final_values").astype(np.float32, copy=False),
            final_obs=final_obs,
            final_obs_index=final_obs_index,
            age=np.repeat(np.maximum(0, version - inserted_at), sizes).astype(np.float64),
            starts=np.concatenate([t for _, _, t in blocks]).astype(np.int64, copy=False),
            weights=weights[which].astype(np.float32),
            ids=ids[which].astype(np.int64),
        )

    @staticmethod
    def replay_ids(batch: ModelBatch) -> np.ndarray:
        """`[n]` the replay id of each sequence's unroll: where its priority goes."""
        return batch.ids

    @staticmethod
    def stored(unroll: Unroll, values: np.ndarray, final_values: np.ndarray, version: int) -> Unroll:
        """A fresh `unroll` as replay keeps it for the model loss: with the values the learner computed for it in
        this update (`model_values [T+1, K]`, `model_final_values [T, K]`, reward units: the stored bootstrap
        values) and `inserted_at` (learner `version`: the dynamic horizon's age)."""
        return {**unroll, "model_values": values.astype(np.float32),
                "model_final_values": final_values.astype(np.float32), "inserted_at": version}

    def state_dict(self) -> dict[str, Any]:
        return self.rng.bit_generator.state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state


def _final_observations(unrolls: list[Unroll], blocks: list[Block], obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Final observations of the truncated steps in the picked columns `[M, ...]`, sequence by sequence (and
    in stored order within a sequence), with the (t, j) of each `[M, 2]`, j the sequence."""
    finals, index, first = [], [], 0
    for u, (_, c, _) in zip(unrolls, blocks, strict=True):
        if u.get("final_obs") is not None and len(u["final_obs"]):
            seq, rows = np.nonzero(c[:, None] == u["final_obs_index"][None, :, 1])  # sequence-major
            finals.append(u["final_obs"][rows])
            index.append(np.stack([u["final_obs_index"][rows, 0], seq + first], axis=1))
        first += len(c)
    final_obs = np.concatenate(finals) if finals else np.zeros((0, *obs.shape[2:]), obs.dtype)
    final_obs_index = (np.concatenate(index) if index else np.zeros((0, 2))).astype(np.int64, copy=False)
    return final_obs, final_obs_index
