"""The learner's gradient step, one owner for everything between a loss and new weights: the optimisers, each
loss's gradient, their reduction over several learners, the non-finite check, clipping and the step(s).

`GradientStep(total, agent, auxiliary, share)` takes IMPALA's loss (`agent`), each auxiliary loss already
weighted (`learner.auxiliary`; None for one that did not run this update) and their sum (`total`, only checked to
be finite). An auxiliary loss's gradient is taken apart, before the agent's backward: with a shared optimiser it
is added to the agent's, with a separate one its own optimiser steps on it after the agent's step (both
gradients are taken at the weights the update started from). Every norm is computed
once and serves both the non-finite check and clipping. A step whose loss or gradient is NaN/Inf on any rank is
not taken: the result says so (`StepResult.applied`), so the caller can leave everything as it was (`discard`
clears the gradients). `before_clip` (the value head's output-preserving rescale, `ValueHead.rescale_head`) changes
the gradient after the check and before the norm that clips it, where the step is taken; it returns whether it
did, and the norm is taken again only then.

The check is made on the device and nothing is read back: on a GPU every read (`.item()`, `float(tensor)`, `if
tensor`) makes the host wait for all the kernels queued before it, so the update would idle the GPU while the
host queued the next ones. `applied` is a bool tensor; the norms are tensors; Adam (fused) is given the skip as
`found_inf`, the flag torch.amp's GradScaler hands it for an overflowing step: its kernel then leaves parameters
and moments alone and puts the step count back. The caller reads `applied` once, after the whole update is
queued. RMSprop has no such kernel: its step reads the flag on the host first. With several learners the ranks
agree on the flag in their all-reduce, which is read on the host anyway (`DataParallel.reduce_gradients`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Sequence
from typing import Any, NamedTuple

import torch
from torch import nn

from levelray.contracts.config import LearnerConfig
from levelray.contracts.spec import EnvSpec
from levelray.learner.auxiliary import AuxiliaryLoss
from levelray.learner.data_parallel import DataParallel


class StepResult(NamedTuple):
    """Device scalars, none read back: `applied` decided where the gradients are."""

    applied: torch.Tensor  # bool; False: a loss or gradient was not finite (on some rank); nothing changed
    grad_norm: torch.Tensor  # the agent optimiser's gradient norm before clipping (NaN where another rank's
    # loss or gradient was not finite)
    metrics: dict[str, torch.Tensor | float]  # per auxiliary loss that ran: grad_norm_<name>,
    # torso_grad_norm_<name>; and torso_grad_norm_vtrace, the agent loss's part on the torso


def make_optimizer(config: LearnerConfig, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    """`learner.optimizer` over `params`. Adam fused (one kernel over every parameter, CPU and CUDA): 2.5-3x faster a
    step than foreach on the CPU, where PyTorch does not pick it by default (benchmarks/RESULTS.md, "Fused Adam and
    the MiniGrid net's embedding"). RMSprop has no fused kernel: foreach, which PyTorch picks on CUDA only."""
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.learning_rate, eps=config.adam_eps, fused=True)
    if config.optimizer == "rmsprop":
        return torch.optim.RMSprop(params, lr=config.learning_rate, alpha=config.rmsprop_alpha,
                                   eps=config.rmsprop_eps, foreach=True)
    raise ValueError(f"optimizer must be adam or rmsprop, got {config.optimizer!r}")


def torso_parameters(model: nn.Module, spec: EnvSpec, device: torch.device) -> frozenset[int]:
    """The ids of the policy network's parameters that `model.representation` reads (the torso, which the RL loss
    and a representation loss both train), found by autograd from one zero observation, so a loss's gradient on
    the torso is known even where it is stopped before it. Empty for a network without `representation`."""
    if not hasattr(model, "representation"):
        return frozenset()
    obs = torch.zeros((1, *spec.obs_shape), dtype=getattr(torch, spec.obs_dtype), device=device)
    params = list(model.parameters())
    reached = torch.autograd.grad(model.representation(obs).float().sum(), params, allow_unused=True)
    return frozenset(id(p) for p, g in zip(params, reached, strict=True) if g is not None)


class _Auxiliary:
    """What the step keeps of one auxiliary loss: the parameters it trains (the policy network's, then its
    modules'), which of them are the torso, and its separate optimiser (None: shared)."""

    def __init__(self, loss: AuxiliaryLoss, agent: list[nn.Parameter], torso: Collection[int],
                 config: LearnerConfig):
        self.name, self.option, self.grad_clip = loss.name, loss.optimizer_option, loss.grad_clip
        self.params = agent + [p for m in loss.modules for p in m.parameters()]
        self.in_torso = [id(p) in torso for p in self.params]
        self.optimizer = make_optimizer(config, self.params) if loss.optimizer == "separate" else None


