"""The LSTM core of a recurrent policy (`learner.lstm_size` N > 0), between a network's torso and its heads.

As IMPALA's agent (Espeholt et al. 2018, scalable_agent's `Agent._torso`): at step t the core reads the torso's
features of x_t, the previous action a_{t-1} (one-hot for discrete actions, the action vector for continuous
ones) and the previous reward r_{t-1} clipped to [-1, 1] (the reward the learner trains on; Atari's is already
clipped), `core_inputs` below. At an episode's first step the state (h, c) and those extra inputs are zero.

The core runs in float32 whatever the network's precision: under bf16 autocast the torso and heads compute in
bf16, the core's products do not. Measured on this project's CPU (LSTM-256, T = 20, B = 8, random inputs, fresh
weights): with the torso in bf16 and the core in float32 the core's output h stays within 1-3e-4 of an all-float32
unroll; with the core in bf16 too, within 7-9e-4, 3-9x further, and a recurrence carries its error into every
later step, where the torso's error stays in its own step. A learner may still ask for a bf16 core over its unrolls
(`learner.lstm_precision` bf16, `LSTMCore.unroll_dtype`), where oneDNN's bf16 LSTM takes 6-18% off the maze
update's CPU time on a CPU with AVX512-BF16; a single step (an actor's) stays float32.

`core_state` `[2, B, N]` is (h, c) stacked: what an unroll carries at its first step (`contracts.trajectory`).
"""

from __future__ import annotations

import itertools

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
    continues from and its extra input are zeroed first. In float32.

    A reset makes a step depend on its own flags, which one fused LSTM call over a sequence cannot take, so the
    unroll is cut into segments at every step where an episode starts in some env (`segment_bounds`), and each
    segment is one `torch.lstm` call (oneDNN's fused LSTM on a CPU: the input products of all its steps as one
    matrix product, the weight gradients as one each) from the previous segment's last state, zeroed where its
    first step starts an episode. Measured on this project's CPU (LSTM-256, B = 32, one thread, forward and
    backward): T = 21 in one segment 2.5x faster than a step loop of `LSTMCell`, T = 257 1.7x, and with a segment
    every one or two steps still no slower than the loop (benchmarks/RESULTS.md, "The learner at compiled speed").
    An actor's single step (T = 1) keeps the `LSTMCell` call: the fused call's setup costs more than one step.

    `c` is the cell state after step t only where step t ends a segment (the last step, and every step before an
    episode starts in some env: what an unroll and a truncated episode continue from); elsewhere a fused segment
    keeps no cell state and `c` is NaN there.

    `unroll_dtype`: what the fused segments compute in, float32 unless a learner sets bf16
    (`learner.lstm_precision`): the weights, inputs and state are cast for the call (the parameters and their
    gradients stay float32) and `h`, `c` come back as float32."""

    def __init__(self, feature_dim: int, extra_dim: int, size: int):
        super().__init__()
        self.size = size
        self.cell = nn.LSTMCell(feature_dim + extra_dim, size)
        self.unroll_dtype = torch.float32

    def initial_state(self, batch: int, device: torch.device | None = None) -> torch.Tensor:
        """Zeros `[2, batch, N]`."""
        return torch.zeros(2, batch, self.size, device=device)

    def forward(self, features: torch.Tensor, extra: torch.Tensor, starts: torch.Tensor,
                state: torch.Tensor, bounds: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """`bounds`: `segment_bounds(starts)` where the caller has the starts on the host (None: from `starts`)."""
        with torch.autocast(features.device.type, enabled=False):
            keep = (~starts.bool()).float().unsqueeze(-1)  # [T, B, 1]
            x = torch.cat([features.float(), extra.float() * keep], dim=-1)  # [T, B, F + E]
            h, c = state[0].float(), state[1].float()
            if x.shape[0] == 1:
                h, c = self.cell(x[0], (h * keep[0], c * keep[0]))
                return h[None], c[None]
            return self._segments(x, keep, segment_bounds(starts) if bounds is None else bounds, h, c)

    def _segments(self, x: torch.Tensor, keep: torch.Tensor, bounds: list[int], h: torch.Tensor, c: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """One fused LSTM call per segment `[bounds[i], bounds[i+1])` of `x [T, B, F + E]`; see the class doc."""
        cell, dtype = self.cell, self.unroll_dtype
        weights = [w.to(dtype) for w in (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)]
        x, keep, h, c = x.to(dtype), keep.to(dtype), h.to(dtype), c.to(dtype)
        hs = []
        cs = torch.full((x.shape[0], *c.shape), float("nan"), device=x.device)
        for start, end in itertools.pairwise(bounds):
            first = keep[start]
            out, h, c = torch.lstm(x[start:end], ((h * first)[None], (c * first)[None]), weights,
                                   has_biases=True, num_layers=1, dropout=0.0, train=self.training,
                                   bidirectional=False, batch_first=False)
            h, c = h[0], c[0]
            hs.append(out)
            cs[end - 1] = c.float()
        return (torch.cat(hs) if len(hs) > 1 else hs[0]).float(), cs


def segment_bounds(starts: torch.Tensor | np.ndarray) -> list[int]:
    """`[0, t_1, ..., T]`: the steps `t_i > 0` where an episode starts in some env of `starts [T, B]`, between the
    unroll's ends. From a NumPy array on the host as it is; a tensor on a GPU is read back (the host waits)."""
    if isinstance(starts, torch.Tensor):
        inside = (torch.nonzero(starts[1:].any(dim=1)).flatten() + 1).tolist()
    else:
        inside = (np.flatnonzero(np.asarray(starts)[1:].any(axis=1)) + 1).tolist()
    return [0, *inside, len(starts)]


def unroll(model: nn.Module, obs: torch.Tensor, extra: torch.Tensor, starts: torch.Tensor, state: torch.Tensor,
           bounds: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A recurrent network (`model.core` set) over `T` steps of `B` envs: `obs [T, B, ...]`, `extra [T, B, E]`,
    `starts [T, B]`, `state [2, B, N]` (h, c before step 0) -> `(dist_params [T, B, P], values [T, B],
    h [T, B, N], c [T, B, N])` (`c` where a segment ends: `LSTMCore`). The torso and the heads see all `T * B`
    observations at once; only the core goes through time. `bounds`: `segment_bounds(starts)`, where the caller
    has them from the host (a GPU's starts are read back otherwise)."""
    T, B = obs.shape[:2]
    features = model.torso(obs.reshape(T * B, *obs.shape[2:]))
    h, c = model.core(features.view(T, B, -1), extra, starts, state, bounds)
    dist_params, values = model.heads(h.reshape(T * B, -1))
    return dist_params.view(T, B, -1), values.view(T, B), h, c
