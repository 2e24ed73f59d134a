"""The MLP's policy and value towers in NumPy, for actors.

An actor evaluates the policy on `K` observations per env step (K = 8 or 16). At that size PyTorch's
per-call dispatch costs more than the arithmetic: the default (64, 64) tower takes ~60 µs per call
at K = 8 through `torch.inference_mode`, ~20 µs as NumPy matmuls on the same float32 weights. The
result is the same function of the same weights (tested against a float64 reference), so this is
purely an actor-side speed-up; the learner keeps the torch model. A recurrent MLP (`learner.lstm_size` > 0)
has no NumPy path: its actors run the torch network with its LSTM core.
"""

from __future__ import annotations

import numpy as np
from torch import nn

from levelray.policy.models import MLP


class NumpyPolicy:
    """`dist_params(obs [K, *obs_shape]) -> [K, P]` for `policy.models.MLP`: the action
    distribution's parameters; `values(obs) -> [K]` its value tower.

    Layers are read from the model's `policy` Sequential (Linear and Tanh, in order) and re-read by
    `refresh()` after the model's weights change."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.refresh()

    @staticmethod
    def supports(model: nn.Module) -> bool:
        """The feed-forward MLP alone: its policy tower reads the flattened observation. Other models' `policy`
        may also be a Linear/Tanh Sequential (MiniGridNet's), but it reads features that only the torch model
        computes; a recurrent MLP's heads read its LSTM core."""
        towers = [getattr(model, "policy", None), getattr(model, "value", None)]
        return isinstance(model, MLP) and model.core is None and all(
            isinstance(tower, nn.Sequential) and len(tower) > 0 and isinstance(tower[0], nn.Linear)
            and all(isinstance(m, (nn.Linear, nn.Tanh)) for m in tower) for tower in towers)

    def refresh(self) -> None:
        """Copy the current weights out of the torch model (transposed, so a layer is `x @ W + b`)."""
        self.layers = _layers(self.model.policy)
        self.value_layers = _layers(self.model.value)
        log_std = getattr(self.model, "log_std", None)
        self.log_std = None if log_std is None else log_std.detach().cpu().numpy().astype(np.float32, copy=True)

    def values(self, obs: np.ndarray) -> np.ndarray:
        """The value tower's V(x) `[K]` (what the actors score levels with)."""
        return _apply(self.value_layers, obs)[:, 0]

    def dist_params(self, obs: np.ndarray) -> np.ndarray:
        x = _apply(self.layers, obs)
        if self.log_std is not None:
            x = np.concatenate([x, np.broadcast_to(self.log_std, x.shape)], axis=1)
        return x


def _layers(tower: nn.Sequential) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """A Linear/Tanh tower's layers: `(W [in, out], b [out])` float32 for a Linear, None for a tanh."""
    layers = []
    for module in tower:
        if isinstance(module, nn.Linear):
            w = np.ascontiguousarray(module.weight.detach().cpu().numpy().T, dtype=np.float32)
            layers.append((w, module.bias.detach().cpu().numpy().astype(np.float32, copy=True)))
        else:
            layers.append(None)  # tanh
    return layers


def _apply(layers: list[tuple[np.ndarray, np.ndarray] | None], obs: np.ndarray) -> np.ndarray:
    x = np.asarray(obs).reshape(len(obs), -1).astype(np.float32, copy=False)
    for layer in layers:
        if layer is None:
            np.tanh(x, out=x)
        else:
            w, b = layer
            x = x @ w
            x += b
    return x