class GradientStep:
    """The optimisers and the step; `data_parallel` (set by `Learner.join`) reduces the gradients over ranks."""

    def __init__(self, config: LearnerConfig, model: nn.Module, auxiliary: Sequence[AuxiliaryLoss],
                 torso: Collection[int] = (), before_clip: Callable[[torch.Tensor], bool] | None = None):
        self.clip, self.clip_type = config.grad_clip, config.grad_clip_type
        agent = list(model.parameters())
        # What the agent's optimiser trains and its norm and clip walk every update: the list made once
        # (module.parameters() walks the module tree each call). A shared auxiliary loss's modules are in it,
        # after the policy network, so the optimiser's state is ordered.
        self.trained = agent + [p for aux in auxiliary if aux.optimizer == "shared"
                                for m in aux.modules for p in m.parameters()]
        self.optimizer = make_optimizer(config, self.trained)
        self.auxiliary = [_Auxiliary(aux, agent, torso, config) for aux in auxiliary]
        self._torso = [p for p in agent if id(p) in torso]
        self._optimizers = {"optimizer": self.optimizer, **{f"{aux.name}_optimizer": aux.optimizer
                                                            for aux in self.auxiliary if aux.optimizer is not None}}
        self.before_clip = before_clip
        self.data_parallel: DataParallel | None = None

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Every optimiser by its checkpoint key: `optimizer`, and `<name>_optimizer` of a separate one."""
        return self._optimizers

    def set_learning_rate(self, lr: float) -> None:
        for optimizer in self.optimizers().values():
            for group in optimizer.param_groups:
                group["lr"] = lr

    def __call__(self, total: torch.Tensor, agent: torch.Tensor, auxiliary: Sequence[torch.Tensor | None],
                 share: float, before_clip: Callable[[torch.Tensor], bool] | None = None) -> StepResult:
        """One step on `agent + sum(auxiliary)` (`total`); `share`: this rank's fraction of the trained steps. Taken
        only where `total` and every gradient norm are finite, decided on the device (the module docstring).
        `before_clip`: in place of the one given at construction for this step (APPO's passes: the value head is
        rescaled by the first step taken, `learner.appo`)."""
        before_clip = before_clip if before_clip is not None else self.before_clip
        self.optimizer.zero_grad(set_to_none=True)
        metrics: dict[str, torch.Tensor | float] = {}
        grads = [None if loss is None else self._gradient(aux, loss, metrics)
                 for aux, loss in zip(self.auxiliary, auxiliary, strict=True)]
        agent.backward()  # also for a loss that is not finite: its step is skipped below, without a host read
        if any(g is not None for g in grads):
            metrics["torso_grad_norm_vtrace"] = _norm([p.grad for p in self._torso if p.grad is not None])
        if self.data_parallel is not None:
            finite, grads = self.data_parallel.reduce_gradients(self.trained, share,
                                                                [aux.params for aux in self.auxiliary], grads,
                                                                bool(torch.isfinite(total)))
            if not finite:  # on some rank: known on the host here, as the ranks' all-reduce was read
                return StepResult(torch.zeros((), dtype=torch.bool, device=total.device),
                                  torch.full((), float("nan")), metrics)
            for aux, g in zip(self.auxiliary, grads, strict=True):
                if g is not None:  # a separate optimiser clips by the combined gradient's norm
                    metrics[f"grad_norm_{aux.name}"] = _norm([x for x in g if x is not None])
        for aux, g in zip(self.auxiliary, grads, strict=True):
            if g is not None and aux.optimizer is None:  # shared: the gradient of the sum
                for p, x in zip(aux.params, g, strict=True):
                    if x is not None:
                        p.grad = x if p.grad is None else p.grad + x
        grad_norm = _norm([p.grad for p in self.trained if p.grad is not None])
        applied = _all_finite([total, grad_norm, *(metrics[f"grad_norm_{aux.name}"] for aux in self.auxiliary
                                                   if f"grad_norm_{aux.name}" in metrics)])
        if before_clip is not None and before_clip(applied):  # it rescaled gradients: their norm changed
            grad_norm = _norm([p.grad for p in self.trained if p.grad is not None])
        _clip(self.trained, grad_norm, self.clip, self.clip_type)
        skip = (~applied).float()  # `found_inf`: 1.0 where the step is not taken
        _step(self.optimizer, applied, skip)
        for aux, g in zip(self.auxiliary, grads, strict=True):
            if g is not None and aux.optimizer is not None:
                _separate_step(aux, g, metrics[f"grad_norm_{aux.name}"], applied, skip)
        return StepResult(applied, grad_norm, metrics)

    def discard(self) -> None:
        """Clear the gradients of a step that was not taken."""
        self.optimizer.zero_grad(set_to_none=True)

    @staticmethod
    def _gradient(aux: _Auxiliary, loss: torch.Tensor, metrics: dict[str, torch.Tensor | float]) -> list:
        """The weighted auxiliary `loss`'s gradient over `aux.params` (None where a parameter gets none), taken
        before the agent's backward (the graph is kept: a loss may read the agent's forward pass); adds its norm
        (`grad_norm_<name>`) and its torso's part (`torso_grad_norm_<name>`) to `metrics`."""
        grads = list(torch.autograd.grad(loss, aux.params, allow_unused=True, retain_graph=True))
        torso = [g for g, mine in zip(grads, aux.in_torso, strict=True) if g is not None and mine]
        metrics[f"grad_norm_{aux.name}"] = _norm([g for g in grads if g is not None])
        metrics[f"torso_grad_norm_{aux.name}"] = _norm(torso) if torso else 0.0
        return grads

    # -- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Copies of every optimiser's state (`optimizer.state_dict()` holds live references to its moments)."""
        return {key: copy.deepcopy(optimizer.state_dict()) for key, optimizer in self.optimizers().items()}

    def check_state(self, state: dict[str, Any]) -> None:
        """ValueError for a checkpoint whose optimisers are not these: an auxiliary loss saved with a separate
        optimiser resumed with a shared one, or the other way round."""
        for aux in self.auxiliary:
            saved_separate = state.get(f"{aux.name}_optimizer") is not None
            if saved_separate != (aux.optimizer is not None):
                saved, mine = ("separate", "shared") if saved_separate else ("shared", "separate")
                raise ValueError(f"the checkpoint's {aux.name} loss has a {saved} optimiser, this run's {aux.option} "
                                 f"is {mine}: resume with {aux.option} {saved}")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, optimizer in self.optimizers().items():
            optimizer.load_state_dict(state[key])


