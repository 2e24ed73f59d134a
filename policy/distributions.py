"""Action distributions over the policy head's parameters.

Discrete: `params [..., A]` are logits. Continuous: `params [..., 2D]` are (mean, log-std) of a diagonal
Gaussian; actions are stored unclipped so that behaviour log-probabilities stay exact (the env side
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


def split_gaussian(params: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean, log_std = params.chunk(2, dim=-1)
    return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)


def sample(params: torch.Tensor, discrete: bool, generator: torch.Generator | None = None) -> torch.Tensor:
    """One action per row of `params [N, P]` -> `[N]` (discrete) or `[N, D]`."""
    if discrete:
        probs = F.softmax(params.float(), dim=-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    mean, log_std = split_gaussian(params)
    noise = torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
    return mean + noise * log_std.exp()


def log_prob(params: torch.Tensor, actions: torch.Tensor, discrete: bool) -> torch.Tensor:
    if discrete:
        return categorical_log_prob(params, actions)
    mean, log_std = split_gaussian(params)
    return gaussian_log_prob(mean, log_std, actions)


def entropy(params: torch.Tensor, discrete: bool) -> torch.Tensor:
    if discrete:
        logp = F.log_softmax(params, dim=-1)
        return -(logp.exp() * logp).sum(-1)
    _, log_std = split_gaussian(params)
    return (log_std + 0.5 * math.log(2 * math.pi * math.e)).sum(-1)
