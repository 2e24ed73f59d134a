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
(`learner.lstm_precision` bf16, `LSTMCore.unroll_dtype`), where oneDNN's bf16 LSTM takes 15-35% off the maze
update's CPU time on a CPU with AVX512-BF16; a single step (an actor's) stays float32.

`core_state` `[2, B, N]` is (h, c) stacked: what an unroll carries at its first step (`contracts.trajectory`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from levelray.contracts.spec import EnvSpec
from levelray.policy.lanes import LanePlan, plan_lanes


def core_inputs(actions: np.ndarray, rewards: np.ndarray, spec: EnvSpec) -> np.ndarray:
    """The core's extra input for the step after each of `actions [..., (D)]`, `rewards [...]`: float32
    `[..., spec.core_input_size]`, the action one-hot (or its vector) then the reward clipped to [-1, 1]."""
    rewards = np.clip(np.asarray(rewards, dtype=np.float32), -1.0, 1.0)[..., None]
    if spec.discrete:
        action_part = np.eye(spec.num_actions, dtype=np.float32)[np.asarray(actions, dtype=np.int64)]
    else:
        action_part = np.asarray(actions, dtype=np.float32)
    return np.concatenate([action_part, rewards], axis=-1)


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """`x @ weight.T + bias` by oneDNN's linear (the op Inductor's CPU code calls), without autograd."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _has_onednn_linear() -> bool:
    """Whether this torch has oneDNN's linear and it runs here."""
    try:
        x = torch.ones(1, 2)
        return bool(torch.backends.mkldnn.is_available() and _onednn_linear(x, x, torch.zeros(1)).item() == 2.0)
    except (AttributeError, RuntimeError):
        return False


_ONEDNN_LINEAR = _has_onednn_linear()


def _one_chunk(weights: list[torch.Tensor]) -> list[torch.Tensor]:
    """`weights` (`w_ih [4N, D]`, `w_hh [4N, N]`, `b_ih [4N]`, `b_hh [4N]`) as views of one buffer in that order,
    cuDNN's layout of a one-layer LSTM's weights, which cuDNN reads in place (tests/test_gpu.py checks it on a GPU);
    weights laid out otherwise it copies into such a buffer itself on every `torch.lstm` call, with a warning each
    run ("RNN module weights are not part of single contiguous chunk of memory"). One copy an unroll instead of one
    a fused call, and gradients flow back through it to the cell's parameters."""
    flat = torch.cat([w.reshape(-1) for w in weights])
    return [part.view_as(w) for part, w in zip(flat.split([w.numel() for w in weights]), weights, strict=True)]


class LSTMCore(nn.Module):
    """`forward(features [T, B, F], extra [T, B, E], starts [T, B] bool, state [2, B, N])` -> `(h [T, B, N],
    c [T, B, N])`, the state after each step. Where `starts[t]` is set, step t begins an episode: the state it
    continues from and its extra input are zeroed first. In float32.

    A reset makes a step depend on its own flags, which one fused LSTM call over a sequence cannot take, so the
    unroll runs as lanes (`policy.lanes`): each env's episode fragments side by side, each from its own initial
    state, in a few fused `torch.lstm` calls (oneDNN's fused LSTM on a CPU: the input products of all its steps as
    one matrix product, the weight gradients as one each). Measured on this project's CPU (LSTM-256, B = 32, one
    thread, forward and backward): fused calls 1.7-2.5x faster than a step loop of `LSTMCell`, and at 1% of steps
    starting an episode lanes 1.6x faster than a call per stretch between starts in bf16, 1.3x in fp32
    (benchmarks/RESULTS.md, "The learner at compiled speed"). An actor's single step (T = 1) is a cell step
    (`_step`): the fused call's setup costs more than one step.

    `c` is the cell state after each step only for T = 1; over an unroll a fused call keeps the cell state of its
    last step alone, so `c` holds it where the plan's `cells` asked for it (the steps a truncated episode
    continues from) and is NaN elsewhere.

    `unroll_dtype`: what the fused calls compute in, float32 unless a learner sets bf16
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
                state: torch.Tensor, plan: LanePlan | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """`plan`: `plan_lanes(starts, cells)` where the caller has the starts on the host (None: from `starts`,
        keeping no cell state)."""
        with torch.autocast(features.device.type, enabled=False):
            keep = (~starts.bool()).float().unsqueeze(-1)  # [T, B, 1]
            x = torch.cat([features.float(), extra.float() * keep], dim=-1)  # [T, B, F + E]
            h, c = state[0].float() * keep[0], state[1].float() * keep[0]
            if x.shape[0] == 1:
                h, c = self._step(x[0], h, c)
                return h[None], c[None]
            if plan is None:
                plan = plan_lanes(starts.cpu().numpy() if isinstance(starts, torch.Tensor) else starts)
            return self._lanes(x, plan, h, c)

    def _step(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step, `x [B, F + E]`, `h, c [B, N]` -> `(h, c)`. Without gradients on a CPU (an actor's step), the
        gates' two products go to oneDNN: torch's float32 `addmm` goes to MKL, whose code on AMD's AVX-512 CPUs
        is its AVX2 path, where oneDNN's runs at 1.4-1.6x its rate (LSTM-256 at 16 and 32 envs: 117 and 183
        against 167 and 297 µs for the products; the same float32 function to rounding). The weights are read
        as they are at each call, so whatever changes them in place (an optimiser, a load) is seen. Otherwise
        `LSTMCell`."""
        if torch.is_grad_enabled() or x.device.type != "cpu" or not _ONEDNN_LINEAR:
            return self.cell(x, (h, c))
        cell = self.cell
        gates = _onednn_linear(x, cell.weight_ih, cell.bias_ih).add_(_onednn_linear(h, cell.weight_hh, cell.bias_hh))
        i, f, g, o = gates.chunk(4, dim=1)  # LSTMCell's order
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c

    def _lanes(self, x: torch.Tensor, plan: LanePlan, h: torch.Tensor, c: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """`x [T, B, F + E]` through the plan's fused calls from the state `h, c [B, N]`; see the class doc."""
        T, B, D = x.shape
        cell, dtype, device = self.cell, self.unroll_dtype, x.device
        weights = [w.to(dtype) for w in (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)]
        if device.type == "cuda":
            weights = _one_chunk(weights)
        index = {name: torch.from_numpy(getattr(plan, name)).to(device)
                 for name in ("gather", "scatter", "initial", "cell_rows", "cell_sources")}
        rows = torch.cat([x.reshape(T * B, D), x.new_zeros(1, D)]).to(dtype).index_select(0, index["gather"])
        lane_h, lane_c = (torch.cat([s, s.new_zeros(1, self.size)]).to(dtype).index_select(0, index["initial"])
                          for s in (h, c))
        # one split, not a slice per call: each slice's backward fills and adds a gradient of all the rows
        chunk_rows = rows.split([length * lanes for length, lanes in plan.chunks])
        outputs, finals = [], []
        for (length, lanes), chunk in zip(plan.chunks, chunk_rows, strict=True):
            out, lane_h, lane_c = torch.lstm(
                chunk.view(length, lanes, D),
                (lane_h[None, :lanes], lane_c[None, :lanes]), weights, has_biases=True, num_layers=1,
                dropout=0.0, train=self.training, bidirectional=False, batch_first=False)
            lane_h, lane_c = lane_h[0], lane_c[0]
            outputs.append(out.reshape(length * lanes, self.size))
            finals.append(lane_c)
        h = torch.cat(outputs).index_select(0, index["scatter"]).view(T, B, self.size).float()
        if not len(plan.cell_rows):  # NaN everywhere: a view, no buffer filled on every pass
            return h, torch.full((1, 1, self.size), float("nan"), device=device).expand(T, B, self.size)
        kept = torch.cat(finals).index_select(0, index["cell_sources"]).float()
        cs = torch.full((T * B, self.size), float("nan"), device=device).index_copy(0, index["cell_rows"], kept)
        return h, cs.view(T, B, self.size)


def unroll(model: nn.Module, obs: torch.Tensor, extra: torch.Tensor, starts: torch.Tensor, state: torch.Tensor,
           plan: LanePlan | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A recurrent network (`model.core` set) over `T` steps of `B` envs: `obs [T, B, ...]`, `extra [T, B, E]`,
    `starts [T, B]`, `state [2, B, N]` (h, c before step 0) -> `(dist_params [T, B, P], values [T, B],
    h [T, B, N], c [T, B, N])` (`c` where the plan keeps it: `LSTMCore`). The torso and the heads see all `T * B`
    observations at once; only the core goes through time. `plan`: `policy.lanes.plan_lanes(starts, cells)`,
    where the caller has the starts on the host (a GPU's starts are read back otherwise)."""
    T, B = obs.shape[:2]
    features = model.torso(obs.reshape(T * B, *obs.shape[2:]))
    h, c = model.core(features.view(T, B, -1), extra, starts, state, plan)
    dist_params, values = model.heads(h.reshape(T * B, -1))
    return dist_params.view(T, B, -1), values.view(T, B), h, c
