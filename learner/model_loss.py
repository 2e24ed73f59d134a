"""MuZero-style model loss on the agent's own torso (`--model-loss muzero`), trained from replay.

ALF's MuZero representation learner (`alf/algorithms/muzero_representation_learner.py`, loss terms of
`alf/algorithms/mcts_models.py: calc_loss`) as an auxiliary loss of the IMPALA learner: the torso that the
policy and value heads share (`model.representation(obs)`, `[N, D]`) is the representation `h`; a dynamics
MLP `g(s, a) -> s'` is unrolled K steps from the latent of x_t along the actions actually taken; value,
reward, policy (and optional game-over) heads read every latent; an optional EfficientZero consistency
term pulls a projection of the predicted latent at step k towards the target network's projection of the
real x_{t+k}. There is no tree search: the policy target is the behaviour policy (or, reanalysed, the
target network's policy), and the representation is what the model learns for the agent.

It reaches the learner as an auxiliary loss (`learner.auxiliary`): `ModelLoss`, named `model`, which
`model_losses(cfg.model_loss)` builds when `model_loss.loss` is muzero (`configured_losses`, one of the built-ins
`auxiliary.CONFIGURED` lists). Data flow per learner update (`LearnerCore.train`):
1. `learner.replay_feed.ReplayFeed.replayed` samples unrolls from replay and cuts `model_loss.batch_size`
   sequences from them (`learner.model_batch.SequenceSampler`, the loss's `sampler`).
2. `loss(net, batch)` inside `Learner.update`: `targets` (n-step returns capped at episode ends,
   `model_targets.window_targets` masks), the unrolled predictions, per-term losses `[n, K + 1]`, and each
   sequence's priority sqrt(sum_k w_k value_mask_k l_v,k). `Learner` adds `loss_weight * total`.
3. `after_update(net)`: the target network's schedule (`learner.target_network.TargetNetwork`).
4. With `model_loss.priority model` (the loss's `replay_priorities`) the priorities go back to replay in place of
   V-trace's (`ReplayFeed.after_update`).

Stored targets: the values the learner computed for an unroll when it trained on it fresh
(`model_values [T+1, K]`, `model_final_values [T, K]` at truncated steps, reward units) and the behaviour
logits; `inserted_at` (learner version) gives its age for the dynamic horizon. Reanalysed sequences
(`reanalyze_ratio`) get both from the target network instead: its model value head on the stored
observations, and its policy head (softmax).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from levelray.contracts.config import MODEL_LOSS_TERMS, ModelLossConfig, RunConfig
from levelray.contracts.validate import check_model_loss_actions, lstm_model_loss_message
from levelray.learner import vtrace
from levelray.learner.auxiliary import (
    AuxiliaryFactory,
    AuxiliaryInputs,
    AuxiliaryLoss,
    AuxiliaryOutput,
    AuxiliarySetup,
)
from levelray.learner.device import host_to_device
from levelray.learner.model_batch import ModelBatch, SequenceSampler
from levelray.learner.model_targets import (
    ModelTargets,
    from_categorical,
    inverse_value_transform,
    linear_td_steps,
    make_support,
    nstep_returns,
    scale_gradient,
    step_weights,
    two_hot,
    value_transform,
    window_targets,
)
from levelray.learner.target_network import TargetNetwork


class _MLP(nn.Sequential):
    """`Linear -> ReLU -> Linear`, called as one module: the unroll calls the dynamics K times an update, and
    at CartPole's sizes the three inner module calls cost about as much as the products (this and the other
    fused paths below: benchmarks/RESULTS.md, "After the cost work"). A Sequential, so
    parameters and checkpoints keep their names (`0.weight`, `2.weight`, ...)."""

    def __init__(self, d_in: int, hidden: int, d_out: int):
        super().__init__(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, d_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first, _, second = self
        return F.linear(F.relu(F.linear(x, first.weight, first.bias)), second.weight, second.bias)


def min_max(latent: torch.Tensor) -> torch.Tensor:
    """`latent [N, D]` scaled to [0, 1] per row: `(s - min s) / (max s - min s)`, MuZero's (appendix G) and
    ALF's normalisation of the hidden state; a row whose span is below 1e-5 is divided by span + 1e-5
    (EfficientZero's guard), so a constant row maps to 0 instead of NaN."""
    lo = latent.min(dim=-1, keepdim=True).values
    span = latent.max(dim=-1, keepdim=True).values - lo
    return (latent - lo) / torch.where(span < 1e-5, span + 1e-5, span)


class LatentModel(nn.Module):
    """Dynamics, prediction heads and the consistency projection; the representation is the agent's torso.

    The model's latents are min-max normalised (`normalize`, `min_max`), as ALF's encoding and dynamics nets
    do: `encode(torso output)` is the model's copy of the torso's latent (the agent's own heads keep reading
    the torso as it is), and every dynamics output is normalised again. Unbounded, the latent the model loss
    trains drifted: the torso's feature RMS grew from 0.32 to 1.75 within ~60 updates on MiniGrid, saturating
    the policy tower. `dynamics(s [N, D], a [N]) -> s' [N, D]` is residual (`normalize(s + mlp([s, onehot(a)]))`),
    so an untrained model starts near "the latent persists" rather than at noise. The value, reward and
    game-over outputs start at exactly 0 (zero-initialised rows of the heads' output layer, as ALF's), so the
    first updates do not chase random predictions; the policy logits keep PyTorch's initialisation.
    `heads(s [N, D])` is MuZero's prediction function
    f, one hidden layer shared by every output: `value`/`reward` `[N, 2S+1]` logits (categorical) or `[N]`
    (scalar), `policy [N, A]` logits, `game_over [N]` a logit. One layer for all four heads rather than one
    each: at CartPole's sizes the update's cost is the number of small matrix products, not their size.
    `project` (EfficientZero's projection) is applied to both branches, `predict` to the online one.
    """

    def __init__(self, latent_dim: int, num_actions: int, cfg: ModelLossConfig):
        super().__init__()
        self.num_actions = num_actions
        width = 2 * cfg.support_size + 1 if cfg.value_repr == "categorical" else 1
        hidden = cfg.hidden_size
        self.transition = _MLP(latent_dim + num_actions, hidden, latent_dim)
        self.split = {"value": width, "reward": width, "policy": num_actions, "game_over": int(cfg.game_over)}
        self.prediction = _MLP(latent_dim, hidden, sum(self.split.values()))
        self.project = _MLP(latent_dim, hidden, hidden) if cfg.consistency_weight > 0 else None
        self.predict = _MLP(hidden, hidden, hidden) if cfg.consistency_weight > 0 else None
        self.normalize = min_max
        self._zero_init_scalar_heads()

    def _zero_init_scalar_heads(self) -> None:
        """Zero the output layer's rows of the value, reward and game-over heads (weights and biases)."""
        out, start = self.prediction[2], 0
        with torch.no_grad():
            for name, width in self.split.items():
                if name != "policy":
                    out.weight[start:start + width] = 0.0
                    out.bias[start:start + width] = 0.0
                start += width

    def encode(self, torso_latent: torch.Tensor) -> torch.Tensor:
        """The model's latent `s_0 [N, D]` of the torso's output `[N, D]`."""
        return self.normalize(torso_latent)

    def dynamics(self, latent: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.step(latent, F.one_hot(actions.long(), self.num_actions).to(latent.dtype))

    def step(self, latent: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
        """`dynamics` on one-hot actions `[N, A]` (the unroll makes all K steps' one-hots at once)."""
        return self.normalize(latent + self.transition(torch.cat([latent, onehot], dim=1)))

    def heads(self, latent: torch.Tensor) -> dict[str, torch.Tensor]:
        parts = torch.split(self.prediction(latent), list(self.split.values()), dim=-1)
        return {name: part for name, part in zip(self.split, parts, strict=True) if part.shape[-1]}


class MuZeroLoss:
    """The model loss's modules and target network (one per `Learner`): `targets` and `loss` of a `ModelBatch`,
    and `after_update`, the target network's schedule."""

    def __init__(self, net: nn.Module, num_actions: int, cfg: ModelLossConfig, *, discount: float,
                 device: torch.device):
        if not hasattr(net, "representation"):
            raise ValueError(f"model_loss.loss muzero needs a network with a representation(), "
                             f"got {type(net).__name__}")
        if getattr(net, "core", None) is not None:
            raise ValueError(lstm_model_loss_message(net.core.size, "muzero"))
        self.cfg = cfg
        self.discount = discount
        self.device = device
        self.module = LatentModel(net.latent_dim, num_actions, cfg).to(device)
        self.target = TargetNetwork(net, self.module, period=cfg.target_update_period, tau=cfg.target_update_tau)
        self.target_net, self.target_module = self.target.net, self.target.module  # loaded in place: stay valid
        categorical = cfg.value_repr == "categorical"
        self.support = make_support(cfg.support_size, step=cfg.support_step, device=device) if categorical else None
        # Made once rather than every update: the loss's terms in the order `loss` lays them out, their
        # weights in the total, the step weights and the offsets k = 0..K.
        K = cfg.num_unroll_steps
        self._terms = [name for name in MODEL_LOSS_TERMS if name != "game_over" or cfg.game_over]
        if cfg.consistency_weight <= 0:
            self._terms.remove("consistency")
        self._term_coefs = torch.tensor([cfg.consistency_weight if name == "consistency" else 1.0
                                         for name in self._terms], device=device)
        self._step_weights = step_weights(K, device=device).view(1, K + 1, 1)
        self._offsets = torch.arange(K + 1, device=device)

    @property
    def updates(self) -> int:
        """Learner updates counted by the target network's schedule."""
        return self.target.updates

    def after_update(self, net: nn.Module) -> None:
        """The target network's schedule, after every optimiser step."""
        self.target.after_update(net, self.module)

    # -- targets ---------------------------------------------------------------------------------
    def _tensor(self, x: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
        return host_to_device(x, self.device, dtype)

    def _decode(self, logits: torch.Tensor) -> torch.Tensor:
        """A value/reward head's output `[N, W]` -> scalar `[N]` in reward units."""
        if self.support is None:
            return logits.squeeze(-1)
        return inverse_value_transform(from_categorical(logits.softmax(-1), self.support, validate=False))

    @torch.no_grad()
    def _reanalyse(self, obs: torch.Tensor, final_obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Target network on stored observations `[T+1, m, ...]`: values `[T+1, m]`, V(final obs) `[M]`
        and policy targets `[T+1, m, A]` (probabilities)."""
        T1, m = obs.shape[:2]
        flat = obs.reshape(T1 * m, *obs.shape[2:])
        latent = self.target_module.encode(self.target_net.representation(flat))
        values = self._decode(self.target_module.heads(latent)["value"]).view(T1, m)
        policy = self.target_net.dist_params(flat).view(T1, m, -1).softmax(-1)
        final = (self._decode(self.target_module.heads(self.target_module.encode(
                     self.target_net.representation(final_obs)))["value"])
                 if len(final_obs) else obs.new_zeros(0, dtype=values.dtype))
        return values, final, policy

    @torch.no_grad()
    def targets(self, batch: ModelBatch, obs: torch.Tensor | None = None) -> tuple[ModelTargets, torch.Tensor]:
        """`ModelTargets` `[n, K + 1]` for every sequence (the first round(reanalyze_ratio * n) reanalysed),
        and the reanalysed flags `[n]`."""
        cfg = self.cfg
        K = cfg.num_unroll_steps
        obs = self._tensor(batch.obs) if obs is None else obs  # `loss` passes the copy it already made
        T, n = batch.rewards.shape
        values = self._tensor(batch.values)
        final_values = self._tensor(batch.final_values)
        n_re = int(round(cfg.reanalyze_ratio * n))
        p_re = None
        if n_re:
            sel = batch.final_obs_index[:, 1] < n_re
            v_re, f_re, p_re = self._reanalyse(obs[:, :n_re], self._tensor(batch.final_obs[sel]))
            values = torch.cat([v_re, values[:, n_re:]], dim=1)
            idx = self._tensor(batch.final_obs_index[sel], torch.long)
            final_values[:, :n_re] = 0.0
            final_values[idx[:, 0], idx[:, 1]] = f_re
        rewards = self._tensor(batch.rewards)
        terminated, truncated = self._tensor(batch.terminated), self._tensor(batch.truncated)
        discounts, folded = vtrace.episode_end_inputs(rewards, terminated, truncated, self.discount, final_values)
        td: int | torch.Tensor = cfg.td_steps
        if cfg.max_bootstrap_age > 0:
            steps = linear_td_steps(torch.from_numpy(batch.age), max_td_steps=cfg.td_steps,
                                    min_td_steps=cfg.min_td_steps, max_bootstrap_age=cfg.max_bootstrap_age)
            td = steps.to(self.device).view(1, n).expand(T, n).contiguous()
        z = nstep_returns(folded, discounts, values, td_steps=td)
        value_targets = torch.cat([z, values[T:]])  # z_T = V(x_T): nothing left to sum
        starts = self._tensor(batch.starts, torch.long)
        columns = torch.arange(n, device=self.device)
        reanalysed = columns < n_re
        # Without policy targets, window_targets gives the policy mask for T stored rows: what the stored
        # (behaviour) targets need, which exist for x_0 .. x_{T-1} only. The policy targets are gathered here,
        # and only the [n, K + 1] rows used are put through softmax (softmax is row-wise: the same values as
        # softmax over all [T, n] rows; at A = 2 that whole-tensor softmax alone took ~40 us).
        full = window_targets(rewards, terminated, truncated, value_targets, starts, columns, num_unroll_steps=K)
        step = starts.unsqueeze(1) + self._offsets  # [n, K + 1]: t + k
        col = columns.unsqueeze(1)
        behaviour = self._tensor(batch.behaviour_params)[step.clamp(max=T - 1), col]
        policy, policy_mask = behaviour.softmax(-1), full.policy_mask
        if n_re:  # the target network's policy exists at x_T too (T + 1 rows): masked only by episode ends
            alive = full.value_mask[:n_re] - full.terminal[:n_re]  # alive and absorbing are disjoint
            policy_mask = torch.cat([alive, policy_mask[n_re:]])
            policy = torch.cat([p_re[step[:n_re].clamp(max=T), col[:n_re]], policy[n_re:]])
        targets = ModelTargets(
            reward=full.reward, value=full.value, terminal=full.terminal, reward_mask=full.reward_mask,
            value_mask=full.value_mask, policy_mask=policy_mask, consistency_mask=full.consistency_mask,
            terminal_mask=full.terminal_mask, policy=torch.where(policy_mask.unsqueeze(-1) > 0, policy, 0),
        )
        return targets, reanalysed

    # -- the loss --------------------------------------------------------------------------------
    def unroll(self, net: nn.Module, obs0: torch.Tensor, actions: torch.Tensor) -> list[torch.Tensor]:
        """Latents `s_0 .. s_K [n, D]` from `obs0 [n, ...]` and `actions [n, K]`, for the heads.

        As MuZero's pseudocode and ALF's `train_step`: the heads read each dynamics output `s_k` as it is; only
        the copy passed on to the next dynamics step has its gradient scaled by `c = recurrent_gradient_scaling`
        (forward unchanged). So the gradient from step k's predictions (k >= 1) reaches `s_0` through k
        dynamics steps and k - 1 scalings: `c^(k-1) (d s_k / d s_0)^T`. The scaling keeps the gradient reaching
        the representation from growing with K, while the first step's predictions train it at full weight."""
        return self.unroll_latent(net.representation(obs0), actions)

    def unroll_latent(self, torso: torch.Tensor, actions: torch.Tensor) -> list[torch.Tensor]:
        """`unroll` from the torso's output `[n, D]` (the representation of the sequences' first observations)."""
        latents = [self.module.encode(torso)]
        onehot = F.one_hot(actions.long(), self.module.num_actions).to(latents[0].dtype)  # every step at once
        scale = float(self.cfg.recurrent_gradient_scaling)
        passed_on = latents[0]
        for k in range(actions.shape[1]):
            latents.append(self.module.step(passed_on, onehot[:, k]))
            passed_on = scale_gradient(latents[-1], scale)  # a view: the heads' reads of latents[-1] stay unscaled
        return latents

    def loss(self, net: nn.Module, batch: ModelBatch) -> tuple[torch.Tensor, dict[str, float], np.ndarray]:
        """(weighted total, metrics, per-sequence priorities [n]). Per-term losses are `[n, K + 1]`, masked,
        weighted by `step_weights`, summed over k and averaged over sequences with the replay importance
        weights; the total is the sum of the terms (consistency times `consistency_weight`).

        At CartPole's sizes the cost is the number of small ops, not their size, so the terms are computed
        together: the heads once on all `n (K + 1)` latents, value and reward in one two-hot cross-entropy,
        every term's `[n, K + 1]` losses in one tensor masked, weighted and reduced at once, and the metrics
        read back in one transfer."""
        K = self.cfg.num_unroll_steps
        obs = self._tensor(batch.obs)  # [T+1, n, ...] on the learner's device, once
        targets, reanalysed = self.targets(batch, obs)
        T, n = batch.rewards.shape
        starts = self._tensor(batch.starts, torch.long)
        columns = torch.arange(n, device=self.device).unsqueeze(1)
        steps = (starts.unsqueeze(1) + self._offsets[:K]).clamp(max=T - 1)  # [n, K]
        actions = self._tensor(batch.actions)[steps, columns]
        torso = net.representation(obs[starts, columns.squeeze(1)])  # [n, D]
        if not self.cfg.torso_gradient:  # the control arm: the model learns, the agent's torso is untouched
            torso = torso.detach()
        latents = self.unroll_latent(torso, actions)
        flat = torch.stack(latents, dim=1).reshape(n * (K + 1), -1)  # [n (K+1), D], sequence-major like the targets
        out = self.module.prediction(flat)  # the heads' outputs side by side (LatentModel.heads splits the same)
        real = None
        if self.module.project is not None:  # x_{t+k}, the consistency term's targets
            real = obs[(starts.unsqueeze(1) + self._offsets).clamp(max=T), columns]
        per_step = self._per_step_losses(flat, out, targets, real)
        # [n, K + 1, terms]: masked, step-weighted, summed over k; importance-weighted mean over sequences
        per_seq = (per_step * self._step_weights).sum(1)  # [n, terms]
        term_means = (per_seq * self._tensor(batch.weights).unsqueeze(1)).mean(0)  # [terms]
        total = (term_means * self._term_coefs).sum()
        with torch.no_grad():
            priorities = per_seq[:, 0].clamp(min=0).sqrt().cpu().numpy().astype(np.float64)
            metrics = self._metrics(out, targets, reanalysed, term_means, total)
            # what a regression would be traced to: the torso's scale, and how old the replayed data is
            metrics["feature_rms"] = float(torso.float().pow(2).mean().sqrt())
            metrics["model_batch_age"] = float(np.median(batch.age))  # learner updates since insertion
        return total, metrics, priorities

    def _per_step_losses(self, flat: torch.Tensor, out: torch.Tensor, targets: ModelTargets,
                         real: torch.Tensor | None) -> torch.Tensor:
        """Every term's masked loss `[n, K + 1, terms]` from the latents `flat [n (K+1), D]`, the heads' outputs
        `out [n (K+1), 2W + A (+1)]` and, with the consistency term, the real observations `real [n, K+1, ...]`."""
        m = self.module
        n, K1 = targets.value.shape
        N = n * K1
        W, A = m.split["value"], m.split["policy"]
        vr_target = torch.stack([targets.value, targets.reward], dim=-1).view(N, 2)
        vr_out = out[:, : 2 * W].view(N, 2, W)  # value and reward heads
        if self.support is None:
            vr_loss = (vr_out.squeeze(-1) - vr_target) ** 2
        else:
            probs = two_hot(value_transform(vr_target), self.support, validate=False)  # make_support's
            vr_loss = -(probs * vr_out.log_softmax(-1)).sum(-1)
        policy_l = -(targets.policy.view(N, A) * out[:, 2 * W : 2 * W + A].log_softmax(-1)).sum(-1, keepdim=True)
        parts, masks = [vr_loss, policy_l], [targets.value_mask, targets.reward_mask, targets.policy_mask]
        if "game_over" in self._terms:
            parts.append(F.binary_cross_entropy_with_logits(out[:, -1:], targets.terminal.view(N, 1),
                                                            reduction="none"))
            masks.append(targets.terminal_mask)
        if real is not None:
            with torch.no_grad():
                real_latent = self.target_net.representation(real.view(N, *real.shape[2:]))
                target_proj = self.target_module.project(self.target_module.encode(real_latent))
            cos = F.cosine_similarity(m.predict(m.project(flat)), target_proj, dim=-1)
            parts.append(-cos.unsqueeze(1))
            masks.append(targets.consistency_mask)
        return torch.cat(parts, dim=1).view(n, K1, len(parts) + 1) * torch.stack(masks, dim=-1)

    def _metrics(self, out: torch.Tensor, targets: ModelTargets, reanalysed: torch.Tensor,
                 term_means: torch.Tensor, total: torch.Tensor) -> dict[str, float]:
        """Per-term losses, the total and target statistics, read back from the device in one transfer."""
        n, K1 = targets.value.shape
        W = self.module.split["value"]
        value_pred = self._decode(out[:, :W].view(n, K1, W)[:, 0])
        vm0 = targets.value_mask[:, 0]
        stats = torch.stack([
            ((value_pred - targets.value[:, 0]).abs() * vm0).sum() / vm0.sum().clamp(min=1),
            targets.value_mask.mean(),
            targets.terminal.mean(),
            reanalysed.float().mean(),
            (targets.value * targets.value_mask).sum() / targets.value_mask.sum().clamp(min=1),
        ])
        values = torch.cat([term_means, total.view(1), stats]).tolist()
        metrics = {f"model_{name}_loss": v for name, v in zip(self._terms, values, strict=False)}
        metrics.update(zip(("model_loss", "model_value_error", "model_value_mask_fraction",
                            "model_absorbing_fraction", "model_reanalysed_fraction", "model_target_mean"),
                           values[len(self._terms):], strict=True))
        return metrics

    # -- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        module = {k: v.detach().to("cpu", copy=True) for k, v in self.module.state_dict().items()}
        return {"module": module, **self.target.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.module.load_state_dict(state["module"])
        self.target.load_state_dict(state)


class ModelLoss(AuxiliaryLoss):
    """`model_loss.loss muzero` as the learner's auxiliary loss `model`: a `MuZeroLoss` on the sequences its
    `SequenceSampler` cuts from replay, with `model_loss`'s weight, optimiser mode and clip; its priorities go
    back to replay with `model_loss.priority model`. Its checkpoint state is the `MuZeroLoss`'s with the sampler's
    generator (`rng`)."""

    name = "model"
    optimizer_option = "--model-optimizer"

    def __init__(self, cfg: ModelLossConfig, setup: AuxiliarySetup):
        check_model_loss_actions(cfg, setup.spec)
        self.weight, self.optimizer, self.grad_clip = cfg.loss_weight, cfg.optimizer, cfg.grad_clip
        self.muzero = MuZeroLoss(setup.model, setup.spec.num_actions, cfg, discount=setup.config.discount,
                                 device=setup.device)
        self.modules = (self.muzero.module,)
        self.sampler = SequenceSampler(cfg, setup.seed)
        self.replay_priorities = cfg.priority == "model"

    def loss(self, model: nn.Module, inputs: AuxiliaryInputs) -> AuxiliaryOutput:
        return AuxiliaryOutput(*self.muzero.loss(model, inputs.replayed))

    def after_step(self, model: nn.Module) -> None:
        self.muzero.after_update(model)

    def state_dict(self) -> dict[str, Any]:
        return {**self.muzero.state_dict(), "rng": self.sampler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.muzero.load_state_dict(state)
        self.sampler.load_state_dict(state["rng"])


def model_losses(cfg: ModelLossConfig | None) -> list[AuxiliaryFactory]:
    """The learner's auxiliary losses that `model_loss` asks for: `ModelLoss` with `loss muzero`, none with
    `none` (or no section)."""
    return [functools.partial(ModelLoss, cfg)] if cfg is not None and cfg.loss == "muzero" else []


def configured_losses(cfg: RunConfig) -> list[AuxiliaryFactory]:
    """What the run config's `model_loss` section turns on (`auxiliary.CONFIGURED`)."""
    return model_losses(cfg.model_loss)