def _norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The global L2 norm of `grads`, a scalar on their device (not read back)."""
    return torch.nn.utils.get_total_norm(grads)


def _all_finite(scalars: list[torch.Tensor]) -> torch.Tensor:
    """Whether every one of `scalars` is finite, a bool on the first one's device. `x * 0` is 0 for a finite x and
    NaN for an infinite or NaN one: the first plus the others times 0 is finite exactly when all are (adding a 0
    never overflows), one check where a check each costs four ops."""
    first, *others = scalars
    for x in others:
        first = first + x * 0.0
    return torch.isfinite(first)


def _clip(params: list[nn.Parameter], norm: torch.Tensor, clip: float, by: str) -> None:
    """Clip `params`' gradients by `by` ("norm", "value" or "none") at `clip`; `norm` is their global norm as they
    are now (computed once a step: the non-finite check needs it first). By norm: scale by
    min(1, clip / (norm + 1e-6)), `clip_grad_norm_`'s rule, in float64, on the device."""
    if by == "norm":
        torch.nn.utils.clip_grads_with_norm_(params, clip, norm.to(torch.float64))
    elif by == "value":
        torch.nn.utils.clip_grad_value_(params, clip)


def _step(optimizer: torch.optim.Optimizer, applied: torch.Tensor, skip: torch.Tensor) -> None:
    """`optimizer.step()` where `applied`. A fused optimiser (Adam here) takes the flag as GradScaler gives it,
    `found_inf` (`skip`, float32 1.0 for a skipped step), and reads it on the device; another (RMSprop) waits for
    it on the host."""
    if optimizer.defaults.get("fused"):
        optimizer.found_inf = skip
        try:
            optimizer.step()
        finally:
            optimizer.found_inf = None
    elif bool(applied):
        optimizer.step()


def _separate_step(aux: _Auxiliary, grads: list, norm: torch.Tensor, applied: torch.Tensor,
                   skip: torch.Tensor) -> None:
    """The separate optimiser's step on its loss's gradient `grads` (taken before the agent's step), where
    `applied` (`_step`)."""
    aux.optimizer.zero_grad(set_to_none=True)
    for p, g in zip(aux.params, grads, strict=True):
        p.grad = g
    _clip([p for p in aux.params if p.grad is not None], norm, aux.grad_clip, "norm")
    _step(aux.optimizer, applied, skip)
    aux.optimizer.zero_grad(set_to_none=True)
