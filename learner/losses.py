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

APPO (`ppo_losses`, learner/appo.py) replaces the policy and value terms by PPO's (Schulman et al. 2017), with
`r_t = pi(a_t|x_t) / pi_old(a_t|x_t)` and `pi_old` the policy the update started from:

    policy_loss  = -mean(w * min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t))
    value_loss   = 0.5 * mean(w * max((v_t - V(x_t))^2, (v_t - V_clip(x_t))^2)),
                   V_clip = V_old + clip(V - V_old, -eps_v, eps_v)       (eps_v = 0: the unclipped IMPALA term)

the pessimistic bounds of openai/baselines' ppo2 and CleanRL's ppo.py (DCD's `algos/ppo.py` is the same). At
`r = 1` (the first pass) the surrogate's gradient is `-mean(w A grad log pi)`, IMPALA's, and the clipped value term
is the plain one: both start where IMPALA is and differ as the passes move the policy away from `pi_old`.
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
    total, entropy, action_bound = _total(policy, value, wmean, entropies, value_weight, entropy_weight,
                                          action_bound_excess, action_bound_weight)
    return ImpalaLosses(total, policy, value, entropy, action_bound)


class PpoLosses(NamedTuple):
    """`ImpalaLosses`' terms, with PPO's policy and value terms, and two diagnostics (no gradient): the fraction
    of trained steps whose ratio is outside `1 +- clip`, and `approx_kl`, the mean of `(r - 1) - log r`, an
    estimator of KL(pi_old || pi) that is never negative (Schulman, "Approximating KL divergence", as CleanRL logs
    it)."""

    total: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    entropy: torch.Tensor
    action_bound: torch.Tensor | None
    clip_fraction: torch.Tensor
    approx_kl: torch.Tensor


def ppo_losses(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    vs: torch.Tensor,
    values: torch.Tensor,
    old_values: torch.Tensor,
    entropies: torch.Tensor,
    *,
    clip: float,
    value_clip: float,
    value_weight: float,
    entropy_weight: float,
    weights: torch.Tensor,
    action_bound_excess: torch.Tensor | None = None,
    action_bound_weight: float = 0.0,
) -> PpoLosses:
    """PPO's terms (the module docstring), each a weighted mean over the trained steps like IMPALA's. All inputs
    `[T, B]`: `log_probs`/`values` with gradients, `old_log_probs`/`old_values` the update's start (`pi_old`,
    `V_old`), `advantages` and targets `vs` fixed for the update; `weights [T, B]` = mask * importance weight;
    `value_clip` 0 turns the value clip off."""
    trained = weights > 0
    denom = torch.clamp(trained.sum(), min=1).to(values.dtype)

    def wmean(x: torch.Tensor) -> torch.Tensor:
        return (weights * x).sum() / denom

    log_ratio = log_probs - old_log_probs.detach()
    ratio = log_ratio.exp()
    advantages = advantages.detach()
    surrogate = torch.minimum(ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages)
    policy = -wmean(surrogate)
    vs = vs.detach()
    squared = (vs - values) ** 2
    if value_clip > 0:
        old = old_values.detach()
        squared = torch.maximum(squared, (vs - (old + (values - old).clamp(-value_clip, value_clip))) ** 2)
    value = 0.5 * wmean(squared)
    total, entropy, action_bound = _total(policy, value, wmean, entropies, value_weight, entropy_weight,
                                          action_bound_excess, action_bound_weight)
    with torch.no_grad():
        counted = trained.to(values.dtype)
        clip_fraction = (counted * ((ratio - 1.0).abs() > clip).to(values.dtype)).sum() / denom
        approx_kl = (counted * ((ratio - 1.0) - log_ratio)).sum() / denom
    return PpoLosses(total, policy, value, entropy, action_bound, clip_fraction, approx_kl)


def _total(policy, value, wmean, entropies, value_weight, entropy_weight, action_bound_excess,
           action_bound_weight) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """IMPALA's and PPO's shared tail: `(total, entropy, action_bound)`, the weighted sum of the policy and value
    terms, the entropy bonus and (continuous actions) the penalty on a mean outside the action box."""
    entropy = wmean(entropies)
    total = policy + value_weight * value - entropy_weight * entropy
    action_bound = None
    if action_bound_excess is not None:
        action_bound = wmean(action_bound_excess)
        total = total + action_bound_weight * action_bound
    return total, entropy, action_bound
