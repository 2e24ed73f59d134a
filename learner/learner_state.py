"""A `Learner`'s checkpoint state: the policy network, every optimiser, the version and counters, torch's
generator, the value head's statistics (`value_normalization`: PopArt's, None without it) and each auxiliary
loss's own state (its modules, and whatever else it keeps: a target network, a sampler's generator), under
`<name>_loss`.

Loading checks first that the checkpoint's optimisers are this learner's, so a refused checkpoint changes
nothing; value normalisation switched on or off between save and resume is reconciled by the value head
(`ValueHead.load_state_dict` rescales it), so its outputs in reward units stay the same.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from levelray.learner.auxiliary import AuxiliaryLoss
from levelray.learner.optimisation import GradientStep
from levelray.learner.value_normalization import ValueHead


class Learner(Protocol):
    """What of `learner.Learner` a checkpoint reads and restores (a protocol: that module imports this one)."""

    model: torch.nn.Module
    gradient_step: GradientStep
    version: int
    samples_trained: int
    value_norm: ValueHead
    auxiliary: tuple[AuxiliaryLoss, ...]


def state_dict(learner: Learner) -> dict[str, Any]:
    """Copies of everything `load_state_dict` restores."""
    return {
        "model": {k: v.detach().to("cpu", copy=True) for k, v in learner.model.state_dict().items()},
        **learner.gradient_step.state_dict(),
        "version": learner.version,
        "samples_trained": learner.samples_trained,
        "torch_rng": torch.get_rng_state(),
        "value_normalization": learner.value_norm.state_dict(),
        **{f"{aux.name}_loss": aux.state_dict() for aux in learner.auxiliary},
    }


def load_state_dict(learner: Learner, state: dict[str, Any]) -> None:
    learner.gradient_step.check_state(state)
    learner.model.load_state_dict(state["model"])
    learner.gradient_step.load_state_dict(state)
    learner.version = int(state["version"])
    learner.samples_trained = int(state.get("samples_trained", 0))
    if "torch_rng" in state:
        torch.set_rng_state(state["torch_rng"].cpu())
    learner.value_norm.load_state_dict(state.get("value_normalization"))
    for aux in learner.auxiliary:  # a checkpoint from before the loss was on leaves it fresh
        if state.get(f"{aux.name}_loss") is not None:
            aux.load_state_dict(state[f"{aux.name}_loss"])
