"""PopArt value normalisation (van Hasselt et al. 2016, "Learning values across many orders of magnitude";
Hessel et al. 2019, "Multi-task deep reinforcement learning with PopArt").

The value head predicts a normalised value `v`; the value in reward units is `V = mu + sigma * v`, where
`mu` and `nu` are running first and second moments of the value targets and `sigma = sqrt(nu - mu^2)`,
clamped to [1e-4, 1e6]. Per update (`Learner.update`):

1. V-trace runs on unnormalised values `mu + sigma * v` (targets `v_s` in reward units);
2. ART: the moments move towards the batch's targets with step size beta (`update`);
3. the value loss compares normalised targets `(v_s - mu') / sigma'` with the normalised prediction of the
   rescaled head, and the policy-gradient advantages are divided by `sigma'` (as PopArt-IMPALA does);
4. POP (`rescale_`, once the gradient is known to be finite and before it is clipped): the head's last linear
   layer is rescaled, `W' = W sigma / sigma'` and `b' = (sigma b + mu - mu') / sigma'` (`preserve_outputs_`), so
   every unnormalised output is unchanged by the new statistics, and its gradient with it.

An update that is skipped (a non-finite loss or gradient) puts the statistics back (`undo`). `PopArt` is the one
owner of both halves: the statistics `update` moved are the ones `rescale_` and `undo` start from.

The learner holds its value head's scale as one `ValueHead` (`value_head`), which it calls the same way whether
normalisation is on or off, so its update has no branch on it: `NormalisedHead` is PopArt bound to the network's
value output layer; `RewardUnitsHead`, without normalisation, is the identity (mu 0, sigma 1), whose methods return
their input or do nothing, so the update costs what it would without the calls.

Why: CartPole's discounted targets grow to ~100 while Adam moves each weight by about lr per step.
Without normalisation the tanh value tower reaches those outputs by saturating its last hidden layer (measured: 98% of
units at |h| > 0.99 after ~300 updates at lr 1e-3): a constant output, explained variance 0 from then on,
and advantages carrying the whole target spread. With PopArt the head's targets stay near unit scale.

The step size is bias-corrected like Adam's moments: the t-th update uses `beta / (1 - (1 - beta)^t)`, so
the first batch sets the statistics (instead of pulling them from the arbitrary start 0 and 1 by beta) and
later ones are an exponential moving average with step size beta. Statistics live in float64 (Python
floats); before the first update they are the identity (`mu = 0`, `sigma = 1`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from levelray.contracts.config import LearnerConfig

SIGMA_MIN, SIGMA_MAX = 1e-4, 1e6
# (sigma, mu), read at each call: what the actors sharing the learner's network scale its values by
ValueScaleFn = Callable[[], tuple[float, float]]


class PopArt:
    """Running moments of value targets; `normalize` / `unnormalize` between reward units and the head's."""

    def __init__(self, beta: float, sigma_min: float = SIGMA_MIN, sigma_max: float = SIGMA_MAX):
        if not 0.0 < beta <= 1.0:
            raise ValueError(f"beta must be in (0, 1], got {beta}")
        self.beta = float(beta)
        self.sigma_min, self.sigma_max = float(sigma_min), float(sigma_max)
        self.mu, self.nu, self.count = 0.0, 1.0, 0
        self._before = (self.mu, self.nu, self.count)  # the statistics before the last `update`

    @property
    def sigma(self) -> float:
        return _sigma(self.mu, self.nu, self.sigma_min, self.sigma_max)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mu) / self.sigma

    def unnormalize(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.sigma + self.mu

    @torch.no_grad()
    def update(self, targets: torch.Tensor, mask: torch.Tensor | None = None,
               reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[float, float]:
        """Move the moments towards the mean and mean square of `targets` (where `mask` is true). `reduce` sums
        `[sum, sum of squares, count]` over several learners, whose moments then move on all their targets.
        Returns the previous `(mu, sigma)`, which `preserve_outputs_` needs."""
        old = (self.mu, self.sigma)
        self._before = (self.mu, self.nu, self.count)
        x = targets.detach().to(torch.float64)
        if mask is not None:
            x = x[mask.bool()]
        if reduce is not None:
            total, total_sq, n = reduce(torch.stack([x.sum(), x.square().sum(), x.new_tensor(x.numel())])).tolist()
            mean, mean_sq = (total / n, total_sq / n) if n else (0.0, 0.0)
        else:
            n = x.numel()
            mean, mean_sq = (x.mean().item(), x.square().mean().item()) if n else (0.0, 0.0)
        if n == 0:
            return old
        self.count += 1
        # beta / (1 - (1 - beta)^t), the denominator without cancellation for small beta
        step = self.beta / -math.expm1(self.count * math.log1p(-self.beta)) if self.beta < 1.0 else 1.0
        self.mu += step * (mean - self.mu)
        self.nu += step * (mean_sq - self.nu)
        return old

    def rescale_(self, layer: nn.Linear) -> None:
        """POP for the last `update`: rescale `layer` (the value head's output layer) and its gradients in place,
        so that its outputs in reward units under the new statistics are those under the statistics before."""
        mu, nu, _count = self._before
        preserve_outputs_(layer, (mu, _sigma(mu, nu, self.sigma_min, self.sigma_max)), (self.mu, self.sigma))

    def undo(self) -> None:
        """The statistics as they were before the last `update` (an update that was skipped moves nothing)."""
        self.mu, self.nu, self.count = self._before

    def state_dict(self) -> dict[str, Any]:
        return {"mu": self.mu, "nu": self.nu, "count": self.count, "beta": self.beta}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.mu, self.nu, self.count = float(state["mu"]), float(state["nu"]), int(state["count"])
        self._before = (self.mu, self.nu, self.count)


IDENTITY = {"mu": 0.0, "nu": 1.0, "count": 0}  # the statistics before any update: V = v


def _sigma(mu: float, nu: float, lo: float = SIGMA_MIN, hi: float = SIGMA_MAX) -> float:
    return min(max(math.sqrt(max(nu - mu * mu, 0.0)), lo), hi)


@torch.no_grad()
def preserve_outputs_(
    layer: nn.Linear, old: tuple[float, float], new: tuple[float, float], *, grads: bool = True
) -> None:
    """Rescale `layer` in place so that `new_mu + new_sigma * layer(h) == old_mu + old_sigma * layer_before(h)`
    for every input h. With `grads`, existing gradients become gradients with respect to the rescaled
    parameters (multiplied by new_sigma / old_sigma): the loss computed before the rescale through the
    expression `(old_sigma * v + old_mu - new_mu) / new_sigma` then gives exactly the rescaled head's gradient."""
    (mu0, s0), (mu1, s1) = old, new
    if (mu0, s0) == (mu1, s1):
        return
    w, b = layer.weight, layer.bias
    w.copy_((w.to(torch.float64) * (s0 / s1)).to(w.dtype))
    b.copy_(((b.to(torch.float64) * s0 + (mu0 - mu1)) / s1).to(b.dtype))
    if grads:
        for p in (w, b):
            if p.grad is not None:
                p.grad.mul_(s1 / s0)


def value_output_layer(model: nn.Module) -> nn.Linear:
    """The linear layer that outputs the value: `model.value` itself, or the last layer of that Sequential."""
    head = getattr(model, "value", None)
    if isinstance(head, nn.Sequential):
        head = head[-1]
    if not isinstance(head, nn.Linear) or head.out_features != 1:
        raise ValueError(f"value normalisation needs a model whose value head ends in a Linear(…, 1), got {head!r}")
    return head


def weights_in_reward_units(model: nn.Module, weights: dict[str, np.ndarray], mu: float, sigma: float) -> None:
    """Rewrite, in place, the value layer of `weights` (NumPy copies of `model`'s state dict) so that it outputs
    `mu + sigma * v`: `W' = sigma W`, `b' = sigma b + mu` (computed in float64, stored in the layer's dtype).

    The weights a learner publishes are what actors act and score levels with: an actor has no PopArt statistics,
    and a level's score (GAE over the episode's rewards and the acting network's values) needs values in reward
    units, as the learner's own V-trace uses them."""
    layer = value_output_layer(model)
    name = next(n for n, m in model.named_modules() if m is layer)
    w, b = weights[f"{name}.weight"], weights[f"{name}.bias"]
    weights[f"{name}.weight"] = (w.astype(np.float64) * sigma).astype(w.dtype)
    weights[f"{name}.bias"] = (b.astype(np.float64) * sigma + mu).astype(b.dtype)


class ValueHead(Protocol):
    """The scale the policy network's value output is in, and everything the learner does with it: values in
    reward units are `mu + sigma * v` for the head's output `v`."""

    mu: float

    @property
    def sigma(self) -> float: ...

    @property
    def value_scale(self) -> ValueScaleFn | None:
        """What actors acting with the learner's own network scale its values by; None: they are reward units."""

    def normalize(self, x: torch.Tensor) -> torch.Tensor: ...

    def unnormalize(self, x: torch.Tensor) -> torch.Tensor: ...

    def normalize_advantages(self, advantages: torch.Tensor) -> torch.Tensor: ...

    def update_statistics(self, targets: torch.Tensor, weights: torch.Tensor,
                          reduce: Callable[[torch.Tensor], torch.Tensor] | None) -> None: ...

    def rescale_head(self) -> bool: ...

    def undo(self) -> None: ...

    def metrics(self) -> dict[str, float]: ...

    def publish(self, weights: dict[str, np.ndarray]) -> None: ...

    def state_dict(self) -> dict[str, Any] | None: ...

    def load_state_dict(self, saved: dict[str, Any] | None) -> None: ...


class NormalisedHead(PopArt):
    """PopArt over `model`'s value output layer (`value_output_layer`): the head outputs normalised values."""

    def __init__(self, model: nn.Module, beta: float):
        super().__init__(beta)
        self.model = model
        self.layer = value_output_layer(model)

    @property
    def value_scale(self) -> ValueScaleFn:
        return self._scale

    def _scale(self) -> tuple[float, float]:
        return self.sigma, self.mu

    def normalize_advantages(self, advantages: torch.Tensor) -> torch.Tensor:
        """Policy-gradient advantages `[T, B]` in the head's units, as PopArt-IMPALA scales them."""
        return advantages / self.sigma

    def update_statistics(self, targets: torch.Tensor, weights: torch.Tensor,
                          reduce: Callable[[torch.Tensor], torch.Tensor] | None) -> None:
        """ART: the moments move onto the value targets `[T, B]` of the trained steps (`weights [T, B]` > 0),
        summed over several learners by `reduce`."""
        self.update(targets, weights > 0, reduce)

    def rescale_head(self) -> bool:
        """POP for the last `update_statistics`: the layer and its gradients rescaled (`rescale_`); True, as the
        gradients' norm has changed with them."""
        self.rescale_(self.layer)
        return True

    def metrics(self) -> dict[str, float]:
        return {"value_norm_mu": self.mu, "value_norm_sigma": self.sigma}

    def publish(self, weights: dict[str, np.ndarray]) -> None:
        """The value layer of `weights` (NumPy copies of the network's) in reward units (`weights_in_reward_units`)."""
        weights_in_reward_units(self.model, weights, self.mu, self.sigma)

    def load_state_dict(self, saved: dict[str, Any] | None) -> None:
        """The saved statistics, in place (the gradient step's rescale holds this object); a checkpoint trained
        without normalisation (None) starts them at the identity, which its head's outputs are in."""
        super().load_state_dict(saved if saved is not None else IDENTITY)


class RewardUnitsHead:
    """No value normalisation: the head outputs reward units, its scale is the identity and nothing moves."""

    mu = 0.0
    sigma = 1.0
    value_scale = None

    def __init__(self, model: nn.Module):
        self.model = model

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def unnormalize(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def normalize_advantages(self, advantages: torch.Tensor) -> torch.Tensor:
        return advantages

    def update_statistics(self, targets: torch.Tensor, weights: torch.Tensor,
                          reduce: Callable[[torch.Tensor], torch.Tensor] | None) -> None:
        """Nothing to move (and nothing to reduce over several learners)."""

    def rescale_head(self) -> bool:
        """Nothing rescaled: False, the gradients are as they were."""
        return False

    def undo(self) -> None:
        """Nothing moved."""

    def metrics(self) -> dict[str, float]:
        return {}

    def publish(self, weights: dict[str, np.ndarray]) -> None:
        """The weights are in reward units already."""

    def state_dict(self) -> None:
        return None  # the checkpoint's `value_normalization`: None says the head outputs reward units

    def load_state_dict(self, saved: dict[str, Any] | None) -> None:
        """A checkpoint trained with normalisation: its statistics folded into the value layer, so the head's
        outputs in reward units stay the same; None (trained without): nothing to do."""
        if saved is not None:
            mu, nu = float(saved["mu"]), float(saved["nu"])
            preserve_outputs_(value_output_layer(self.model), (mu, _sigma(mu, nu)), (0.0, 1.0), grads=False)


def value_head(model: nn.Module, config: LearnerConfig) -> ValueHead:
    """The scale of `model`'s value head under `config`: PopArt with `learner.value_normalization`, else the
    identity."""
    return NormalisedHead(model, config.popart_beta) if config.value_normalization else RewardUnitsHead(model)
