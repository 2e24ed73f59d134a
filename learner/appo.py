"""APPO: PPO's clipped surrogate on V-trace's advantages, several passes over each batch (`learner.algorithm appo`).

`Learner.step` hands the update to `Appo.passes` after its forward pass, V-trace's targets and PopArt's move on
them, which IMPALA and APPO share. Each pass recomputes the network's log-probabilities and values on its columns
and takes one gradient step (`optimisation.GradientStep`) on PPO's terms (`losses.ppo_losses`):

    r_t = pi_theta(a_t|x_t) / pi_0(a_t|x_t)
    L   = -mean(w min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)) + c_v 0.5 mean(w max((v_t - V)^2, (v_t - V_clip)^2))
          - c_H mean(w H)

`learner.appo.epochs` passes over the batch, each split into `learner.appo.minibatches` steps. The choices, and whom
each follows:

- `pi_0`, the ratio's denominator, is the learner's own policy at the start of the update, detached, as PPO's
  `pi_old` (openai/baselines ppo2, CleanRL ppo.py, DCD's `algos/ppo.py`, where it is also the policy that acted) and
  RLlib's APPO (its "old" target network, refreshed here at every update). The behaviour policy mu enters only
  through V-trace: `A_t = min(rho_pg, pi_0/mu) (r_t + gamma v_{t+1} - V(x_t))` carries the off-policy correction as
  in IMPALA, clipped, so stale and replayed unrolls are weighted as IMPALA weights them, and the surrogate's gradient
  at the first pass, `E_mu[min(rho, pi_0/mu) grad log pi A]`, is IMPALA's. Sample Factory instead takes the ratio
  against mu (a trust region around the acting policy, which binds from the first pass wherever there is policy
  lag); here the clip binds only once a pass has moved the policy, so one epoch of one minibatch is IMPALA's step
  with PPO's options (advantage normalisation), and the trust region is the passes'.
- V-trace's targets `v_s` and advantages are computed once per update, from the network as it was at its start
  (the forward pass IMPALA's step is taken on), and held fixed over the passes, as PPO's GAE targets are
  (baselines, CleanRL, DCD), not recomputed per minibatch from the moving network as Sample Factory does: every pass
  then regresses on one target and PopArt moves once per update. At policy lag 0 (rho = c = 1) the targets are
  GAE's lambda-returns; the policy's advantage is V-trace's, `r_t + gamma v_{t+1} - V(x_t)`, which is GAE's
  `delta_t + gamma lambda A_{t+1}` at lambda = 1 only (IMPALA, Sample Factory and RLlib use V-trace's too). So one
  epoch at lag 0 and lambda 1 is on-policy PPO's gradient (tests/test_appo.py computes PPO apart and compares).
- Minibatches are whole env columns (each column one env's unroll, with its `core_state` for an LSTM), drawn by a
  fresh permutation of the columns every epoch: DCD's `recurrent_generator` (whole env rollouts per minibatch) and
  Sample Factory's whole-trajectory minibatches with `recurrence = rollout`; feed-forward PPO (CleanRL) shuffles
  single steps instead. The permutation comes from the learner's seed, version and epoch, so a resumed run draws
  the same ones.
- Advantage normalisation (`learner.appo.normalize_advantages`): `(A - mean) / (std + 1e-5)` over the batch's trained
  steps, once per update (DCD; CleanRL and baselines normalise each minibatch, which is the same with one).
- Value clipping (`learner.appo.value_clip`): `V_clip = V_0 + clip(V - V_0, -eps_v, eps_v)` around the update's
  start, in the value head's units (PopArt's normalised ones with value normalisation, reward units without), with
  the pessimistic max of baselines/CleanRL/DCD; a separate epsilon as Sample Factory's `ppo_clip_value` (DCD,
  baselines and CleanRL reuse the policy's). Off by default, as RLlib's APPO has none.
- Losses are means over the trained steps of each step's minibatch, as IMPALA's over its batch (`losses`). With
  several minibatches the update's forward pass over the whole batch (with gradients: the auxiliary losses read it)
  gives the targets only, its activations held until the update is queued; each step runs its own.
- Auxiliary losses run once per update, on the whole batch, their gradients added at the first pass: their own
  batch (a replay sample) is drawn once per update.

What an update reports: the mean over its passes of each loss term and gradient norm, and of `clip_fraction` (the
trained steps whose ratio is outside `1 +- eps`: 0 at the first pass, rising as the passes move the policy) and
`approx_kl` (an estimate of KL(pi_0 || pi_theta), `losses.PpoLosses`).

Host reads: none more than IMPALA's. The passes are queued without a read: the minibatch columns are drawn on the
host, their trained steps counted on the host mask, and each step's skip (a NaN/Inf loss or gradient) is decided on
the device; the update is taken (a new version) where any pass's step was, so `Learner.settle` reads one flag as for
IMPALA. PopArt's head is rescaled by the first pass whose step is taken (a device flag), once per update (a pass
after a skipped one reads its values under the moved statistics before that rescale: rare, and its value term
only). What holds
for IMPALA's step holds for each pass: RMSprop reads its flag on the host, and with several learners each pass's
trained-step count and gradients are all-reduced (read on the host), so a pass costs such a read there.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np
import torch

from levelray.contracts.config import AppoConfig
from levelray.learner.data_parallel import DataParallel
from levelray.learner.device import host_to_device
from levelray.learner.losses import Forward, PpoLosses, ppo_losses
from levelray.learner.optimisation import GradientStep, StepResult
from levelray.learner.value_normalization import ValueHead
from levelray.learner.vtrace import VTraceReturns

ADVANTAGE_EPS = 1e-5  # DCD's `algos/ppo.py` (baselines and CleanRL add 1e-8): a batch of equal advantages stays 0
# What a pass's forward pass reads of the batch, each field's env-column axis (`contracts.trajectory`)
FORWARD_FIELDS = {"obs": 1, "actions": 1, "rewards": 1, "terminated": 1, "truncated": 1, "core_state": 1,
                  "core_inputs": 0}


class Learner(Protocol):
    """What the passes use of the learner (`learner.Learner`, which calls them with itself): its forward pass and
    loss terms, value head, gradient step, version and ranks."""

    value_norm: ValueHead
    gradient_step: GradientStep
    data_parallel: DataParallel | None
    version: int

    def _forward(self, batch: dict[str, Any]) -> Forward: ...

    def _loss_terms(self, forward: Forward, vt: VTraceReturns, weights: torch.Tensor,
                    appo: PassTargets | None = None) -> dict[str, torch.Tensor]: ...


class PassTargets(NamedTuple):
    """What every pass reads, fixed for the update, each `[T, B]` on the learner's device."""

    old_log_probs: torch.Tensor  # log pi_0(a_t|x_t): the policy at the update's start (the ratio's denominator)
    advantages: torch.Tensor  # V-trace's policy-gradient advantages in the head's units (standardised if asked)
    vs: torch.Tensor  # V-trace's value targets in the head's units
    old_values: torch.Tensor  # V_0(x_t) in the head's units: the value clip's centre
    clip: float
    value_clip: float

    def columns(self, index: torch.Tensor | None) -> PassTargets:
        """The targets of env columns `index [b]` (None: all)."""
        if index is None:
            return self
        return self._replace(**{name: getattr(self, name).index_select(1, index)
                                for name in ("old_log_probs", "advantages", "vs", "old_values")})

    def losses(self, log_probs: torch.Tensor, values: torch.Tensor, entropies: torch.Tensor,
               **terms: Any) -> PpoLosses:
        """PPO's terms (`losses.ppo_losses`) of a pass's `log_probs` and `values [T, b]` (in the head's units)."""
        return ppo_losses(log_probs, self.old_log_probs, self.advantages, self.vs, values, self.old_values,
                          entropies, clip=self.clip, value_clip=self.value_clip, **terms)


