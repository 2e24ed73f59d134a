"""IMPALA losses from V-trace targets, and the network's outputs they read (`Forward`).

Reduction: every loss is a weighted MEAN over the `T x B` valid steps,

    L = sum_{t,b} w_{t,b} l_{t,b} / sum_{t,b} m_{t,b},     w = m * iw_b

where `m [T, B]` masks padded steps and `iw [B]` are replay importance weights (1 for fresh unrolls).
A mean keeps the gradient scale independent of batch size and unroll length, so one learning rate
(default 5e-4 with Adam, as DI-engine's IMPALA policy, `ding/policy/impala.py`) holds across configs;
torchbeast's sum reduction would need the rate divided by T*B.

    policy_loss  = -mean(w * log pi(a_t|x_t) * A_t)          A_t = V-trace pg advantage
    value_loss   = 0.5 * mean(w * (v_t - V(x_t))^2)
    entropy      = mean(w * H[pi(.|x_t)])
    action_bound = mean(w * sum_d relu((|mu_d - c_d| - h_d) / h_d)^2)   continuous actions only: the Gaussian
                   mean's excess beyond the action box (centre c, half-width h); see `mean_bound_excess`
    total        = policy_loss + value_weight * value_loss - entropy_weight * entropy
                   + action_bound_weight * action_bound
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Forward(NamedTuple):
    """The policy network's outputs on one batch (tensors on the learner's device): what IMPALA's losses and the
    auxiliary losses (`learner.auxiliary`) read."""

    dist_params: torch.Tensor  # [T+1, B, P] the policy's distribution parameters (logits, or Gaussian mean|log-std)
    values: torch.Tensor  # [T+1, B] V(x_t) in reward units (PopArt's statistics before this update)
    final_values: torch.Tensor | None  # [T, B] V(final obs) at truncated steps, 0 elsewhere; None: no truncation
    actions: torch.Tensor  # [T, B(, D)] the actions taken, on the learner's device
    log_probs: torch.Tensor  # [T, B] log pi(a_t | x_t) of the actions taken (with gradients)


class ImpalaLosses(NamedTuple):
    total: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    entropy: torch.Tensor
    action_bound: torch.Tensor | None = None


def impala_losses(
    target_action_log_probs: torch.Tensor,
    pg_advantages: torch.Tensor,
    vs: torch.Tensor,
    values: torch.Tensor,
    entropies: torch.Tensor,
    *,
    value_weight: float,
    entropy_weight: float,
    weights: torch.Tensor | None = None,
    action_bound_excess: torch.Tensor | None = None,
    action_bound_weight: float = 0.0,
) -> ImpalaLosses:
    """All inputs `[T, B]`; `weights [T, B]` = mask * importance weight (None: all ones);
    `action_bound_excess [T, B]` (continuous actions) is `distributions.mean_bound_excess` of the target mean."""
    if weights is None:
        weights = torch.ones_like(values)
    denom = torch.clamp((weights > 0).sum(), min=1).to(values.dtype)

    def wmean(x: torch.Tensor) -> torch.Tensor:
        return (weights * x).sum() / denom

    policy = -wmean(target_action_log_probs * pg_advantages.detach())
    value = 0.5 * wmean((vs.detach() - values) ** 2)
    entropy = wmean(entropies)
    total = policy + value_weight * value - entropy_weight * entropy
    action_bound = None
    if action_bound_excess is not None:
        action_bound = wmean(action_bound_excess)
        total = total + action_bound_weight * action_bound
    return ImpalaLosses(total, policy, value, entropy, action_bound)
