"""The IMPALA learner: one V-trace update per batch of unrolls, and a version per update.

`Learner.update(batch)` reads top to bottom as four steps, each a method of one screen:

1. `_forward`: the network on every observation, `dist_params [T+1, B, P]` and `values [T+1, B]` (reward
   units), plus V(final observation) at truncated steps;
2. `_targets`: V-trace returns and policy-gradient advantages, in float32 whatever the network's precision
   (they are regression targets and importance ratios, where half precision would lose the small differences);
3. `_loss_terms`: a dict of named scalar tensors (policy, value, entropy, action bound, model, total);
4. `_apply_gradients`: backward, the non-finite check, PopArt's rescale of the value layer, clipping, the
   optimiser step.

It returns an `UpdateResult`: the metrics and the per-step `StepOutputs` that the caller turns into replay
priorities, PLR feedback and the model loss's stored values. No Ray here: `LearnerCore` drives this class
for both the Ray learner actor and the inline backend.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import numpy as np
import torch

from levelray.contracts.config import LearnerConfig, ModelLossConfig
from levelray.contracts.spec import EnvSpec
from levelray.learner import learner_state, vtrace
from levelray.learner.data_parallel import DataParallel
from levelray.learner.device import host_to_device, pick_device
from levelray.learner.losses import impala_losses
from levelray.learner.model_batch import ModelBatch, SequenceSampler
from levelray.learner.model_loss import MuZeroLoss
from levelray.learner.value_normalization import PopArt, preserve_outputs_, value_output_layer
from levelray.policy import distributions
from levelray.policy.models import build_model, resolve_model_kind
from levelray.policy.precision import autocast, compute_dtype
from levelray.policy.weights import weights_to_numpy

log = logging.getLogger(__name__)


class NonFiniteUpdate(ArithmeticError):
    """An update whose loss or gradient was NaN/Inf: it was skipped and the model is unchanged."""


class Forward(NamedTuple):
    """The network's outputs on one batch (tensors on the learner's device)."""

    dist_params: torch.Tensor  # [T+1, B, P] the policy's distribution parameters (logits, or Gaussian mean|log-std)
    values: torch.Tensor  # [T+1, B] V(x_t) in reward units (PopArt's statistics before this update)
    final_values: torch.Tensor | None  # [T, B] V(final obs) at truncated steps, 0 elsewhere; None: no truncation
    actions: torch.Tensor  # [T, B(, D)] the actions taken, on the learner's device
    log_probs: torch.Tensor  # [T, B] log pi(a_t | x_t) of the actions taken (with gradients)


class StepOutputs(NamedTuple):
    """Per-step outputs of one update, NumPy on the host."""

    advantages: np.ndarray  # [T, B] v_s - V(x_s): PLR's scores
    abs_td: np.ndarray  # [T, B] |v_s - V(x_s)|: replay priorities
    values: np.ndarray  # [T+1, B] V(x_t), reward units
    final_values: np.ndarray  # [T, B] V(final obs) at truncated steps, 0 elsewhere; reward units
    dist_params: np.ndarray  # [T, B, P] the learner's policy distribution parameters (logits when discrete)
    model_priorities: np.ndarray | None  # [n] one per model-loss sequence; None without a model batch


class UpdateResult(NamedTuple):
    metrics: dict[str, float]
    outputs: StepOutputs


class Learner:
    """The policy network, its optimiser and PopArt statistics; with the model loss on (`model_loss.loss muzero`)
    also the `MuZeroLoss` and the `SequenceSampler` that cuts its batches from replay."""

    def __init__(self, spec: EnvSpec, config: LearnerConfig, *, seed: int = 0,
                 model_loss: ModelLossConfig | None = None, data_parallel: DataParallel | None = None):
        self.spec = spec
        self.config = config
        torch.manual_seed(seed)
        self.device = pick_device(config.device)
        log.info(
            "learner on %s%s",
            self.device,
            f" ({torch.cuda.get_device_name(self.device)})" if self.device.type == "cuda" else "",
        )
        self.model = build_model(spec, config.model, tuple(config.hidden_sizes)).to(self.device)
        # bf16 or fp32 inside the policy network (policy/precision.py); its outputs are float32 either way
        self.compute_dtype = compute_dtype(config.precision, self.device, resolve_model_kind(spec, config.model))
        # `learner.compile`: the update's forward pass through torch.compile; `self.model` (the same parameters)
        # stays what checkpoints, weights and the model loss read
        self._net = torch.compile(self.model, dynamic=False) if config.compile else self.model
        if not spec.discrete:  # the box the env clips actions to (`losses.impala_losses`' action_bound term)
            self._action_low = torch.tensor(spec.action_low, dtype=torch.float32, device=self.device)
            self._action_high = torch.tensor(spec.action_high, dtype=torch.float32, device=self.device)
        # The model loss's dynamics and heads are not part of `self.model`: actors load exactly the policy
        # network's weights. `model_loss.optimizer`: "shared", one optimiser trains both (agent parameters first,
        # so its state is ordered); "separate", a second one (`model_optimizer`) trains the torso and the model's
        # modules on the model loss alone, with its own moments and clip, as ALF's representation learner.
        self.muzero: MuZeroLoss | None = None
        self.sequences: SequenceSampler | None = None
        if model_loss is not None and model_loss.loss == "muzero":
            if not spec.discrete:
                raise ValueError("model_loss.loss muzero supports discrete actions only (the dynamics takes a "
                                 "one-hot action and the policy head is categorical); use --model-loss none")
            self.muzero = MuZeroLoss(self.model, spec.num_actions, model_loss, discount=config.discount,
                                     device=self.device)
            self.sequences = SequenceSampler(model_loss, seed)
        # What the gradient norm and clipping walk every update: the list made once (module.parameters()
        # walks the module tree each call, ~0.1 ms an update with the model loss's modules added).
        separate = self.muzero is not None and model_loss.optimizer == "separate"
        self._trained = list(self.model.parameters()) if separate else self.parameters()
        self.optimizer = self._make_optimizer(self._trained)
        # what the model loss trains: the policy network (only its torso gets gradient) and the model's modules
        self._model_trained = self.parameters() if self.muzero is not None else []
        self._in_torso = self._torso_flags(spec) if self.muzero is not None else []  # where both losses reach
        self.model_optimizer = self._make_optimizer(self._model_trained) if separate else None
        # PopArt (learner/value_normalization.py): the value head outputs normalised values.
        self.value_norm = PopArt(config.popart_beta) if config.value_normalization else None
        self.version = 0
        self.samples_trained = 0
        self.data_parallel: DataParallel | None = None
        if data_parallel is not None:
            self.join(data_parallel)

    def _make_optimizer(self, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
        # Adam fused (one kernel over every parameter, CPU and CUDA): 2.5-3x faster a step than foreach on the
        # CPU, where PyTorch does not pick it by default (benchmarks/RESULTS.md, "Fused Adam and the MiniGrid
        # net's embedding"). RMSprop has no fused kernel: foreach, which PyTorch picks on CUDA only.
        cfg = self.config
        if cfg.optimizer == "adam":
            return torch.optim.Adam(params, lr=cfg.learning_rate, eps=cfg.adam_eps, fused=True)
        if cfg.optimizer == "rmsprop":
            return torch.optim.RMSprop(params, lr=cfg.learning_rate, alpha=cfg.rmsprop_alpha, eps=cfg.rmsprop_eps,
                                       foreach=True)
        raise ValueError(f"optimizer must be adam or rmsprop, got {cfg.optimizer!r}")

    def parameters(self) -> list[torch.nn.Parameter]:
        """Everything the optimiser trains: the policy network, then the model loss's modules."""
        params = list(self.model.parameters())
        if self.muzero is not None:
            params += list(self.muzero.module.parameters())
        return params

    def join(self, data_parallel: DataParallel) -> None:
        """Train as one rank of several (learner/data_parallel.py) from now on: the model becomes rank 0's,
        and every later step is taken on all ranks alike. Ranks that restored one checkpoint hold the same
        optimiser state already; fresh ones have none yet."""
        self.data_parallel = data_parallel
        data_parallel.broadcast_parameters(self.parameters())

    def set_learning_rate(self, lr: float) -> None:
        for optimizer in (self.optimizer, self.model_optimizer):
            for group in optimizer.param_groups if optimizer is not None else ():
                group["lr"] = lr

    def _tensor(self, x: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
        return host_to_device(x, self.device, dtype)

    # -- the update ------------------------------------------------------------------------------
    def update(self, batch: dict[str, Any], model_batch: ModelBatch | None = None) -> UpdateResult:
        """One gradient step on a stacked batch (`contracts.trajectory.stack_unrolls`: `obs [T+1, B, ...]`,
        `actions`, `rewards`, `terminated`, `truncated [T, B]`, `behaviour_params [T, B, P]`, optional
        `final_obs`/`final_obs_index`), with optional `sample_weights [B]` (replay importance weights) and
        `mask [T, B]` (the steps that carry gradient: each loss is the mean over them, PopArt moves on their
        targets only, `samples_trained` counts them; a batch with none is no update at all, and keeps the
        version). With a `model_batch` (model loss on), `model_loss.loss_weight × model loss` joins the
        loss. Raises `NonFiniteUpdate`, changing nothing, when the loss or the gradient is not finite."""
        popart_before = self.value_norm.state_dict() if self.value_norm is not None else None
        self.model.train()
        forward = self._forward(batch)
        vt, log_rhos = self._targets(batch, forward)
        T, B = vt.vs.shape
        trained = T * B if batch.get("mask") is None else int(np.count_nonzero(batch["mask"]))
        union = trained if self.data_parallel is None else self.data_parallel.union_count(trained)
        terms, popart_old = self._loss_terms(batch, forward, vt)
        model_metrics: dict[str, float] = {}
        model_priorities = None
        if self.muzero is not None and model_batch is not None:
            terms["model"], model_metrics, model_priorities = self.muzero.loss(self.model, model_batch)
            terms["agent"] = terms["total"]  # V-trace's terms: what the agent's optimiser steps on alone
            terms["total"] = terms["total"] + self.muzero.cfg.loss_weight * terms["model"]
        grad_norm = 0.0
        if union:  # a batch wholly masked (Robust PLR: only new levels) changes nothing and is no new version
            grad_norm = self._apply_gradients(terms, model_metrics, popart_before, popart_old, trained / union)
            self.version += 1
            self.samples_trained += union
        metrics = {**self._metrics(forward, vt, log_rhos, terms, grad_norm), **model_metrics, "trained_steps": trained}
        return UpdateResult(metrics, self._outputs(forward, vt, model_priorities))

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
        dist_params, values = self._network(obs.reshape(T1 * B, *obs.shape[2:]))
        dist_params, values = dist_params.view(T1, B, -1), values.view(T1, B)
        if self.value_norm is not None:  # reward units, with the statistics before this update
            values = self.value_norm.unnormalize(values)
        final_values = None
        if batch.get("final_obs") is not None and len(batch["final_obs"]):
            with torch.no_grad():
                _, v_final = self._network(self._tensor(batch["final_obs"]), compiled=False)
                if self.value_norm is not None:
                    v_final = self.value_norm.unnormalize(v_final)
            idx = self._tensor(batch["final_obs_index"], torch.long)
            final_values = torch.zeros(T1 - 1, B, dtype=torch.float32, device=self.device)
            final_values[idx[:, 0], idx[:, 1]] = v_final
        actions = self._tensor(batch["actions"])
        log_probs = distributions.log_prob(dist_params[:-1], actions, self.spec.discrete)
        return Forward(dist_params, values, final_values, actions, log_probs)

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
        )
        values = forward.values.detach().float()
        vt = vtrace.from_importance_weights(
            log_rhos, discounts, rewards, values[:T], values[T],
            clip_rho_threshold=cfg.clip_rho, clip_c_threshold=cfg.clip_c, clip_pg_rho_threshold=cfg.clip_pg_rho,
            lambda_=cfg.lambda_,
        )
        return vt, log_rhos

    def _loss_terms(self, batch: dict[str, Any], forward: Forward, vt: vtrace.VTraceReturns
                    ) -> tuple[dict[str, torch.Tensor], tuple[float, float] | None]:
        """IMPALA's loss terms (`losses.impala_losses`) as named scalars, `total` among them, and PopArt's
        statistics before this batch moved them (None without PopArt). The batch's steps are weighted by
        `mask [T, B]` times `sample_weights [B]`."""
        cfg = self.config
        T, B = vt.vs.shape
        weights = torch.ones(T, B, device=self.device)
        if batch.get("mask") is not None:
            weights = weights * self._tensor(batch["mask"], torch.float32)
        if batch.get("sample_weights") is not None:
            weights = weights * self._tensor(batch["sample_weights"], torch.float32).view(1, B)
        target = forward.dist_params[:T]
        bound_excess = None
        if not self.spec.discrete:
            bound_excess = distributions.mean_bound_excess(
                distributions.split_gaussian(target)[0], self._action_low, self._action_high
            )
        value_targets, value_preds, pg_advantages = vt.vs, forward.values[:T], vt.pg_advantages
        old_stats = None
        if self.value_norm is not None:
            old_stats = self.value_norm.update(vt.vs, weights > 0, None if self.data_parallel is None
                                               else self.data_parallel.sum)
            # normalised with the new statistics: the prediction is the rescaled head's output (see preserve_outputs_)
            value_targets, value_preds = self.value_norm.normalize(vt.vs), self.value_norm.normalize(value_preds)
            pg_advantages = pg_advantages / self.value_norm.sigma
        losses = impala_losses(
            forward.log_probs, pg_advantages, value_targets, value_preds,
            distributions.entropy(target, self.spec.discrete),
            value_weight=cfg.value_weight, entropy_weight=cfg.entropy_weight, weights=weights,
            action_bound_excess=bound_excess, action_bound_weight=cfg.action_bound_weight,
        )
        terms = {"policy": losses.policy, "value": losses.value, "entropy": losses.entropy, "total": losses.total}
        if losses.action_bound is not None:
            terms["action_bound"] = losses.action_bound
        return terms, old_stats

    def _apply_gradients(self, terms: dict[str, torch.Tensor], model_metrics: dict[str, float],
                         popart_before: dict | None, popart_old: tuple[float, float] | None, share: float) -> float:
        """Backward and the optimiser step(s); returns the agent optimiser's gradient norm before clipping (after
        PopArt's rescale of the value layer). The model loss's gradient is taken apart first (`_model_gradients`):
        added to the agent's with a shared optimiser, stepped by `model_optimizer` after the agent's step with a
        separate one (both from the weights the update started from). Every norm is computed once and serves
        the non-finite check, which skips the whole update before anything changes. With several learners the
        ranks' gradients are combined first (`share`: this rank's fraction of the trained steps)."""
        self.optimizer.zero_grad(set_to_none=True)
        raw_grad_norm, model_grads = float("nan"), None
        finite = bool(torch.isfinite(terms["total"]))
        if finite:
            model_grads = self._model_gradients(terms, model_metrics)
            terms.get("agent", terms["total"]).backward()
            if model_grads is not None:
                model_metrics["torso_grad_norm_vtrace"] = self._torso_vtrace_norm()
        if self.data_parallel is not None:
            finite, model_grads = self.data_parallel.reduce_gradients(self._trained, share, self._model_trained,
                                                                      model_grads, finite)
            if model_grads is not None:  # the separate optimiser clips by the combined gradient's norm
                model_metrics["grad_norm_model"] = float(torch.nn.utils.get_total_norm(
                    [g for g in model_grads if g is not None]))
        if finite:
            if model_grads is not None and self.model_optimizer is None:  # shared: the gradient of the sum
                for p, g in zip(self._model_trained, model_grads, strict=True):
                    if g is not None:
                        p.grad = g if p.grad is None else p.grad + g
            raw_grad_norm = self._gradient_norm(self._trained)
        if not np.isfinite(raw_grad_norm) or not np.isfinite(model_metrics.get("grad_norm_model", 0.0)):
            self._skip_update(popart_before, terms, raw_grad_norm, model_metrics)
        grad_norm = raw_grad_norm
        if self.value_norm is not None:  # rescales the value layer's gradients too: their norm changes
            new_stats = (self.value_norm.mu, self.value_norm.sigma)
            preserve_outputs_(value_output_layer(self.model), popart_old, new_stats)
            grad_norm = self._gradient_norm(self._trained)
        self._clip_gradients(self._trained, grad_norm, self.config.grad_clip)
        self.optimizer.step()
        if model_grads is not None and self.model_optimizer is not None:
            self._step_model_optimizer(model_grads, model_metrics["grad_norm_model"])
        if self.muzero is not None:
            self.muzero.after_update(self.model)
        return grad_norm

    def _torso_flags(self, spec: EnvSpec) -> list[bool]:
        """Per parameter of `_model_trained`: does `representation` read it (the torso, which both losses train)?
        Found once by autograd from one zero observation, so the torso's V-trace gradient is known even where the
        model loss's gradient is stopped before it (`model_loss.torso_gradient` false)."""
        obs = torch.zeros((1, *spec.obs_shape), dtype=getattr(torch, spec.obs_dtype), device=self.device)
        agent = list(self.model.parameters())
        reached = torch.autograd.grad(self.model.representation(obs).float().sum(), agent, allow_unused=True)
        torso = {id(p) for p, g in zip(agent, reached, strict=True) if g is not None}
        return [id(p) in torso for p in self._model_trained]

    def _model_gradients(self, terms: dict[str, torch.Tensor], model_metrics: dict[str, float]) -> list | None:
        """The weighted model loss's gradient over `_model_trained` (None where a parameter gets none), taken
        before any backward of the agent's loss; adds its norm (`grad_norm_model`) and the torso's part of it
        (`torso_grad_norm_model`: the policy network's parameters it reaches) to `model_metrics`. None without
        a model loss term."""
        if "model" not in terms:
            return None
        grads = list(torch.autograd.grad(self.muzero.cfg.loss_weight * terms["model"], self._model_trained,
                                         allow_unused=True))
        torso = [g for g, mine in zip(grads, self._in_torso, strict=True) if g is not None and mine]
        model_metrics["grad_norm_model"] = float(torch.nn.utils.get_total_norm([g for g in grads if g is not None]))
        model_metrics["torso_grad_norm_model"] = float(torch.nn.utils.get_total_norm(torso)) if torso else 0.0
        return grads

    def _torso_vtrace_norm(self) -> float:
        """The norm of the agent loss's gradient (now in `.grad`) over the torso (`_in_torso`)."""
        grads = [p.grad for p, mine in zip(self._model_trained, self._in_torso, strict=True)
                 if mine and p.grad is not None]
        return float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0

    def _step_model_optimizer(self, grads: list, norm: float) -> None:
        """The separate optimiser's step on the model loss's gradient `grads` (taken before the agent's step)."""
        self.model_optimizer.zero_grad(set_to_none=True)
        for p, g in zip(self._model_trained, grads, strict=True):
            p.grad = g
        trained = [p for p in self._model_trained if p.grad is not None]
        self._clip_gradients(trained, norm, self.muzero.cfg.grad_clip, by="norm")
        self.model_optimizer.step()
        self.model_optimizer.zero_grad(set_to_none=True)

    @torch.no_grad()
    def _metrics(self, forward: Forward, vt: vtrace.VTraceReturns, log_rhos: torch.Tensor,
                 terms: dict[str, torch.Tensor], grad_norm: float) -> dict[str, float]:
        T, B = vt.vs.shape
        values = forward.values[:T]
        rhos = log_rhos.exp()
        var_vs = vt.vs.var()
        explained = 1.0 - (vt.vs - values).var() / var_vs if var_vs > 1e-8 else torch.tensor(0.0)
        clip_rho = self.config.clip_rho if self.config.clip_rho is not None else float("inf")
        metrics = {
            "loss_total": float(terms["total"]),
            "loss_policy": terms["policy"].item(),
            "loss_value": terms["value"].item(),
            "entropy": terms["entropy"].item(),
            **({"loss_action_bound": terms["action_bound"].item()} if "action_bound" in terms else {}),
            "grad_norm": grad_norm,
            "rho_mean": rhos.mean().item(),
            "rho_clipped_fraction": (rhos > clip_rho).float().mean().item(),
            "explained_variance": float(explained),
            "value_mean": values.mean().item(),
            "version": self.version,
            "batch_steps": T * B,
        }
        if self.value_norm is not None:
            metrics.update(value_norm_mu=self.value_norm.mu, value_norm_sigma=self.value_norm.sigma)
        return metrics

    @torch.no_grad()
    def _outputs(self, forward: Forward, vt: vtrace.VTraceReturns, model_priorities: np.ndarray | None
                 ) -> StepOutputs:
        T = vt.vs.shape[0]
        advantages = vt.vs - forward.values[:T].detach()
        final_values = forward.final_values if forward.final_values is not None else torch.zeros_like(vt.vs)
        return StepOutputs(
            advantages=advantages.cpu().numpy(),
            abs_td=advantages.abs().cpu().numpy(),
            values=forward.values.detach().cpu().numpy(),
            final_values=final_values.cpu().numpy(),
            dist_params=forward.dist_params[:T].detach().cpu().numpy(),
            model_priorities=model_priorities,
        )

    @staticmethod
    def _gradient_norm(params: list[torch.nn.Parameter]) -> float:
        """The global L2 norm of `params`' gradients (before clipping)."""
        grads = [p.grad for p in params if p.grad is not None]
        return float(torch.nn.utils.get_total_norm(grads))

    def _clip_gradients(self, params: list[torch.nn.Parameter], norm: float, clip: float,
                        by: str | None = None) -> None:
        """Clip `params`' gradients by `by` (default `learner.grad_clip_type`) at `clip`; `norm` is their global
        norm as they are now (computed once an update: the non-finite check needs it first). By norm: scale by
        min(1, clip / (norm + 1e-6)), `clip_grad_norm_`'s rule, in float64 as the norm is."""
        by = by or self.config.grad_clip_type
        if by == "norm":
            total = torch.tensor(norm, dtype=torch.float64)
            torch.nn.utils.clip_grads_with_norm_(params, clip, total)
        elif by == "value":
            torch.nn.utils.clip_grad_value_(params, clip)

    def _skip_update(self, popart_before: dict | None, terms: dict[str, torch.Tensor], grad_norm: float,
                     model_metrics: dict[str, float]) -> None:
        """Leave the model, optimiser, PopArt statistics and version as they were, and say what diverged.

        A NaN/Inf step would poison Adam's moments and every weight at once; skipping it keeps the last
        good model, and the caller decides when too many skips in a row mean the run has diverged."""
        self.optimizer.zero_grad(set_to_none=True)
        if popart_before is not None:
            self.value_norm.load_state_dict(popart_before)
        parts = {"loss_total": terms["total"], "loss_policy": terms["policy"], "loss_value": terms["value"],
                 "entropy": terms["entropy"]}
        values = {k: float(v.detach()) for k, v in parts.items()}
        values.update({k: v for k, v in model_metrics.items() if k.endswith("_loss") or k == "grad_norm_model"})
        values["grad_norm"] = grad_norm
        bad = [k for k, v in values.items() if not np.isfinite(v)]
        raise NonFiniteUpdate(
            f"non-finite {', '.join(bad)} at learner version {self.version} (update skipped): "
            + ", ".join(f"{k}={v:.4g}" for k, v in values.items())
        )

    def get_weights(self) -> tuple[int, dict[str, np.ndarray]]:
        return self.version, weights_to_numpy(self.model)

    def state_dict(self) -> dict[str, Any]:
        return learner_state.state_dict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        learner_state.load_state_dict(self, state)
