"""The LSTM core of a recurrent policy (`learner.lstm_size` N > 0), between a network's torso and its heads.

As IMPALA's agent (Espeholt et al. 2018, scalable_agent's `Agent._torso`): at step t the core reads the torso's
features of x_t, the previous action a_{t-1} (one-hot for discrete actions, the action vector for continuous
ones) and the previous reward r_{t-1} clipped to [-1, 1] (the reward the learner trains on; Atari's is already
clipped), `core_inputs` below. At an episode's first step the state (h, c) and those extra inputs are zero.

The core runs in float32 whatever the network's precision: under bf16 autocast the torso and heads compute in
bf16, the core's products do not. Measured on this project's CPU (LSTM-256, T = 20, B = 8, random inputs, fresh
weights): with the torso in bf16 and the core in float32 the core's output h stays within 1-3e-4 of an all-float32
unroll; with the core in bf16 too, within 7-9e-4, 3-9x further, and a recurrence carries its error into every
later step, where the torso's error stays in its own step.

`core_state` `[2, B, N]` is (h, c) stacked: what an unroll carries at its first step (`contracts.trajectory`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from levelray.contracts.spec import EnvSpec


def core_inputs(actions: np.ndarray, rewards: np.ndarray, spec: EnvSpec) -> np.ndarray:
    """The core's extra input for the step after each of `actions [..., (D)]`, `rewards [...]`: float32
    `[..., spec.core_input_size]`, the action one-hot (or its vector) then the reward clipped to [-1, 1]."""
    rewards = np.clip(np.asarray(rewards, dtype=np.float32), -1.0, 1.0)[..., None]
    if spec.discrete:
        action_part = np.eye(spec.num_actions, dtype=np.float32)[np.asarray(actions, dtype=np.int64)]
    else:
        action_part = np.asarray(actions, dtype=np.float32)
    return np.concatenate([action_part, rewards], axis=-1)


class LSTMCore(nn.Module):
    """`forward(features [T, B, F], extra [T, B, E], starts [T, B] bool, state [2, B, N])` -> `(h [T, B, N],
    c [T, B, N])`, the state after each step. Where `starts[t]` is set, step t begins an episode: the state it
    continues from and its extra input are zeroed first. One `LSTMCell` step per t (the resets make every step
    depend on its own flags), in float32."""

    def __init__(self, feature_dim: int, extra_dim: int, size: int):
        super().__init__()
        self.size = size
        self.cell = nn.LSTMCell(feature_dim + extra_dim, size)

    def initial_state(self, batch: int, device: torch.device | None = None) -> torch.Tensor:
        """Zeros `[2, batch, N]`."""
        return torch.zeros(2, batch, self.size, device=device)

    def forward(self, features: torch.Tensor, extra: torch.Tensor, starts: torch.Tensor,
                state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.autocast(features.device.type, enabled=False):
            keep = (~starts.bool()).float().unsqueeze(-1)  # [T, B, 1]
            x = torch.cat([features.float(), extra.float() * keep], dim=-1)  # [T, B, F + E]
            h, c = state[0].float(), state[1].float()
            hs, cs = [], []
            for t in range(x.shape[0]):
                h, c = self.cell(x[t], (h * keep[t], c * keep[t]))
                hs.append(h)
                cs.append(c)
            return torch.stack(hs), torch.stack(cs)


def unroll(model: nn.Module, obs: torch.Tensor, extra: torch.Tensor, starts: torch.Tensor, state: torch.Tensor
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A recurrent network (`model.core` set) over `T` steps of `B` envs: `obs [T, B, ...]`, `extra [T, B, E]`,
    `starts [T, B]`, `state [2, B, N]` (h, c before step 0) -> `(dist_params [T, B, P], values [T, B],
    h [T, B, N], c [T, B, N])`. The torso and the heads see all `T * B` observations at once; only the core
    steps through time."""
    T, B = obs.shape[:2]
    features = model.torso(obs.reshape(T * B, *obs.shape[2:]))
    h, c = model.core(features.view(T, B, -1), extra, starts, state)
    dist_params, values = model.heads(h.reshape(T * B, -1))
    return dist_params.view(T, B, -1), values.view(T, B), h, c