def standardise(x: torch.Tensor, trained: torch.Tensor) -> torch.Tensor:
    """`(x - mean) / (std + ADVANTAGE_EPS)`, the mean and (unbiased) standard deviation over the steps `trained [T, B]`
    only, on the device (a masked step's value is any: its weight in the loss is 0)."""
    n = trained.sum().to(x.dtype)
    mean = torch.where(trained, x, 0.0).sum() / n.clamp(min=1.0)
    var = torch.where(trained, (x - mean).square(), 0.0).sum() / (n - 1.0).clamp(min=1.0)
    return (x - mean) / (var.sqrt() + ADVANTAGE_EPS)


def _take(x: np.ndarray | torch.Tensor, columns: np.ndarray, axis: int) -> np.ndarray | torch.Tensor:
    """`x`'s env columns `columns` along `axis`: a host array on the host, a device tensor on its device."""
    if isinstance(x, torch.Tensor):
        return x.index_select(axis, host_to_device(columns, x.device))
    return np.take(x, columns, axis=axis)


def forward_batch(batch: dict[str, Any], columns: np.ndarray | None) -> dict[str, Any]:
    """What a pass's forward pass reads of `batch`, on env columns `columns` (None: all): no final observations,
    whose values only V-trace's targets needed."""
    return {key: value if columns is None else _take(value, columns, axis)
            for key, axis in FORWARD_FIELDS.items() if (value := batch.get(key)) is not None}


