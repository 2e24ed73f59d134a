"""Weights as plain NumPy arrays: what the learner broadcasts and what actors and checkpoints load."""

from __future__ import annotations

import warnings

import numpy as np
import torch


def weights_to_numpy(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """CPU copies of the parameters: cheap to put in the Ray object store once per version."""
    return {k: v.detach().to("cpu").numpy().copy() for k, v in model.state_dict().items()}


def load_numpy_weights(model: torch.nn.Module, weights: dict[str, np.ndarray]) -> None:
    """Copy `weights` into `model`'s parameters. Arrays from Ray's object store are read-only; `load_state_dict`
    only reads them, so they are wrapped without a copy and torch's warning about writing to them does not apply."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in weights.items()})
