"""Action distributions over the policy head's output, the distribution parameters `dist_params`.

Discrete: `dist_params [..., A]` are logits. Continuous: `dist_params [..., 2D]` are (mean, log-std) of a
diagonal Gaussian; actions are stored unclipped so that behaviour log-probabilities stay exact (the env side
clips to its bounds).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def categorical_log_prob(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[action]: `logits [..., A]`, `actions [...]` -> `[...]`."""
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), actions.reshape(-1).long(), reduction="none")
    return -flat.view_as(actions)


def gaussian_log_prob(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Log density of a diagonal Gaussian, summed over the action dimension: `[..., D]` -> `[...]`."""
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


def split_gaussian(dist_params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`dist_params [..., 2D]` -> (mean, log-std clamped to [LOG_STD_MIN, LOG_STD_MAX]), each `[..., D]`."""
    mean, log_std = dist_params.chunk(2, dim=-1)
    return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)


def mean_bound_excess(mean: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """How far a Gaussian's mean lies outside the action box, `mean [..., D]` -> `[...]`:

        sum_d relu((|mean_d - c_d| - h_d) / h_d)^2,    c = (high + low) / 2,  h = (high - low) / 2

    in half-widths of the box, so one weight fits Pendulum's [-2, 2] and BipedalWalker's [-1, 1]; dimensions
    with an infinite bound contribute 0. Why a penalty is needed at all: the env clips actions, so once the
    mean is a few standard deviations past a bound every sample acts the same and the advantage no longer
    says which way to move. What is left is the bias of truncated importance weights under policy lag,
    which keeps pushing the mean the way it last moved; measured on Pendulum, a lag of 1-2 versions sent
    the mean to |mu| = 5-16 (bounds 2) and the return back to a random policy's, and this term stopped it.
    """
    center, half = (high + low) / 2, (high - low) / 2
    finite = torch.isfinite(half) & (half > 0)
    half = torch.where(finite, half, torch.ones_like(half))
    excess = torch.relu(((mean - torch.where(finite, center, torch.zeros_like(center))).abs() - half) / half)
    return (torch.where(finite, excess, torch.zeros_like(excess)) ** 2).sum(-1)


def sample(dist_params: torch.Tensor, discrete: bool, generator: torch.Generator | None = None) -> torch.Tensor:
    """One action per row of `dist_params [N, P]` -> `[N]` (discrete) or `[N, D]`."""
    if discrete:
        probs = F.softmax(dist_params.float(), dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    mean, log_std = split_gaussian(dist_params)
    noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
    return mean + noise * log_std.exp()


def log_prob(dist_params: torch.Tensor, actions: torch.Tensor, discrete: bool) -> torch.Tensor:
    if discrete:
        return categorical_log_prob(dist_params, actions)
    mean, log_std = split_gaussian(dist_params)
    return gaussian_log_prob(mean, log_std, actions)


def entropy(dist_params: torch.Tensor, discrete: bool) -> torch.Tensor:
    if discrete:
        logp = F.log_softmax(dist_params, dim=-1)
        return -(logp.exp() * logp).sum(-1)
    _, log_std = split_gaussian(dist_params)
    return (log_std + 0.5 * math.log(2 * math.pi * math.e)).sum(-1)
