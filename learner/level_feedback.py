"""What the learner sends the level service after an update: PLR's per-step inputs for the
configured strategy, computed from the learner's own forward pass (not the actors' stale one).

value_l1 / gae / positive_value_loss use `advantages = v_s - V(x_s)` (V-trace target minus value);
one_step_td_error uses rewards and values `[T+1, B]`; the policy-based strategies use the logits.
"""

from __future__ import annotations

import numpy as np

ADVANTAGE_STRATEGIES = ("value_l1", "gae", "positive_value_loss")
LOGIT_STRATEGIES = ("policy_entropy", "least_confidence", "min_margin")


def level_update_inputs(strategy: str, batch: dict, outputs: dict[str, np.ndarray]) -> dict:
    """Keyword arguments for `LevelSampler.update_with_rollouts` (all `[T, B]` time-major)."""
    kwargs = {
        "seeds": batch["level_seeds"],
        "dones": batch["terminated"] | batch["truncated"],
        "actor_ids": batch["env_ids"],
    }
    if strategy in ADVANTAGE_STRATEGIES:
        kwargs["advantages"] = outputs["advantages"]
    elif strategy == "one_step_td_error":
        kwargs["rewards"] = batch["rewards"]
        kwargs["values"] = outputs["values"]
    elif strategy in LOGIT_STRATEGIES:
        kwargs["logits"] = outputs["params"]
    return kwargs
