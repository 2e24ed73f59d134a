"""A `Learner`'s checkpoint state: the policy network, both optimisers, the version and counters, torch's
generator, PopArt's statistics and the model loss's modules, target network and sequence sampler.

Loading checks first that the checkpoint's optimisers are this learner's, so a refused checkpoint changes
nothing; value normalisation switched on or off between save and resume is reconciled by rescaling the value
head, so its outputs in reward units stay the same.
"""

from __future__ import annotations

import copy
from typing import Any, Protocol

import torch

from levelray.learner.value_normalization import PopArt, preserve_outputs_, value_output_layer


class Learner(Protocol):
    """What of `learner.Learner` a checkpoint reads and restores (a protocol: that module imports this one)."""

    config: Any
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    model_optimizer: torch.optim.Optimizer | None
    version: int
    samples_trained: int
    value_norm: PopArt | None
    muzero: Any
    sequences: Any


def state_dict(learner: Learner) -> dict[str, Any]:
    """Copies of everything `load_state_dict` restores (optimizer.state_dict() returns live references to Adam's
    moment buffers)."""
    return {
        "model": {k: v.detach().to("cpu", copy=True) for k, v in learner.model.state_dict().items()},
        "optimizer": copy.deepcopy(learner.optimizer.state_dict()),
        "model_optimizer": (copy.deepcopy(learner.model_optimizer.state_dict())
                            if learner.model_optimizer is not None else None),
        "version": learner.version,
        "samples_trained": learner.samples_trained,
        "torch_rng": torch.get_rng_state(),
        "value_normalization": learner.value_norm.state_dict() if learner.value_norm is not None else None,
        "model_loss": _model_loss_state(learner),
    }


def load_state_dict(learner: Learner, state: dict[str, Any]) -> None:
    _check_optimizers(learner, state)
    learner.model.load_state_dict(state["model"])
    learner.optimizer.load_state_dict(state["optimizer"])
    if learner.model_optimizer is not None:
        learner.model_optimizer.load_state_dict(state["model_optimizer"])
    learner.version = int(state["version"])
    learner.samples_trained = int(state.get("samples_trained", 0))
    if "torch_rng" in state:
        torch.set_rng_state(state["torch_rng"].cpu())
    _load_value_normalization(learner, state.get("value_normalization"))
    if learner.muzero is not None and state.get("model_loss") is not None:
        learner.muzero.load_state_dict(state["model_loss"])
        learner.sequences.load_state_dict(state["model_loss"]["rng"])


def _check_optimizers(learner: Learner, state: dict[str, Any]) -> None:
    """ValueError, before anything is loaded, for a checkpoint whose optimisers are not this learner's:
    a model loss with a shared optimiser resumed as separate, or the other way round."""
    saved_separate = state.get("model_optimizer") is not None
    if learner.muzero is None or saved_separate == (learner.model_optimizer is not None):
        return
    saved, mine = ("separate", "shared") if saved_separate else ("shared", "separate")
    raise ValueError(f"the checkpoint's model loss has a {saved} optimiser, this run's model_loss.optimizer is "
                     f"{mine}: resume with --model-optimizer {saved}")


def _model_loss_state(learner: Learner) -> dict[str, Any] | None:
    """The model loss's modules, target network and schedule, and its sequence sampler's generator."""
    if learner.muzero is None:
        return None
    return {**learner.muzero.state_dict(), "rng": learner.sequences.state_dict()}


def _load_value_normalization(learner: Learner, saved: dict | None) -> None:
    """Statistics from the checkpoint; a checkpoint and a learner that disagree on value normalisation
    are reconciled by rescaling the value head, so its outputs in reward units stay the same."""
    if learner.value_norm is not None:
        learner.value_norm = PopArt(learner.config.popart_beta)  # identity statistics if the checkpoint has none
        if saved is not None:
            learner.value_norm.load_state_dict(saved)
        return
    if saved is not None:  # trained normalised, resumed without: fold the statistics into the head
        stats = PopArt(learner.config.popart_beta)
        stats.load_state_dict(saved)
        preserve_outputs_(value_output_layer(learner.model), (stats.mu, stats.sigma), (0.0, 1.0), grads=False)
