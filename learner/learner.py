"""The IMPALA learner: one V-trace update per batch of unrolls, and a version per update.

`Learner.update(batch)` reads top to bottom as four steps, each a method of one screen:

1. `_forward`: the network on every observation, `dist_params [T+1, B, P]` and `values [T+1, B]` (reward
   units), plus V(final observation) at truncated steps; a recurrent network (`learner.lstm_size` > 0) is
   unrolled over the T+1 steps from the batch's `core_state`, reset where an episode starts inside the unroll
   (`_recurrent_inputs`);
2. `_targets`: V-trace returns and policy-gradient advantages, in float32 whatever the network's precision
   (they are regression targets and importance ratios, where half precision would lose the small differences);
   the value head's statistics (`value_normalization`: PopArt, or the identity without it) then move onto them;
3. `_loss_terms`: IMPALA's named scalar terms (policy, value, entropy, action bound, total), and each auxiliary
   loss's (`learner.auxiliary`: a representation loss, say), which reads the same batch and forward pass;
4. one gradient step (`optimisation.GradientStep`: backward, the all-reduce with several learners, the non-finite
   check, the value head's output-preserving rescale, clipping, the optimiser step(s)), then each auxiliary loss's
   `after_step`.

With `learner.algorithm appo`, steps 3 and 4 are APPO's passes instead (`appo.Appo.passes`): PPO's clipped surrogate
on the V-trace advantages of step 2, `learner.appo.epochs` passes over the batch in `learner.appo.minibatches` steps,
the log-probabilities and values recomputed at each; their steps settle as one update.

It returns an `UpdateResult`: the metrics and the per-step `StepOutputs` that the caller turns into replay
priorities (and replay's stored values for a loss that samples it). No Ray here: `LearnerCore` drives this class
for both the Ray learner actor and the inline backend.

The host reads one thing back from the device per update, at its end (`settle`): whether the step was taken,
with the value head's statistics in the same copy. `step`, everything before, reads nothing (on a GPU the host
queues the whole update without waiting for it): the non-finite check is made on the device
(`optimisation.GradientStep`), PopArt's statistics live there, and the metrics and outputs stay there until
something reads them (`results`: a report reads one update's metrics in many; replay reads three outputs).
The one read is what a skipped step needs: `NonFiniteUpdate` is raised and the version kept, on the host.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from levelray.contracts.config import LearnerConfig
from levelray.contracts.spec import EnvSpec
from levelray.learner import learner_state, vtrace
from levelray.learner.appo import Appo, PassTargets
from levelray.learner.auxiliary import (
    AuxiliaryFactory,
    AuxiliaryInputs,
    AuxiliaryOutput,
    AuxiliarySetup,
    check_losses,
)
from levelray.learner.compiled import compile_network
from levelray.learner.data_parallel import DataParallel
from levelray.learner.device import host_to_device, pick_device
from levelray.learner.losses import Forward, impala_losses
from levelray.learner.optimisation import GradientStep, StepResult, torso_parameters
from levelray.learner.results import LATER, Metrics, StepOutputs, UpdateResult, on_host
from levelray.learner.value_normalization import value_head
from levelray.policy import distributions
from levelray.policy.lanes import LanePlan, plan_lanes
from levelray.policy.models import build_model, resolve_model_kind
from levelray.policy.precision import autocast, compute_dtype, lstm_unroll_dtype
from levelray.policy.recurrent import core_inputs
from levelray.policy.recurrent import unroll as recurrent_unroll
from levelray.policy.weights import weights_to_numpy

log = logging.getLogger(__name__)

__all__ = ["Forward", "Learner", "NonFiniteUpdate", "PendingUpdate", "StepOutputs", "UpdateResult"]


class NonFiniteUpdate(ArithmeticError):
    """An update whose loss or gradient was NaN/Inf: it was skipped and the model is unchanged."""


class PendingUpdate(NamedTuple):
    """An update as `Learner.step` queued it, before the host has read anything of it (`Learner.settle`)."""

    step: StepResult | None  # None: no step (a batch wholly masked)
    union: int  # the trained steps of all ranks' batches
    total: torch.Tensor  # the loss stepped on
    terms: dict[str, torch.Tensor]  # IMPALA's terms (`Learner._loss_terms`)
    aux: list[AuxiliaryOutput | None]  # each auxiliary loss's output
    metrics: Metrics
    outputs: StepOutputs


def behaviour_kl(log_rhos: torch.Tensor, weights: torch.Tensor) -> float:
    """The mean over the trained steps (`weights [T, B]` > 0) of log mu(a_t) - log pi(a_t) = -log_rhos: a
    sample estimate of KL(mu || pi), how far the learner's policy pi has moved from the behaviour policy mu that
    acted (0 at policy lag 0, up to float error). `rho_mean` cannot show it: under mu, E[pi/mu] = 1 whatever
    the two policies are. 0.0 when no step is trained."""
    trained = weights > 0
    if not bool(trained.any()):
        return 0.0
    return float(-log_rhos[trained].double().mean())


def _any_truncated(batch: dict[str, Any]) -> bool | None:
    """Whether a step of `batch` is truncated (and not terminated), from its host arrays (nothing read from the
    device); None where the flags are tensors: V-trace reads them then."""
    terminated, truncated = batch["terminated"], batch["truncated"]
    if isinstance(terminated, torch.Tensor) or isinstance(truncated, torch.Tensor):
        return None
    return bool(np.any(np.asarray(truncated, dtype=bool) & ~np.asarray(terminated, dtype=bool)))


# A ratio counts as clipped where rho-bar cuts it by more than this fraction (`_target_statistics`).
CLIP_TOLERANCE = 1e-3


@torch.no_grad()
def _target_statistics(values: torch.Tensor, vs: torch.Tensor, log_rhos: torch.Tensor, weights: torch.Tensor,
                       clip_rho: float) -> dict[str, Any]:
    """The metrics an update's `Metrics` computes when first read, from its values V(x_t) and V-trace targets
    `vs [T, B]` (reward units), `log_rhos` and the steps' `weights [T, B]`: how well the values explain the
    targets, the importance ratios and how far the policy is from the behaviour policy (`behaviour_kl`).

    `rho_clipped_fraction` counts the steps whose ratio exceeds rho-bar by more than `CLIP_TOLERANCE`: at policy
    lag 0 the ratio is 1 up to the rounding between the actor's forward pass and the learner's (~1e-6), which a
    plain `rho > rho-bar` would count as clipped on about every other step; clipping it changes nothing."""
    rhos = log_rhos.exp()
    var_vs = vs.var()
    explained = 1.0 - (vs - values).var() / var_vs if var_vs > 1e-8 else torch.tensor(0.0)
    clipped = rhos > clip_rho * (1.0 + CLIP_TOLERANCE)
    return {"rho_mean": rhos.mean(), "rho_clipped_fraction": clipped.float().mean(),
            "explained_variance": explained, "value_mean": values.mean(),
            "behaviour_kl": behaviour_kl(log_rhos, weights)}


class Learner:
    """The policy network, its gradient step (optimisers) and value head's scale, and the auxiliary losses that
    the factories in `auxiliary` build from an `AuxiliarySetup` (`learner.auxiliary`; `LearnerCore` passes the
    run config's)."""

    def __init__(self, spec: EnvSpec, config: LearnerConfig, *, seed: int = 0,
                 auxiliary: Sequence[AuxiliaryFactory] = (), data_parallel: DataParallel | None = None):
        self.spec = spec
        self.config = config
        torch.manual_seed(seed)
        self.device = pick_device(config.device)
        log.info(
            "learner on %s%s",
            self.device,
            f" ({torch.cuda.get_device_name(self.device)})" if self.device.type == "cuda" else "",
        )
        self.model = build_model(spec, config.model, tuple(config.hidden_sizes), config.lstm_size).to(self.device)
        # bf16 or fp32 inside the policy network (policy/precision.py); its outputs are float32 either way
        self.compute_dtype = compute_dtype(config.precision, self.device, resolve_model_kind(spec, config.model))
        if self.model.core is not None:  # the core's own arithmetic over unrolls (policy/recurrent.py)
            self.model.core.unroll_dtype = lstm_unroll_dtype(config.lstm_precision, self.device)
        # `learner.compile`: the update's forward pass through torch.compile (a recurrent network's torso and heads,
        # its core eager: `compiled.compile_network`); `self.model` (the same parameters) stays what checkpoints,
        # weights and the auxiliary losses read.
        self._net = compile_network(self.model) if config.compile else self.model
        if not spec.discrete:  # the box the env clips actions to (`losses.impala_losses`' action_bound term)
            self._action_low = torch.tensor(spec.action_low, dtype=torch.float32, device=self.device)
            self._action_high = torch.tensor(spec.action_high, dtype=torch.float32, device=self.device)
        # Auxiliary losses' modules are not part of `self.model`: actors load exactly the policy network's weights.
        setup = AuxiliarySetup(self.model, spec, config, self.device, seed)
        self.auxiliary = tuple(factory(setup) for factory in auxiliary)
        check_losses(self.auxiliary)
        for aux in self.auxiliary:
            for module in aux.modules:
                module.to(self.device)
        # The scale the value head outputs (learner/value_normalization.py): PopArt's normalised values, or reward
        # units without value normalisation (the identity).
        self.value_norm = value_head(self.model, config)
        torso = torso_parameters(self.model, spec, self.device) if self.auxiliary else ()
        self.gradient_step = GradientStep(config, self.model, self.auxiliary, torso,
                                          before_clip=self.value_norm.rescale_head)
        # `learner.algorithm appo`: PPO's passes over each batch in place of IMPALA's one step (learner/appo.py)
        self.appo = Appo(config.appo, seed) if config.algorithm == "appo" else None
        self.version = 0
        self.samples_trained = 0
        self.data_parallel: DataParallel | None = None
        if data_parallel is not None:
            self.join(data_parallel)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The agent's optimiser (over the policy network and the shared auxiliary losses' modules)."""
        return self.gradient_step.optimizer

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Every optimiser by its checkpoint key (`optimizer`, `<name>_optimizer` of a separate auxiliary loss)."""
        return self.gradient_step.optimizers()

    def parameters(self) -> list[torch.nn.Parameter]:
        """Everything the optimisers train: the policy network, then each auxiliary loss's modules."""
        return list(self.model.parameters()) + [p for aux in self.auxiliary for m in aux.modules
                                                for p in m.parameters()]

    def join(self, data_parallel: DataParallel) -> None:
        """Train as one rank of several (learner/data_parallel.py) from now on: the model becomes rank 0's,
        and every later step is taken on all ranks alike. Ranks that restored one checkpoint hold the same
        optimiser state already; fresh ones have none yet."""
        self.data_parallel = self.gradient_step.data_parallel = data_parallel
        data_parallel.broadcast_parameters(self.parameters())

    def set_learning_rate(self, lr: float) -> None:
        self.gradient_step.set_learning_rate(lr)

    def _tensor(self, x: np.ndarray | torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        return host_to_device(x, self.device, dtype)

    # -- the update ------------------------------------------------------------------------------
    def update(self, batch: dict[str, Any], replayed: Any = None) -> UpdateResult:
        """One gradient step on a stacked batch (`contracts.trajectory.stack_unrolls`: `obs [T+1, B, ...]`,
        `actions`, `rewards`, `terminated`, `truncated [T, B]`, `behaviour_params [T, B, P]`, optional
        `final_obs`/`final_obs_index`), with optional `sample_weights [B]` (replay importance weights) and
        `mask [T, B]` (the steps that carry gradient: each loss is the mean over them, PopArt moves on their
        targets only, `samples_trained` counts them; a batch with none is no update at all, and keeps the
        version). `replayed`: what the auxiliary loss that samples replay (if any) cut from it for this
        update; without it that loss sits this update out. Raises `NonFiniteUpdate`, changing nothing, when a
        loss or the gradient is not finite. `step` then `settle`: one read from the device, at the end."""
        return self.settle(self.step(batch, replayed))

    def step(self, batch: dict[str, Any], replayed: Any = None) -> PendingUpdate:
        """`update` up to its one read: every kernel of it queued, nothing read back from the device."""
        self.model.train()
        forward = self._forward(batch)
        vt, log_rhos = self._targets(batch, forward)
        weights = self._weights(batch, vt)
        trained = weights.numel() if batch.get("mask") is None else int(np.count_nonzero(batch["mask"]))
        union = trained if self.data_parallel is None else self.data_parallel.union_count(trained)
        reduce = None if self.data_parallel is None else self.data_parallel.sum  # several learners: over all ranks
        if union:  # onto this batch's targets, before the loss (no target moves nothing: nothing to move)
            self.value_norm.update_statistics(vt.vs, weights, reduce)
        aux = self._auxiliary_losses(AuxiliaryInputs(batch, forward, weights, replayed, self.device))
        weighted = [None if out is None else loss.weight * out.loss
                    for loss, out in zip(self.auxiliary, aux, strict=True)]
        if self.appo is not None:  # APPO: PPO's passes over the batch, their steps as one (learner/appo.py)
            terms, total, step = self.appo.passes(self, batch, forward, vt, weights, weighted, union)
        else:
            terms = self._loss_terms(forward, vt, weights)
            total = terms["total"]
            for term in weighted:
                total = total if term is None else total + term
            # a batch wholly masked (Robust PLR: only new levels) changes nothing and is no new version
            step = self.gradient_step(total, terms["total"], weighted, trained / union) if union else None
        metrics = self._metrics(forward, vt, log_rhos, weights, total, terms, step).updated({
            **{k: v for out in aux if out is not None for k, v in out.metrics.items()},
            **(step.metrics if step is not None else {}), "behaviour_kl": LATER, "trained_steps": trained})
        priorities = next((out.priorities for loss, out in zip(self.auxiliary, aux, strict=True)
                           if out is not None and loss.sampler is not None), None)
        return PendingUpdate(step, union, total, terms, aux, metrics, self._outputs(forward, vt, priorities))

    def settle(self, pending: PendingUpdate) -> UpdateResult:
        """The host's one read of an update `step` queued: whether its gradient step was taken, and the value head's
        statistics in the same copy (its host copy of them, for the actors and the weights published). Taken: the
        auxiliary losses' `after_step`, a new version; not: `NonFiniteUpdate` (the model, optimisers and version
        as they were, the statistics put back)."""
        step = pending.step
        if step is not None:
            applied, *read = torch.cat([step.applied.view(1).to(torch.float64),
                                        *self.value_norm.statistics()]).tolist()
            self.value_norm.settle(bool(applied), read)
            if not applied:
                self.gradient_step.discard()
                raise self._skipped(pending)
            for loss in self.auxiliary:
                loss.after_step(self.model)
            self.version += 1
            self.samples_trained += pending.union
        return UpdateResult(pending.metrics.updated({"version": self.version}), pending.outputs)

    def _network(self, obs: torch.Tensor, *, compiled: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """The policy network's `(dist_params [N, P], values [N])` on `obs [N, ...]`, computed in
        `compute_dtype` (bf16 autocast or fp32) and returned as float32: everything after is float32.
        `compiled`: through torch.compile when `learner.compile` is on; only for the batch's fixed `N = (T+1) B`
        (a varying `N` would make it recompile for dynamic shapes)."""
        with autocast(self.device, self.compute_dtype):
            dist_params, values = (self._net if compiled else self.model)(obs)
        return dist_params.float(), values.float()

    def _forward(self, batch: dict[str, Any]) -> Forward:
        """The network on all `[T+1, B]` observations in one pass (with gradients), and on the truncated steps'
        final observations (without)."""
        obs = self._tensor(batch["obs"])
        T1, B = obs.shape[:2]
        core_out = None
        if self.model.core is not None:
            extra, starts, state, plan = self._recurrent_inputs(batch)
            with autocast(self.device, self.compute_dtype):
                dist_params, values, *core_out = recurrent_unroll(self._net, obs, extra, starts, state, plan)
            dist_params, values = dist_params.float(), values.float()
        else:
            dist_params, values = self._network(obs.reshape(T1 * B, *obs.shape[2:]))
            dist_params, values = dist_params.view(T1, B, -1), values.view(T1, B)
        values = self.value_norm.unnormalize(values)  # reward units, with the statistics before this update
        final_values = None
        if batch.get("final_obs") is not None and len(batch["final_obs"]):
            idx = self._tensor(batch["final_obs_index"], torch.long)
            with torch.no_grad():
                if core_out is None:
                    _, v_final = self._network(self._tensor(batch["final_obs"]), compiled=False)
                else:
                    v_final = self._recurrent_final_values(batch, idx, core_out)
                v_final = self.value_norm.unnormalize(v_final)
            final_values = torch.zeros(T1 - 1, B, dtype=torch.float32, device=self.device)
            final_values[idx[:, 0], idx[:, 1]] = v_final
        actions = self._tensor(batch["actions"])
        log_probs = distributions.log_prob(dist_params[:-1], actions, self.spec.discrete)
        return Forward(dist_params, values, final_values, actions, log_probs)

    def _recurrent_inputs(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, LanePlan]:
        """A recurrent network's inputs over the batch's `T+1` steps: the core's extra input `[T+1, B, E]`
        (step 0's stored `core_inputs`, then each step's previous action and reward), the episode starts
        `[T+1, B]` (step t > 0 where step t-1 was terminated or truncated; step 0's reset is already in the stored
        state), the state before step 0, `core_state [2, B, N]`, and the core's lanes from the host's starts
        (`policy.lanes.plan_lanes`: nothing read back from the device), keeping the cell state after each
        truncated step, which its final observation's value continues from."""
        for key in ("core_state", "core_inputs"):
            if batch.get(key) is None:
                raise ValueError(f"batch field {key!r} missing: learner.lstm_size {self.config.lstm_size} is a "
                                 f"recurrent policy, whose unrolls carry their core state")
        previous = core_inputs(batch["actions"], batch["rewards"], self.spec)  # [T, B, E]
        extra = torch.cat([self._tensor(batch["core_inputs"], torch.float32)[None],
                           self._tensor(previous, torch.float32)])
        dones = batch["terminated"] | batch["truncated"]
        starts = np.concatenate([np.zeros_like(dones[:1]), dones])
        cells = np.zeros_like(starts)
        if batch.get("final_obs_index") is not None and len(batch["final_obs_index"]):
            cells[batch["final_obs_index"][:, 0], batch["final_obs_index"][:, 1]] = True
        return (extra, self._tensor(starts), self._tensor(batch["core_state"], torch.float32),
                plan_lanes(starts, cells))

    def _recurrent_final_values(self, batch: dict[str, Any], idx: torch.Tensor,
                                core_out: list[torch.Tensor]) -> torch.Tensor:
        """V(final observation) `[M]` of the truncated steps `idx [M, 2]` = (t, b): one more step of the core from
        the state after step t, reading step t's action and reward (the episode goes on into that observation)."""
        h, c = core_out  # [T+1, B, N] each: the state after each step
        t, b = idx[:, 0], idx[:, 1]
        final_index = batch["final_obs_index"]
        extra = core_inputs(batch["actions"][final_index[:, 0], final_index[:, 1]],
                            batch["rewards"][final_index[:, 0], final_index[:, 1]], self.spec)
        state = torch.stack([h[t, b], c[t, b]])
        obs = self._tensor(batch["final_obs"])[None]
        starts = torch.zeros(1, len(final_index), dtype=torch.bool, device=self.device)
        with autocast(self.device, self.compute_dtype):
            _, v_final, _, _ = recurrent_unroll(self.model, obs, self._tensor(extra, torch.float32)[None], starts,
                                                state)
        return v_final[0].float()

    def _targets(self, batch: dict[str, Any], forward: Forward) -> tuple[vtrace.VTraceReturns, torch.Tensor]:
        """V-trace's `vs` and policy-gradient advantages `[T, B]` in reward units, and `log_rhos [T, B]`
        (log pi/mu of the actions taken). In float32 whatever the network's precision."""
        cfg = self.config
        T = forward.log_probs.shape[0]
        behaviour = self._tensor(batch["behaviour_params"], torch.float32)
        behaviour_logp = distributions.log_prob(behaviour, forward.actions, self.spec.discrete)
        log_rhos = (forward.log_probs - behaviour_logp).detach().float()
        discounts, rewards = vtrace.episode_end_inputs(
            self._tensor(batch["rewards"], torch.float32),
            self._tensor(batch["terminated"]),
            self._tensor(batch["truncated"]),
            cfg.discount,
            forward.final_values,
            any_truncated=_any_truncated(batch),
        )
        values = forward.values.detach().float()
        vt = vtrace.from_importance_weights(
            log_rhos, discounts, rewards, values[:T], values[T],
            clip_rho_threshold=cfg.clip_rho, clip_c_threshold=cfg.clip_c, clip_pg_rho_threshold=cfg.clip_pg_rho,
            lambda_=cfg.lambda_,
        )
        return vt, log_rhos

    def _weights(self, batch: dict[str, Any], vt: vtrace.VTraceReturns) -> torch.Tensor:
        """Each step's weight in the loss `[T, B]`: `mask [T, B]` times `sample_weights [B]` (ones without them)."""
        T, B = vt.vs.shape
        weights = torch.ones(T, B, device=self.device)
        if batch.get("mask") is not None:
            weights = weights * self._tensor(batch["mask"], torch.float32)
        if batch.get("sample_weights") is not None:
            weights = weights * self._tensor(batch["sample_weights"], torch.float32).view(1, B)
        return weights

    def _loss_terms(self, forward: Forward, vt: vtrace.VTraceReturns, weights: torch.Tensor,
                    appo: PassTargets | None = None) -> dict[str, torch.Tensor]:
        """IMPALA's loss terms (`losses.impala_losses`) as named scalars, `total` among them, with the steps
        weighted by `weights [T, B]`. Value targets, predictions and advantages in the value head's units under the
        statistics this batch moved (the prediction is then the rescaled head's output: see
        `value_normalization.preserve_outputs_`; reward units without value normalisation). With `appo` (an APPO
        pass's columns of the update's fixed targets): PPO's terms in place of IMPALA's policy and value terms
        (`losses.ppo_losses`), and its `clip_fraction` and `approx_kl`."""
        cfg = self.config
        T = forward.log_probs.shape[0]
        target = forward.dist_params[:T]
        bound_excess = None
        if not self.spec.discrete:
            bound_excess = distributions.mean_bound_excess(
                distributions.split_gaussian(target)[0], self._action_low, self._action_high
            )
        norm = self.value_norm
        values, entropies = norm.normalize(forward.values[:T]), distributions.entropy(target, self.spec.discrete)
        common = {"value_weight": cfg.value_weight, "entropy_weight": cfg.entropy_weight, "weights": weights,
                  "action_bound_excess": bound_excess, "action_bound_weight": cfg.action_bound_weight}
        if appo is None:
            losses = impala_losses(forward.log_probs, norm.normalize_advantages(vt.pg_advantages),
                                   norm.normalize(vt.vs), values, entropies, **common)
        else:
            losses = appo.losses(forward.log_probs, values, entropies, **common)
        terms = {"policy": losses.policy, "value": losses.value, "entropy": losses.entropy, "total": losses.total}
        if losses.action_bound is not None:
            terms["action_bound"] = losses.action_bound
        if appo is not None:
            terms.update(clip_fraction=losses.clip_fraction, approx_kl=losses.approx_kl)
        return terms

    def _auxiliary_losses(self, inputs: AuxiliaryInputs) -> list[AuxiliaryOutput | None]:
        """Each auxiliary loss's output on `inputs`, in order; None for one that samples replay and has nothing
        from it this update."""
        return [None if loss.sampler is not None and inputs.replayed is None else loss.loss(self.model, inputs)
                for loss in self.auxiliary]

    def _skipped(self, pending: PendingUpdate) -> NonFiniteUpdate:
        """Say what diverged: the model, optimisers and version are unchanged (the gradient step was not taken) and
        the value head's statistics were put back (`settle`). Read on the host: a skip is rare.

        A NaN/Inf step would poison Adam's moments and every weight at once; skipping it keeps the last good
        model, and the caller decides when too many skips in a row mean the run has diverged."""
        terms, step = pending.terms, pending.step
        parts = {"loss_total": pending.total, "loss_policy": terms["policy"], "loss_value": terms["value"],
                 "entropy": terms["entropy"]}
        values = {k: float(v.detach()) for k, v in parts.items()}
        for out in pending.aux:
            values.update({k: v for k, v in (out.metrics if out is not None else {}).items() if k.endswith("_loss")})
        finite_loss = np.isfinite(values["loss_total"])  # else no gradient was looked at
        if finite_loss:
            values.update({k: v for k, v in step.metrics.items() if k.startswith("grad_norm_")})
        values["grad_norm"] = float(step.grad_norm) if finite_loss else float("nan")
        values = on_host(values)
        bad = [k for k, v in values.items() if not np.isfinite(v)]
        return NonFiniteUpdate(
            f"non-finite {', '.join(bad)} at learner version {self.version} (update skipped): "
            + ", ".join(f"{k}={v:.4g}" for k, v in values.items())
        )

    def _metrics(self, forward: Forward, vt: vtrace.VTraceReturns, log_rhos: torch.Tensor, weights: torch.Tensor,
                 total: torch.Tensor, terms: dict[str, torch.Tensor], step: StepResult | None) -> Metrics:
        """IMPALA's metrics, unread (`results.Metrics`): the losses and the gradient norm as device scalars, the
        statistics of the targets and ratios (`_target_statistics`) computed at the first read. `version` is
        this one until `settle` counts the step."""
        T, B = vt.vs.shape
        clip_rho = self.config.clip_rho if self.config.clip_rho is not None else float("inf")
        values = forward.values.detach()[:T]
        return Metrics({
            "loss_total": total.detach(),
            "loss_policy": terms["policy"].detach(),
            "loss_value": terms["value"].detach(),
            "entropy": terms["entropy"].detach(),
            **({"loss_action_bound": terms["action_bound"].detach()} if "action_bound" in terms else {}),
            "grad_norm": step.grad_norm if step is not None else 0.0,
            "rho_mean": LATER,
            "rho_clipped_fraction": LATER,
            "explained_variance": LATER,
            "value_mean": LATER,
            "version": self.version,
            "batch_steps": T * B,
            **self.value_norm.metrics(),
        }, lambda: _target_statistics(values, vt.vs, log_rhos, weights, clip_rho))

    @torch.no_grad()
    def _outputs(self, forward: Forward, vt: vtrace.VTraceReturns, priorities: np.ndarray | None) -> StepOutputs:
        """The per-step outputs, left on the device (`StepOutputs` copies a field when it is read)."""
        T = vt.vs.shape[0]
        values = forward.values.detach()
        return StepOutputs(
            advantages=vt.vs - values[:T],
            values=values,
            final_values=forward.final_values if forward.final_values is not None else torch.zeros_like(vt.vs),
            dist_params=forward.dist_params[:T].detach(),
            sampled_priorities=priorities,
        )

    def get_weights(self) -> tuple[int, dict[str, np.ndarray]]:
        """The version and NumPy weights actors load, the value layer published in reward units
        (`weights_in_reward_units` with PopArt): actors score levels with the values V-trace uses, and never
        normalise."""
        weights = weights_to_numpy(self.model)
        self.value_norm.publish(weights)
        return self.version, weights

    def state_dict(self) -> dict[str, Any]:
        return learner_state.state_dict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        learner_state.load_state_dict(self, state)
