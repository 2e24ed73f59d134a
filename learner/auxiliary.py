"""The interface between the learner's update and its auxiliary objectives (Jaderberg et al. 2016's "auxiliary
tasks": losses that train the agent's representation beside the RL loss).

An auxiliary loss is an `AuxiliaryLoss`, built once per learner by a factory from an `AuxiliarySetup` (the class
itself is one). Per update the learner hands it `AuxiliaryInputs` (the batch, the network's outputs on it, and
the data it sampled from replay, if it samples any) and adds `weight × AuxiliaryOutput.loss` to IMPALA's loss;
after every applied step it calls `after_step`. What the loss may set, each with a default a simple loss keeps:

- `modules`: its own networks (heads, a dynamics model), trained beside the policy network; the learner moves
  them to its device, all-reduces their gradients with several learners and checkpoints them by default.
- `optimizer`: "shared" (the learner's optimiser and clip step on the sum of the losses) or "separate" (an
  optimiser of the learner's kind and rate for this loss alone, over the policy network and its modules, clipped
  by norm at `grad_clip`; it steps after the learner's step, on this loss's gradient at the update's starting
  weights).
- `sampler`: a `ReplaySampler` that cuts this loss's batch from replayed unrolls (`learner.replay_feed`, which
  feeds one such loss and inserts each fresh unroll as the sampler's `stored` makes it, with the learner's values
  on it); its output reaches `loss` as `inputs.replayed`, and the update skips the loss when there is none yet (the
  update's metrics then carry `<name>_batch_missing` = 1).
- `replay_priorities`: True where replay's priorities are this loss's (`AuxiliaryOutput.priorities`, one per item
  its sampler cut, folded per unroll), in place of V-trace's TD errors; needs a `sampler`.
- `state_dict` / `load_state_dict`: what a checkpoint keeps of it, under the key `<name>_loss`.

A run names its losses by import path (`learner.auxiliary_losses`, `--auxiliary-loss module:attribute`); `load`
imports them, in whichever process builds the learner (the inline driver, or the Ray learner actor). A built-in
loss that a section of the run config turns on is in `CONFIGURED`, and `run_losses` puts both together.
docs/architecture.md, "Adding an auxiliary loss", has a worked example.
"""

from __future__ import annotations

import importlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch
from torch import nn

from levelray.contracts.config import ConfigError, LearnerConfig, RunConfig
from levelray.contracts.plugins import PluginKind
from levelray.contracts.spec import EnvSpec
from levelray.contracts.trajectory import Unroll
from levelray.learner.device import host_to_device
from levelray.learner.losses import Forward

KEY = "learner.auxiliary_losses"
# The built-in auxiliary losses that a section of the run config turns on, each `module:function`: the function takes
# the run config and returns the factories its section asks for (none while it is off).
CONFIGURED = ("levelray.learner.model_loss:configured_losses",)
_NAME = re.compile(r"[a-z][a-z0-9_]*")


class AuxiliarySetup(NamedTuple):
    """What an auxiliary loss is built from."""

    model: nn.Module  # the policy network, on `device` (its parameters are the ones the RL loss trains)
    spec: EnvSpec
    config: LearnerConfig
    device: torch.device
    seed: int  # the learner's seed, for a generator of the loss's own


