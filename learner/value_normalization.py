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
owner of both halves: the statistics `update` moved are the ones `rescale_` and `undo` start from. All of it runs
on the learner's device and reads nothing back (the skip is decided there too, see `optimisation`): the host copy
of the statistics comes with the update's one read (`ValueHead.settle`).

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
later ones are an exponential moving average with step size beta. Statistics live in float64 (a tensor on the
learner's device; Python floats in a checkpoint); before the first update they are the identity (`mu = 0`,
`sigma = 1`).
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
    """Running moments of value targets; `normalize` / `unnormalize` between reward units and the head's.

    The statistics are one float64 tensor `[4]` (mu, nu, count, sigma) on the device of the values they scale, so
    that an update moves them, normalises with them and rescales the head by them without the host waiting for the
    device (on a GPU, each read is a wait for every kernel queued before it). `mu`, `nu`, `count` and `sigma` read
    them on the host: a copy made at the first read after they moved, or handed over by `settle`, which the learner
    calls with its one read of each update."""

    def __init__(self, beta: float, sigma_min: float = SIGMA_MIN, sigma_max: float = SIGMA_MAX,
                 device: torch.device | str = "cpu"):
        if not 0.0 < beta <= 1.0:
            raise ValueError(f"beta must be in (0, 1], got {beta}")
        self.beta = float(beta)
        self.sigma_min, self.sigma_max = float(sigma_min), float(sigma_max)
        self._log_decay = math.log1p(-self.beta) if self.beta < 1.0 else None
        # the rescale's factors for a skipped step (`rescale_`), made here: on a GPU, a copy to the device
        self._keep = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64, device=device)
        self._set(*self._statistics(0.0, 1.0, 0, torch.device(device)))
        self._before = self._now()  # the statistics before the last `update`

    def _statistics(self, mu: float, nu: float, count: int, device: torch.device
                    ) -> tuple[torch.Tensor, tuple[float, float, int, float]]:
        """Host values as the statistics tensor on `device`, with their host copy."""
        host = (mu, nu, count, _sigma(mu, nu, self.sigma_min, self.sigma_max))
        return torch.tensor([mu, nu, float(count), host[3]], dtype=torch.float64, device=device), host

    def _set(self, stats: torch.Tensor, host: tuple[float, float, int, float] | None,
             mu: torch.Tensor | None = None, sigma: torch.Tensor | None = None) -> None:
        """New statistics (never written in place: a metric read later still holds the values it was given), with
        views of their mu and sigma (made here unless given)."""
        self._stats, self._host = stats, host
        self._mu, self._sigma = (stats[0], stats[3]) if mu is None else (mu, sigma)

    def _now(self) -> tuple[torch.Tensor, tuple[float, float, int, float] | None, torch.Tensor, torch.Tensor]:
        """The statistics as they are, for `_set` to put back."""
        return self._stats, self._host, self._mu, self._sigma

    def _read(self) -> tuple[float, float, int, float]:
        if self._host is None:
            mu, nu, count, sigma = self._stats.tolist()
            self._host = (mu, nu, int(count), sigma)
        return self._host

    @property
    def mu(self) -> float:
        return self._read()[0]

    @mu.setter
    def mu(self, value: float) -> None:
        self._assign(mu=float(value))

    @property
    def nu(self) -> float:
        return self._read()[1]

    @nu.setter
    def nu(self, value: float) -> None:
        self._assign(nu=float(value))

    @property
    def count(self) -> int:
        return self._read()[2]

    @count.setter
    def count(self, value: int) -> None:
        self._assign(count=int(value))

    @property
    def sigma(self) -> float:
        return self._read()[3]

    def _assign(self, **values: float) -> None:
        """Statistics set from the host (`mu`, `nu`, `count` by name; sigma follows)."""
        mu, nu, count, _ = self._read()
        now = {"mu": mu, "nu": nu, "count": count, **values}
        self._set(*self._statistics(now["mu"], now["nu"], now["count"], self._stats.device))

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self._mu) / self._sigma

    def unnormalize(self, x: torch.Tensor) -> torch.Tensor:
        return x * self._sigma + self._mu

    def update(self, targets: torch.Tensor, mask: torch.Tensor | None = None,
               reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> tuple[float, float]:
        """`move`, and the previous `(mu, sigma)` on the host, which `preserve_outputs_` takes."""
        old = (self.mu, self.sigma)
        self.move(targets, mask, reduce)
        return old

    @torch.no_grad()
    def move(self, targets: torch.Tensor, mask: torch.Tensor | None = None,
             reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> None:
        """Move the moments towards the mean and mean square of `targets` (where `mask` is true), on their device:
        nothing is read back. `reduce` sums `[sum, sum of squares, count]` over several learners, whose moments then
        move on all their targets. No target (an empty mask) moves nothing, the count included."""
        self._before = self._now()
        x = targets.detach().to(torch.float64)
        if mask is None:
            n = torch.full((), x.numel(), dtype=torch.float64, device=x.device)
        else:
            keep = mask if mask.dtype == torch.bool else mask.bool()
            x, n = torch.where(keep, x, 0.0), keep.sum(dtype=torch.float64)
        sums = torch.stack([x.sum(), x.square().sum(), n])
        if reduce is not None:
            sums = reduce(sums)
        stats = self._stats if self._stats.device == x.device else self._stats.to(x.device)
        n, old = sums[2], stats[:2]  # [mu, nu] before
        seen = n > 0
        count = stats[2] + seen
        step = 1.0
        if self._log_decay is not None:  # beta / (1 - (1 - beta)^t), the denominator without cancellation
            decay = torch.expm1(count * self._log_decay)  # (1 - beta)^t - 1
            step = torch.full_like(decay, -self.beta) / decay
        moments = torch.where(seen, old + step * (sums[:2] / n - old), old)  # [mu, nu]
        sigma = (moments[1] - moments[0].square()).clamp(min=0.0).sqrt().clamp(self.sigma_min, self.sigma_max)
        self._set(torch.cat([moments, count.view(1), sigma.view(1)]), None)

    def rescale_(self, layer: nn.Linear, applied: torch.Tensor | None = None) -> None:
        """POP for the last `update`: rescale `layer` (the value head's output layer) and its gradients in place,
        so that its outputs in reward units under the new statistics are those under the statistics before.
        `applied` (a bool on the device): where false the step is skipped (`undo` follows) and nothing changes;
        decided there, without a read."""
        _, _, mu0, sigma0 = self._before
        factors = torch.stack([sigma0, self._sigma, mu0 - self._mu])  # old sigma, new sigma, shift
        if applied is not None:
            if self._keep.device != factors.device:
                self._keep = self._keep.to(factors.device)
            factors = torch.where(applied, factors, self._keep)
        _rescale_(layer, *factors.unbind())

    def undo(self) -> None:
        """The statistics as they were before the last `update` (an update that was skipped moves nothing)."""
        self._set(*self._before)

    def state_dict(self) -> dict[str, Any]:
        mu, nu, count, _ = self._read()
        return {"mu": mu, "nu": nu, "count": count, "beta": self.beta}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._set(*self._statistics(float(state["mu"]), float(state["nu"]), int(state["count"]),
                                    self._stats.device))
        self._before = self._now()


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
    _rescale_(layer, s0, s1, mu0 - mu1, grads=grads)


@torch.no_grad()
def _rescale_(layer: nn.Linear, s0: float | torch.Tensor, s1: float | torch.Tensor, shift: float | torch.Tensor, *,
              grads: bool = True) -> None:
    """`preserve_outputs_` from sigma `s0` to `s1`, `shift = old_mu - new_mu`: `W' = W s0 / s1`,
    `b' = (b s0 + shift) / s1` in float64, gradients times `s1 / s0`. Python floats, or float64 scalars on the
    layer's device (PopArt's own: nothing is read on the host); equal scales and no shift change nothing."""
    w, b = layer.weight, layer.bias
    w.copy_((w.to(torch.float64) * (s0 / s1)).to(w.dtype))
    b.copy_(((b.to(torch.float64) * s0 + shift) / s1).to(b.dtype))
    if grads:
        ratio = s1 / s0
        for p in (w, b):
            if p.grad is not None:
                p.grad.mul_(ratio)


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
    reward units are `mu + sigma * v` for the head's output `v`. Its `mu` and `sigma` are host numbers; what the update
    calls works on the learner's device and reads nothing back, except `settle` (given the update's one read)."""

    @property
    def mu(self) -> float: ...

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

    def rescale_head(self, applied: torch.Tensor) -> bool: ...

    def statistics(self) -> list[torch.Tensor]:
        """The device tensors the head keeps a host copy of: the learner reads them in the same copy as whether the
        step was taken, and hands them to `settle`."""

    def settle(self, applied: bool, read: list[float]) -> None:
        """After the update's one read: `applied`, the statistics moved and `read` (the `statistics()` copied to the
        host) is their host copy; not applied (a skipped step), they are put back as they were."""

    def metrics(self) -> dict[str, float | torch.Tensor]: ...

    def publish(self, weights: dict[str, np.ndarray]) -> None: ...

    def state_dict(self) -> dict[str, Any] | None: ...

    def load_state_dict(self, saved: dict[str, Any] | None) -> None: ...


class NormalisedHead(PopArt):
    """PopArt over `model`'s value output layer (`value_output_layer`): the head outputs normalised values."""

    def __init__(self, model: nn.Module, beta: float, advantage_scale: str = "sigma"):
        self.model = model
        self.layer = value_output_layer(model)
        self.advantage_scale = advantage_scale  # `learner.advantage_scale`: sigma or rms (`normalize_advantages`)
        super().__init__(beta, device=self.layer.weight.device)  # the statistics where the values are

    @property
    def value_scale(self) -> ValueScaleFn:
        return self._scale

    def _scale(self) -> tuple[float, float]:
        return self.sigma, self.mu

    def normalize_advantages(self, advantages: torch.Tensor) -> torch.Tensor:
        """Policy-gradient advantages `[T, B]` divided by sigma, the spread of the value targets (PopArt-IMPALA), or
        with `advantage_scale` rms by their root mean square `sqrt(nu) = sqrt(mu^2 + sigma^2)`: sigma shrinks towards
        0 when every return is the same (CartPole held to its time limit: every target near 1 / (1 - discount)),
        which weighs each TD error 1 / sigma more as the agent improves; the RMS keeps the scale of the returns."""
        if self.advantage_scale == "rms":
            return advantages / self._stats[1].clamp(min=self.sigma_min ** 2).sqrt().to(advantages.dtype)
        return advantages / self._sigma

    def update_statistics(self, targets: torch.Tensor, weights: torch.Tensor,
                          reduce: Callable[[torch.Tensor], torch.Tensor] | None) -> None:
        """ART: the moments move onto the value targets `[T, B]` of the trained steps (`weights [T, B]` > 0),
        summed over several learners by `reduce`; on the device (`move`)."""
        self.move(targets, weights > 0, reduce)

    def rescale_head(self, applied: torch.Tensor) -> bool:
        """POP for the last `update_statistics`: the layer and its gradients rescaled (`rescale_`) where `applied`;
        True, as the gradients' norm has changed with them."""
        self.rescale_(self.layer, applied)
        return True

    def statistics(self) -> list[torch.Tensor]:
        return [self._stats]

    def settle(self, applied: bool, read: list[float]) -> None:
        if not applied:
            self.undo()
            return
        mu, nu, count, sigma = read
        self._host = (mu, nu, int(count), sigma)

    def metrics(self) -> dict[str, float | torch.Tensor]:
        """mu and sigma after this update's move, as device scalars (read with the rest of the metrics)."""
        return {"value_norm_mu": self._mu, "value_norm_sigma": self._sigma}

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

    def rescale_head(self, applied: torch.Tensor) -> bool:
        """Nothing rescaled: False, the gradients are as they were."""
        return False

    def statistics(self) -> list[torch.Tensor]:
        return []

    def settle(self, applied: bool, read: list[float]) -> None:
        """Nothing moved, nothing to put back."""

    def metrics(self) -> dict[str, float | torch.Tensor]:
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
    if not config.value_normalization:
        return RewardUnitsHead(model)
    return NormalisedHead(model, config.popart_beta, config.advantage_scale)
