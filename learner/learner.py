"""The IMPALA learner: one V-trace update per batch of unrolls, and a version per update.

No Ray here: the Ray learner actor and the inline runner both drive this class.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import numpy as np
import torch

from levelray.contracts.config import LearnerConfig, ModelConfig
from levelray.contracts.spec import EnvSpec
from levelray.learner import vtrace
from levelray.learner.losses import impala_losses
from levelray.learner.model_loss import ModelBatch, MuZeroLoss
from levelray.learner.value_normalization import PopArt, preserve_outputs_, value_output_layer
from levelray.policy import distributions
from levelray.policy.models import build_model
from levelray.policy.weights import weights_to_numpy

log = logging.getLogger(__name__)


class NonFiniteUpdate(ArithmeticError):
    """An update whose loss or gradient was NaN/Inf: it was skipped and the model is unchanged."""


def pick_device(requested: str = "auto") -> torch.device:
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {requested!r} requested but CUDA is not available")
    return torch.device(requested)


class Learner:
    """`update(batch)` takes a stacked batch (see contracts.trajectory) plus optional
    `sample_weights [B]` (replay importance weights) and `mask [T, B]`; with the model loss on
    (`model.loss muzero`), also a `ModelBatch` of replayed sequences."""

    def __init__(self, spec: EnvSpec, config: LearnerConfig, *, seed: int = 0, model_config: ModelConfig | None = None):
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
        if not spec.discrete:  # the box the env clips actions to (`losses.impala_losses`' action_bound term)
            self._action_low = torch.tensor(spec.action_low, dtype=torch.float32, device=self.device)
            self._action_high = torch.tensor(spec.action_high, dtype=torch.float32, device=self.device)
        # The model loss's dynamics and heads are not part of `self.model`: actors load exactly the policy
        # network's weights. One optimiser trains both (agent parameters first, so its state is ordered).
        self.muzero: MuZeroLoss | None = None
        if model_config is not None and model_config.loss == "muzero":
            if not spec.discrete:
                raise ValueError("model.loss muzero supports discrete actions only (the dynamics takes a one-hot "
                                 "action and the policy head is categorical); use --model-loss none")
            self.muzero = MuZeroLoss(self.model, spec.num_actions, model_config, discount=config.discount,
                                     seed=seed, device=self.device)
        params = self.parameters()
        # What the gradient norm and clipping walk every update: the list made once (module.parameters()
        # walks the module tree each call, ~0.1 ms an update with the model loss's modules added).
        self._trained = params
        # foreach: one multi-tensor kernel per step instead of a loop over parameters. PyTorch picks
        # it by default on CUDA only; on a CPU learner with a small MLP it saves ~5% of an update.
        if config.optimizer == "adam":
            self.optimizer = torch.optim.Adam(params, lr=config.learning_rate, eps=config.adam_eps, foreach=True)
        elif config.optimizer == "rmsprop":
            self.optimizer = torch.optim.RMSprop(
                params, lr=config.learning_rate, alpha=config.rmsprop_alpha, eps=config.rmsprop_eps, foreach=True
            )
        else:
            raise ValueError(f"optimizer must be adam or rmsprop, got {config.optimizer!r}")
        # PopArt (learner/value_normalization.py): the value head outputs normalised values.
        self.value_norm = PopArt(config.popart_beta) if config.value_normalization else None
        self.version = 0
        self.samples_trained = 0
        self.last_outputs: dict[str, np.ndarray] = {}

    def parameters(self) -> list[torch.nn.Parameter]:
        """Everything the optimiser trains: the policy network, then the model loss's modules."""
        params = list(self.model.parameters())
        if self.muzero is not None:
            params += list(self.muzero.module.parameters())
        return params

    def set_learning_rate(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _tensor(self, x: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(x))
        return t.to(self.device, dtype=dtype, non_blocking=True)

    def update(self, batch: dict[str, Any], model_batch: ModelBatch | None = None) -> dict[str, float]:
        """One gradient step. Also leaves per-step outputs in `self.last_outputs` ([T, B] NumPy):
        `advantages` (v_s - V(x_s), for PLR scores), `abs_td` (|v_s - V(x_s)|, for replay priorities),
        `values [T+1, B]`, `final_values [T, B]` (V(final obs) at truncated steps, 0 elsewhere; reward units)
        and `logits`/`params [T, B, P]`; with a `model_batch`, `model_priorities [n]` too.
        `model_batch` (with the model loss on): `model.loss_weight × model loss` joins the loss."""
        cfg = self.config
        norm_state = self.value_norm.state_dict() if self.value_norm is not None else None
        obs = self._tensor(batch["obs"])
        T1, B = obs.shape[:2]
        T = T1 - 1
        self.model.train()
        params, values = self.model(obs.reshape(T1 * B, *obs.shape[2:]))
        params, values = params.view(T1, B, -1), values.view(T1, B)
        if self.value_norm is not None:  # reward units, with the statistics before this update
            values = self.value_norm.unnormalize(values)

        rewards = self._tensor(batch["rewards"], torch.float32)
        final_values = None
        if batch.get("final_obs") is not None and len(batch["final_obs"]):
            with torch.no_grad():
                _, v_final = self.model(self._tensor(batch["final_obs"]))
                if self.value_norm is not None:
                    v_final = self.value_norm.unnormalize(v_final)
            idx = self._tensor(batch["final_obs_index"], torch.long)
            final_values = torch.zeros_like(rewards)
            final_values[idx[:, 0], idx[:, 1]] = v_final
        discounts, rewards = vtrace.episode_end_inputs(
            rewards,
            self._tensor(batch["terminated"]),
            self._tensor(batch["truncated"]),
            cfg.discount,
            final_values,
        )
        actions = self._tensor(batch["actions"])
        behaviour = self._tensor(batch["behaviour_params"], torch.float32)
        target = params[:T]
        behaviour_logp = distributions.log_prob(behaviour, actions, self.spec.discrete)
        target_logp = distributions.log_prob(target, actions, self.spec.discrete)
        clips = dict(
            clip_rho_threshold=cfg.clip_rho,
            clip_c_threshold=cfg.clip_c,
            clip_pg_rho_threshold=cfg.clip_pg_rho,
            lambda_=cfg.lambda_,
        )
        log_rhos = (target_logp - behaviour_logp).detach()
        vt = vtrace.from_importance_weights(
            log_rhos, discounts, rewards, values[:T].detach(), values[T].detach(), **clips
        )
        weights = torch.ones(T, B, device=self.device)
        if batch.get("mask") is not None:
            weights = weights * self._tensor(batch["mask"], torch.float32)
        if batch.get("sample_weights") is not None:
            weights = weights * self._tensor(batch["sample_weights"], torch.float32).view(1, B)
        entropies = distributions.entropy(target, self.spec.discrete)
        bound_excess = None
        if not self.spec.discrete:
            bound_excess = distributions.mean_bound_excess(
                distributions.split_gaussian(target)[0], self._action_low, self._action_high
            )
        value_targets, value_preds, pg_advantages = vt.vs, values[:T], vt.pg_advantages
        if self.value_norm is not None:
            old_stats = self.value_norm.update(vt.vs, weights > 0)
            # normalised with the new statistics: the prediction is the rescaled head's output (see preserve_outputs_)
            value_targets, value_preds = self.value_norm.normalize(vt.vs), self.value_norm.normalize(values[:T])
            pg_advantages = pg_advantages / self.value_norm.sigma
        losses = impala_losses(
            target_logp,
            pg_advantages,
            value_targets,
            value_preds,
            entropies,
            value_weight=cfg.value_weight,
            entropy_weight=cfg.entropy_weight,
            weights=weights,
            action_bound_excess=bound_excess,
            action_bound_weight=cfg.action_bound_weight,
        )
        total = losses.total
        model_metrics: dict[str, float] = {}
        model_priorities = None
        if self.muzero is not None and model_batch is not None:
            model_total, model_metrics, model_priorities = self.muzero.loss(self.model, model_batch)
            total = total + self.muzero.cfg.loss_weight * model_total
        self.optimizer.zero_grad(set_to_none=True)
        raw_grad_norm = float("nan")
        if torch.isfinite(total):
            total.backward()
            raw_grad_norm = self._gradient_norm()
        if not np.isfinite(raw_grad_norm):  # before anything below changes weights or statistics
            self._skip_update(norm_state, losses, raw_grad_norm, total, model_metrics)
        grad_norm = raw_grad_norm
        if self.value_norm is not None:  # rescales the value layer's gradients too: their norm changes
            new_stats = (self.value_norm.mu, self.value_norm.sigma)
            preserve_outputs_(value_output_layer(self.model), old_stats, new_stats)
            grad_norm = self._gradient_norm()
        self._clip_gradients(grad_norm)
        self.optimizer.step()
        if self.muzero is not None:
            self.muzero.after_update(self.model)
        self.version += 1
        self.samples_trained += T * B

        with torch.no_grad():
            rhos = log_rhos.exp()
            advantages = vt.vs - values[:T].detach()
            var_vs = vt.vs.var()
            explained = 1.0 - (vt.vs - values[:T]).var() / var_vs if var_vs > 1e-8 else torch.tensor(0.0)
            self.last_outputs = {
                "advantages": advantages.cpu().numpy(),
                "abs_td": advantages.abs().cpu().numpy(),
                "values": values.detach().cpu().numpy(),
                "params": target.detach().cpu().numpy(),
                "final_values": (final_values if final_values is not None else torch.zeros_like(rewards)).cpu().numpy(),
            }
            if model_priorities is not None:
                self.last_outputs["model_priorities"] = model_priorities
            clip_rho = cfg.clip_rho if cfg.clip_rho is not None else float("inf")
            metrics = {
                "loss_total": float(total),
                "loss_policy": losses.policy.item(),
                "loss_value": losses.value.item(),
                "entropy": losses.entropy.item(),
                **({"loss_action_bound": losses.action_bound.item()} if losses.action_bound is not None else {}),
                "grad_norm": grad_norm,
                "rho_mean": rhos.mean().item(),
                "rho_clipped_fraction": (rhos > clip_rho).float().mean().item(),
                "explained_variance": float(explained),
                "value_mean": values[:T].mean().item(),
                "version": self.version,
                "batch_steps": T * B,
            }
            if self.value_norm is not None:
                metrics.update(value_norm_mu=self.value_norm.mu, value_norm_sigma=self.value_norm.sigma)
            metrics.update(model_metrics)
            return metrics

    def _gradient_norm(self) -> float:
        """The global L2 norm of the gradients (before clipping)."""
        grads = [p.grad for p in self._trained if p.grad is not None]
        return float(torch.nn.utils.get_total_norm(grads))

    def _clip_gradients(self, norm: float) -> None:
        """Clip by `grad_clip_type`; `norm` is the gradients' global norm as they are now (computed once an
        update: the non-finite check needs it first). By norm this is `clip_grad_norm_`'s rule, scale by
        min(1, max_norm / (norm + 1e-6))."""
        cfg = self.config
        grads = [p.grad for p in self._trained if p.grad is not None]
        if cfg.grad_clip_type == "norm":
            scale = cfg.grad_clip / (norm + 1e-6)
            if scale < 1.0:
                torch._foreach_mul_(grads, scale)
        elif cfg.grad_clip_type == "value":
            torch._foreach_clamp_min_(grads, -cfg.grad_clip)
            torch._foreach_clamp_max_(grads, cfg.grad_clip)

    def _skip_update(self, norm_state: dict | None, losses, grad_norm: float, total: torch.Tensor,
                     model_metrics: dict[str, float]) -> None:
        """Leave the model, optimiser, PopArt statistics and version as they were, and say what diverged.

        A NaN/Inf step would poison Adam's moments and every weight at once; skipping it keeps the last
        good model, and the caller decides when too many skips in a row mean the run has diverged."""
        self.optimizer.zero_grad(set_to_none=True)
        if norm_state is not None:
            self.value_norm.load_state_dict(norm_state)
        parts = {"loss_total": total, "loss_policy": losses.policy, "loss_value": losses.value,
                 "entropy": losses.entropy}
        values = {k: float(v.detach()) for k, v in parts.items()}
        values.update({k: v for k, v in model_metrics.items() if k.endswith("_loss")})
        values["grad_norm"] = grad_norm
        bad = [k for k, v in values.items() if not np.isfinite(v)]
        raise NonFiniteUpdate(
            f"non-finite {', '.join(bad)} at learner version {self.version} (update skipped): "
            + ", ".join(f"{k}={v:.4g}" for k, v in values.items())
        )

    def get_weights(self) -> tuple[int, dict[str, np.ndarray]]:
        return self.version, weights_to_numpy(self.model)

    def state_dict(self) -> dict[str, Any]:
        return {
            # Copies: optimizer.state_dict() returns live references to Adam's moment buffers.
            "model": {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()},
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "version": self.version,
            "samples_trained": self.samples_trained,
            "torch_rng": torch.get_rng_state(),
            "value_normalization": self.value_norm.state_dict() if self.value_norm is not None else None,
            "model_loss": self.muzero.state_dict() if self.muzero is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        self.samples_trained = int(state.get("samples_trained", 0))
        if "torch_rng" in state:
            torch.set_rng_state(state["torch_rng"].cpu())
        self._load_value_normalization(state.get("value_normalization"))
        if self.muzero is not None and state.get("model_loss") is not None:
            self.muzero.load_state_dict(state["model_loss"])

    def _load_value_normalization(self, saved: dict | None) -> None:
        """Statistics from the checkpoint; a checkpoint and a learner that disagree on value normalisation
        are reconciled by rescaling the value head, so its outputs in reward units stay the same."""
        if self.value_norm is not None:
            self.value_norm = PopArt(self.config.popart_beta)  # identity statistics if the checkpoint has none
            if saved is not None:
                self.value_norm.load_state_dict(saved)
            return
        if saved is not None:  # trained normalised, resumed without: fold the statistics into the head
            stats = PopArt(self.config.popart_beta)
            stats.load_state_dict(saved)
            preserve_outputs_(value_output_layer(self.model), (stats.mu, stats.sigma), (0.0, 1.0), grads=False)