class Appo:
    """APPO's passes for one learner (`learner.appo`), seeded by the learner's seed."""

    def __init__(self, config: AppoConfig, seed: int):
        self.config = config
        self.seed = seed

    def targets(self, norm: ValueHead, forward: Forward, vt: VTraceReturns, weights: torch.Tensor) -> PassTargets:
        """The update's fixed targets, from its forward pass and V-trace, in the head's units under the statistics
        this batch moved (as IMPALA's loss reads them)."""
        T = vt.vs.shape[0]
        advantages = norm.normalize_advantages(vt.pg_advantages)
        if self.config.normalize_advantages:
            advantages = standardise(advantages, weights > 0)
        return PassTargets(forward.log_probs.detach(), advantages, norm.normalize(vt.vs),
                           norm.normalize(forward.values[:T].detach()), self.config.clip, self.config.value_clip)

    def minibatches(self, columns: int, version: int, epoch: int) -> list[np.ndarray | None]:
        """Each step's env columns in `epoch` of the update to `version` (`[None]`: one step on all of them): a
        permutation of the `columns` split into `learner.appo.minibatches` near-equal parts, each sorted."""
        m = self.config.minibatches
        if m == 1:
            return [None]
        if columns < m:
            raise ValueError(f"learner.appo.minibatches = {m} is more than the batch's {columns} env columns: a "
                             f"minibatch is whole columns")
        order = np.random.default_rng([self.seed, version, epoch]).permutation(columns)
        return [np.sort(part) for part in np.array_split(order, m)]

    def passes(self, learner: Learner, batch: dict[str, Any], forward: Forward, vt: VTraceReturns,
               weights: torch.Tensor, auxiliary: list[torch.Tensor | None], union: int
               ) -> tuple[dict[str, torch.Tensor], torch.Tensor, StepResult | None]:
        """The update's passes, each a gradient step: `(terms, total, step)` as IMPALA's step has them, the mean
        over the passes (`_combined`); step None where nothing is trained (`union` 0: the terms of `forward`).
        `auxiliary`: each auxiliary loss's weighted loss (None: it did not run), stepped on at the first pass."""
        targets = self.targets(learner.value_norm, forward, vt, weights)
        done: list[tuple[dict[str, torch.Tensor], torch.Tensor, StepResult]] = []
        pending = torch.ones((), dtype=torch.bool, device=weights.device)  # no step taken yet: PopArt's POP to come
        for epoch in range(self.config.epochs if union else 0):
            for columns in self.minibatches(weights.shape[1], learner.version, epoch):
                trained = _trained(batch, columns, weights.shape)
                everyone = trained if learner.data_parallel is None else learner.data_parallel.union_count(trained)
                if not everyone:  # no rank trains a step of these columns: no step
                    continue
                index = None if columns is None else host_to_device(columns, weights.device)
                here = forward if columns is None and epoch == 0 else learner._forward(forward_batch(batch, columns))
                mine = weights if index is None else weights.index_select(1, index)
                terms = learner._loss_terms(here, vt, mine, targets.columns(index))
                aux = auxiliary if not done else [None] * len(auxiliary)
                total = terms["total"] + sum(term for term in aux if term is not None)
                step = learner.gradient_step(total, terms["total"], aux, trained / everyone,
                                             before_clip=lambda applied, first=pending:
                                             learner.value_norm.rescale_head(applied & first))
                pending = pending & ~step.applied
                done.append(({k: v.detach() for k, v in terms.items()}, total.detach(), step))
        if not done:
            terms = learner._loss_terms(forward, vt, weights, targets)
            return terms, terms["total"], None
        return _combined(done)


def _trained(batch: dict[str, Any], columns: np.ndarray | None, shape: torch.Size) -> int:
    """The trained steps of `columns` (None: all) of a batch of `shape [T, B]`, counted on its host `mask` (every
    step without one)."""
    mask = batch.get("mask")
    if mask is None:
        return shape[0] * (shape[1] if columns is None else len(columns))
    return int(np.count_nonzero(mask if columns is None else mask[:, columns]))


def _combined(done: list[tuple[dict[str, torch.Tensor], torch.Tensor, StepResult]]
              ) -> tuple[dict[str, torch.Tensor], torch.Tensor, StepResult]:
    """The passes' `(terms, total, step)` as one update's: each term, the total and the gradient norm the mean over
    the passes; taken where any pass's step was; the first pass's auxiliary metrics, and the mean `clip_fraction` and
    `approx_kl` (device scalars, read with the other metrics)."""
    steps = [step for _, _, step in done]
    device = done[0][1].device
    terms = {key: torch.stack([t[key] for t, _, _ in done]).mean() for key in done[0][0]}
    extra = {key: terms.pop(key) for key in ("clip_fraction", "approx_kl")}
    applied = torch.stack([step.applied.to(device) for step in steps]).any()
    grad_norm = torch.stack([step.grad_norm.to(device, torch.float32) for step in steps]).mean()
    total = torch.stack([total for _, total, _ in done]).mean()
    return terms, total, StepResult(applied, grad_norm, {**steps[0].metrics, **extra})