class AuxiliaryInputs(NamedTuple):
    """What an auxiliary loss reads in one update."""

    batch: dict[str, Any]  # the update's batch as `Learner.update` got it: NumPy `[T(+1), B, ...]` on the host
    forward: Forward  # the policy network's outputs on `batch` (with gradients), on the learner's device
    weights: torch.Tensor  # [T, B] the steps' weights in the RL loss (mask x replay importance weight)
    replayed: Any  # what this loss's `sampler` cut from replay for this update; None without a sampler
    device: torch.device

    def tensor(self, x: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
        """A host array of the batch on the learner's device (cast there to `dtype`)."""
        return host_to_device(x, self.device, dtype)


class AuxiliaryOutput(NamedTuple):
    """What an auxiliary loss returns for one update (its metrics go into the update's metrics as they are)."""

    loss: torch.Tensor  # a scalar, before `weight`
    metrics: dict[str, float]
    priorities: np.ndarray | None = None  # [n] one per item `sampler` cut (`replay_ids`' order): replay priorities


class ReplaySampler(Protocol):
    """Cuts an auxiliary loss's batch from a replay sample, and says what replay keeps of a fresh unroll for it."""

    def num_unrolls(self) -> int:
        """Unrolls to sample from replay for one batch."""

    def gather(self, sample: dict[str, Any], version: int) -> Any:
        """The loss's batch (`inputs.replayed`) from a replay sample (`ids`, `items`, `weights`) at learner
        `version`."""

    def replay_ids(self, replayed: Any) -> np.ndarray:
        """`[n]` the replay id of the unroll each item of `replayed` (a `gather` output) came from, in the order of
        the loss's `AuxiliaryOutput.priorities`."""

    def stored(self, unroll: Unroll, values: np.ndarray, final_values: np.ndarray, version: int) -> Unroll:
        """A fresh `unroll` as replay keeps it: with what `gather` reads of it later, from the learner's values on
        it in the update at `version` (`values [T+1, K]`, `final_values [T, K]` at truncated steps, reward units)."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


class AuxiliaryLoss(ABC):
    """One auxiliary objective of the learner; subclasses set `name` and write `loss`."""

    name: str = ""  # its term: metrics `grad_norm_<name>`, `torso_grad_norm_<name>`; checkpoint key `<name>_loss`
    weight: float = 1.0  # its weight in the learner's total loss
    optimizer: str = "shared"  # or "separate"
    optimizer_option: str = "optimizer"  # where a user sets `optimizer` (named when a resume disagrees with it)
    grad_clip: float = 40.0  # the separate optimiser's gradient norm clip
    modules: Sequence[nn.Module] = ()
    sampler: ReplaySampler | None = None
    replay_priorities: bool = False  # True: replay's priorities are this loss's (needs a sampler)

    @abstractmethod
    def loss(self, model: nn.Module, inputs: AuxiliaryInputs) -> AuxiliaryOutput:
        """This update's loss on `inputs`, differentiable with respect to `model` and `modules`."""

    def after_step(self, model: nn.Module) -> None:  # noqa: B027  (a hook: most losses need none)
        """Called after every applied gradient step (a target network's schedule, say)."""

    def state_dict(self) -> dict[str, Any]:
        """The loss's checkpoint state: by default its modules' weights, on the CPU."""
        return {"modules": [{k: v.detach().to("cpu", copy=True) for k, v in m.state_dict().items()}
                            for m in self.modules]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for module, saved in zip(self.modules, state["modules"], strict=True):
            module.load_state_dict(saved)


AuxiliaryFactory = Callable[[AuxiliarySetup], AuxiliaryLoss]


def check_losses(losses: Sequence[AuxiliaryLoss]) -> None:
    """ValueError, naming the loss, for what the learner cannot run: a name that is not a lower-case identifier
    or that two losses share (their metrics and checkpoint keys would collide), an optimiser that is neither
    shared nor separate, priorities for replay without a sampler, or a second loss that samples replay
    (`ReplayFeed` feeds one)."""
    seen: set[str] = set()
    for aux in losses:
        if not isinstance(aux, AuxiliaryLoss):
            raise ValueError(f"{KEY}: an auxiliary loss must be a levelray.learner.auxiliary.AuxiliaryLoss, "
                             f"got {type(aux).__name__}")
        if not _NAME.fullmatch(aux.name) or aux.name in seen:
            raise ValueError(f"{KEY}: {type(aux).__name__}.name must be a lower-case identifier that no other "
                             f"auxiliary loss has, got {aux.name!r}")
        seen.add(aux.name)
        if aux.optimizer not in ("shared", "separate"):
            raise ValueError(f"{KEY}: {type(aux).__name__}.optimizer must be shared or separate, got "
                             f"{aux.optimizer!r}")
        if aux.replay_priorities and aux.sampler is None:
            raise ValueError(f"{KEY}: {type(aux).__name__}.replay_priorities needs a sampler: its priorities are "
                             f"those of the items the sampler cut from replay")
    if sum(aux.sampler is not None for aux in losses) > 1:
        raise ValueError(f"{KEY}: at most one auxiliary loss may sample replay (have a sampler)")


# Auxiliary losses are a plug-in kind (`contracts.plugins`) with no built-in of its own: the model loss, which is,
# is turned on by its config section (`CONFIGURED`); a user's loss is named by module:attribute.
AUXILIARY_LOSSES: PluginKind[AuxiliaryFactory] = PluginKind("auxiliary loss", KEY, "--auxiliary-loss",
                                                            noun="class or function")


def load(path: str) -> AuxiliaryFactory:
    """The factory that `path` ("module:attribute", e.g. "my_losses:RewardPrediction") names, imported in this
    process. ConfigError, naming `learner.auxiliary_losses`, for a path that does not import or names no factory."""
    factory = AUXILIARY_LOSSES.load(path)
    if not callable(factory):
        module_name, _, attribute = path.partition(":")
        raise ConfigError(f"{KEY}: {module_name!r} has no class or function {attribute!r} (from {path!r})")
    return factory


def load_all(paths: Sequence[str]) -> list[AuxiliaryFactory]:
    return [load(path) for path in paths]


def run_losses(cfg: RunConfig) -> list[AuxiliaryFactory]:
    """A run's auxiliary losses in the order the learner adds them: the built-ins its config turns on
    (`CONFIGURED`), then those `learner.auxiliary_losses` names, imported in this process."""
    configured = []
    for path in CONFIGURED:
        module_name, _, function = path.partition(":")
        configured.extend(getattr(importlib.import_module(module_name), function)(cfg))
    return [*configured, *load_all(cfg.learner.auxiliary_losses or [])]
