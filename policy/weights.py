"""Weights as plain NumPy arrays: what the learner broadcasts and what actors and checkpoints load."""

from __future__ import annotations

import numpy as np
import torch


def weights_to_numpy(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """CPU copies of the parameters: cheap to put in the Ray object store once per version."""
    return {k: v.detach().to("cpu").numpy().copy() for k, v in model.state_dict().items()}


def load_numpy_weights(model: torch.nn.Module, weights: dict[str, np.ndarray]) -> None:
    model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in weights.items()})
