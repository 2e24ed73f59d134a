"""What the learner sends the level service after an update: PLR's per-step inputs for the
configured strategy, computed from the learner's own forward pass (not the actors' stale one).

value_l1 / gae / positive_value_loss use `advantages = v_s - V(x_s)` (V-trace target minus value);
one_step_td_error uses rewards and values `[T+1, B]`; the policy-based strategies use the logits.

Only fresh unrolls are scored: a replayed unroll's episodes were scored when it was fresh, and its
columns would interleave with newer fragments of the same env. Fresh unrolls are grouped so that
no env column appears twice in one call (two unrolls of one actor in a batch are consecutive
fragments of the same episodes), in arrival order, so the service stitches episodes correctly.
"""

from __future__ import annotations

import numpy as np

from levelray.contracts.levels import ADVANTAGE_STRATEGIES, LOGIT_STRATEGIES


def level_update_inputs(strategy: str, batch: dict, outputs: dict[str, np.ndarray],
                        columns: slice | np.ndarray = slice(None)) -> dict:
    """Keyword arguments for `LevelSampler.update_with_rollouts` over `columns` of the batch
    (all `[T, B]` time-major)."""
    kwargs = {
        "seeds": batch["level_seeds"][:, columns],
        "dones": (batch["terminated"] | batch["truncated"])[:, columns],
        "actor_ids": batch["env_ids"][columns],
    }
    if strategy in ADVANTAGE_STRATEGIES:
        kwargs["advantages"] = outputs["advantages"][:, columns]
    elif strategy == "one_step_td_error":
        kwargs["rewards"] = batch["rewards"][:, columns]
        kwargs["values"] = outputs["values"][:, columns]
    elif strategy in LOGIT_STRATEGIES:
        kwargs["logits"] = outputs["params"][:, columns]
    return kwargs


def level_update_calls(strategy: str, batch: dict, outputs: dict[str, np.ndarray], widths: list[int],
                       num_fresh: int) -> list[dict]:
    """One `update_with_rollouts` call per group of fresh unrolls with distinct env columns.

    `widths` are the unrolls' column counts in batch order; the first `num_fresh` are fresh."""
    bounds = np.cumsum([0, *widths])
    groups: list[list[int]] = []
    seen: set[int] = set()
    for i in range(num_fresh):
        ids = batch["env_ids"][bounds[i]:bounds[i + 1]].tolist()
        if not groups or seen.intersection(ids):
            groups.append([])
            seen = set()
        groups[-1].append(i)
        seen.update(ids)
    calls = []
    for group in groups:
        cols = np.concatenate([np.arange(bounds[i], bounds[i + 1]) for i in group])
        calls.append(level_update_inputs(strategy, batch, outputs, cols))
    return calls
