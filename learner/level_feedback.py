"""What the learner sends the level service after an update: PLR's per-step inputs for the configured
strategy (`contracts.levels.LevelFeedback`), computed from the learner's own forward pass (not the actors'
stale one).

value_l1 / gae / positive_value_loss use `advantages = v_s - V(x_s)` (V-trace target minus value);
one_step_td_error uses rewards and values `[T+1, B]`; the policy-based strategies use the logits.

Only fresh unrolls are scored: a replayed unroll's episodes were scored when it was fresh, and its
columns would interleave with newer fragments of the same env. Fresh unrolls are grouped so that
no env column appears twice in one `LevelFeedback` (two unrolls of one actor in a batch are consecutive
fragments of the same episodes), in arrival order, so the service stitches episodes correctly.
"""

from __future__ import annotations

import numpy as np

from levelray.contracts.levels import ADVANTAGE_STRATEGIES, LOGIT_STRATEGIES, LevelFeedback
from levelray.learner.batch import Batch
from levelray.learner.learner import StepOutputs


def _feedback_for_columns(strategy: str, batch: Batch, outputs: StepOutputs, columns: np.ndarray) -> LevelFeedback:
    """PLR's inputs over `columns` of the batch, with only the fields `strategy` reads."""
    arrays = batch.arrays
    extra: dict[str, np.ndarray] = {}
    if strategy in ADVANTAGE_STRATEGIES:
        extra["advantages"] = outputs.advantages[:, columns]
    elif strategy == "one_step_td_error":
        extra["rewards"] = arrays["rewards"][:, columns]
        extra["values"] = outputs.values[:, columns]
    elif strategy in LOGIT_STRATEGIES:
        extra["logits"] = outputs.dist_params[:, columns]
    return LevelFeedback(
        seeds=arrays["level_seeds"][:, columns],
        dones=(arrays["terminated"] | arrays["truncated"])[:, columns],
        actor_ids=arrays["env_ids"][columns],
        **extra,
    )


def level_feedback(strategy: str, batch: Batch, outputs: StepOutputs) -> list[LevelFeedback]:
    """One `LevelFeedback` per group of consecutive fresh unrolls with distinct env columns."""
    env_ids = batch.arrays["env_ids"]
    groups: list[list[slice]] = []
    seen: set[int] = set()
    for i in range(batch.num_fresh):
        cols = batch.columns(i)
        ids = env_ids[cols].tolist()
        if not groups or seen.intersection(ids):
            groups.append([])
            seen = set()
        groups[-1].append(cols)
        seen.update(ids)
    return [_feedback_for_columns(strategy, batch, outputs, np.concatenate([np.arange(c.start, c.stop) for c in g]))
            for g in groups]
