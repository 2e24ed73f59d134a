"""An auxiliary loss's target network: slow copies of the agent's network and of the loss's own module.

Targets read from a network that is not the one being trained (a latent model's reanalysed values, or its
consistency term's projections) do not chase their own updates. Every `period` learner updates the copies move
towards the online weights, `theta' <- (1 - tau) theta' + tau theta` (tau = 1: a plain copy); buffers (e.g.
normalisation statistics) are copied, not averaged.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn


class TargetNetwork:
    """`net` and `module`: frozen copies of the online network and the loss's module, updated by `after_update`."""

    def __init__(self, net: nn.Module, module: nn.Module, *, period: int, tau: float):
        self.net = copy.deepcopy(net).requires_grad_(False)
        self.module = copy.deepcopy(module).requires_grad_(False)
        self.period = period
        self.tau = tau
        self.updates = 0

    @torch.no_grad()
    def after_update(self, net: nn.Module, module: nn.Module) -> None:
        """Count one learner update; every `period`-th moves the copies towards `net` and `module`."""
        self.updates += 1
        if self.updates % self.period:
            return
        for online, target in ((net, self.net), (module, self.module)):
            for p, tp in zip(online.parameters(), target.parameters(), strict=True):
                tp.mul_(1.0 - self.tau).add_(p.detach(), alpha=self.tau)
            for b, tb in zip(online.buffers(), target.buffers(), strict=True):
                tb.copy_(b)

    def state_dict(self) -> dict[str, Any]:
        """The copies' weights on the CPU and the update count (keys as in its loss's checkpoint)."""
        def cpu(m: nn.Module) -> dict[str, torch.Tensor]:
            return {k: v.detach().to("cpu", copy=True) for k, v in m.state_dict().items()}

        return {"target_net": cpu(self.net), "target_module": cpu(self.module), "updates": self.updates}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["target_net"])
        self.module.load_state_dict(state["target_module"])
        self.updates = int(state["updates"])
