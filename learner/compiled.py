"""`learner.compile`: the policy network's forward pass in the update through torch.compile.

A feed-forward network is compiled whole. A recurrent one (`learner.lstm_size` > 0) is run by
`policy.recurrent.unroll`, which calls its torso on all `[T * B]` observations, its core over time and its heads on
all `[T * B]` outputs apart: the torso and the heads are compiled (fixed shapes per batch, `dynamic=False`), the core
is not. The core runs the unroll's episode fragments as lanes in a few fused LSTM calls (`policy.recurrent.LSTMCore`,
`policy.lanes`): their number and shapes change with every batch, which would make a compiled core recompile, and
the fused call is oneDNN's kernel either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn


class CompiledUnroll(NamedTuple):
    """What `policy.recurrent.unroll` calls of a recurrent network: `torso(obs [N, ...]) -> [N, latent_dim]` and
    `heads(x [N, lstm_size]) -> (dist_params [N, P], value [N])` compiled, `core` the network's own."""

    torso: Callable[[torch.Tensor], torch.Tensor]
    core: nn.Module
    heads: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def compile_network(model: nn.Module) -> nn.Module | CompiledUnroll:
    """`model` through torch.compile with fixed shapes (feed-forward), or its torso and heads (recurrent). The
    compiled callables share `model`'s parameters: a step on them is a step on `model`."""
    if getattr(model, "core", None) is None:
        return torch.compile(model, dynamic=False)
    return CompiledUnroll(torch.compile(model.torso, dynamic=False), model.core,
                          torch.compile(model.heads, dynamic=False))
