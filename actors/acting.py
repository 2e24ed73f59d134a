"""The acting policy of a rollout worker: what chooses each env step's actions and records what the learner needs.

`RolloutWorker` steps the envs and keeps the episode books; an acting policy does the rest of a step: record the
observation, run the network, sample the actions, and carry a recurrent core's state. Two implementations:

- `HostPolicy`: the actor's own CPU copy of the network, loaded by version from the learner's published weights,
  with NumPy buffers. Ray env actors and evaluation act through it.
- `DevicePolicy`: a network on a torch device (on one machine the learner's own network, so there is no weight copy)
  with the unroll's buffers on that device: the inline backend's fast path, on a GPU or the CPU. Per env step it
  makes one host-to-device copy of the observations (through page-locked memory, queued without waiting), runs the
  network and samples on the device, and copies the actions back once; a recurrent policy adds one small copy of the
  rewards and episode starts that its next input reads. An unroll's `obs`, `behaviour_params`, `core_state` and
  `core_inputs` stay on the device for the learner (`learner.batch` stacks them there).

Both sample a discrete action as argmax(logits + Gumbel noise) in float64, the noise drawn from one NumPy generator
seeded alike (`DevicePolicy` draws an unroll's `[T, K, A]` at once: the same numbers, in the same order, as `T`
draws of `[K, A]`), so on one device, from the same weights and env seeds, they make the same unrolls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import torch

from levelray.actors.env_vector import StepResult
from levelray.contracts.config import LearnerConfig
from levelray.contracts.spec import EnvSpec
from levelray.policy import distributions
from levelray.policy.models import build_model, resolve_model_kind
from levelray.policy.numpy_policy import NumpyPolicy
from levelray.policy.precision import autocast, compute_dtype
from levelray.policy.recurrent import core_inputs
from levelray.policy.recurrent import unroll as recurrent_unroll
from levelray.policy.weights import load_numpy_weights

# A value scale `() -> (sigma, mu)`: the acting network's values are `sigma * v + mu` in reward units (the learner's
# PopArt statistics, read when the values are computed); None: the network's values are in reward units already.
ValueScale = Callable[[], tuple[float, float]]


def sample_categorical(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per row of `logits [K, A]` by the Gumbel-max trick: argmax(logits + Gumbel noise)
    is an exact sample of softmax(logits). Three NumPy calls, where torch.multinomial's per-call
    overhead dominates at actor batch sizes."""
    return np.argmax(logits + rng.gumbel(size=logits.shape), axis=1).astype(np.int64)


class Recorded(NamedTuple):
    """One unroll's policy side. `fields`: `obs [T+1, K, ...]`, `behaviour_params [T, K, P]`, and a recurrent
    policy's `core_state [2, K, N]` and `core_inputs [K, E]` as its step 0 read them (NumPy, or tensors on the acting
    device). `values [T, K]`: V(x_t) in reward units, on the host, where asked for. `host_params [T, K, P]`:
    `behaviour_params` on the host, where asked for (the logit level scores read them)."""

    fields: dict[str, np.ndarray | torch.Tensor]
    values: np.ndarray | None
    host_params: np.ndarray | None


class HostPolicy:
    """The actor's own CPU network (`learner` section: `model`, `hidden_sizes`, `lstm_size`, `precision`), weights
    set by version (`set_weights`); the feed-forward MLP runs in NumPy (`policy.numpy_policy`)."""

    def __init__(self, spec: EnvSpec, learner: LearnerConfig, num_envs: int, seed: int):
        self.spec = spec
        with torch.random.fork_rng(devices=[]):  # weights before the first `set_weights` follow `seed` alone
            torch.manual_seed(seed)
            self.model = build_model(spec, learner.model, tuple(learner.hidden_sizes), learner.lstm_size)
        self.model.eval()
        self.numpy_policy = NumpyPolicy(self.model) if NumpyPolicy.supports(self.model) else None
        self._dtype = compute_dtype(learner.precision, torch.device("cpu"),
                                    resolve_model_kind(spec, learner.model), inference=True)
        self.policy_version = 0
        self._gen = torch.Generator().manual_seed(seed)
        self._rng = np.random.default_rng(seed)
        core = self.model.core
        # a recurrent policy's per-env state `[2, K, N]`, next extra input `[K, E]`, and episode starts `[K]`
        self._core_state = None if core is None else np.zeros((2, num_envs, core.size), dtype=np.float32)
        self._core_inputs = None if core is None else np.zeros((num_envs, spec.core_input_size), dtype=np.float32)
        self._episode_start = np.ones(num_envs, dtype=bool)

    def set_weights(self, version: int, weights: dict[str, np.ndarray]) -> None:
        load_numpy_weights(self.model, weights)
        if self.numpy_policy is not None:
            self.numpy_policy.refresh()
        self.policy_version = int(version)

    def sync(self, version: int, weights: dict[str, np.ndarray] | None = None) -> None:
        """`DevicePolicy.sync`'s form: this network is never the learner's own, so `weights` are required."""
        if weights is None:
            raise ValueError("a HostPolicy acts with its own copy of the network: sync needs the learner's weights")
        self.set_weights(version, weights)

    def act(self, obs: np.ndarray, *, greedy: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Sample actions for `obs [K, ...]` (or take the most likely ones: argmax / the Gaussian mean);
        returns (actions, the action distribution's parameters `dist_params [K, P]`). A recurrent policy's state
        moves on by one step: call it (or `act_and_value`) once per env step, and `observe` that step."""
        return self._choose(self._forward(obs, False)[0], greedy)

    def act_and_value(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`act(obs)` and the network's value V(x) `[K]` of `obs` (float32; the level scores' input), from one
        forward pass of the network."""
        dist_params, values = self._forward(obs, True)
        actions, dist_params = self._choose(dist_params, False)
        return actions, dist_params, values

    def observe(self, actions: np.ndarray, step: StepResult) -> None:
        """What a recurrent policy reads from the env step just taken with `actions`: the next step's extra input,
        and which envs begin an episode there (terminated or truncated), whose state is zeroed before it."""
        if self._core_state is not None:
            self._core_inputs = core_inputs(actions, step.rewards, self.spec)
            self._episode_start = step.terminated | step.truncated

    # -- one unroll ------------------------------------------------------------------------------
    def begin(self, T: int, obs: np.ndarray, *, values: bool, host_params: bool) -> None:
        """Fresh buffers for an unroll of `T` steps from `obs [K, ...]` (the last unroll's belong to its taker)."""
        self._obs = np.empty((T + 1, *obs.shape), dtype=obs.dtype)
        self._params = np.empty((T, len(obs), self.spec.policy_params), dtype=np.float32)
        self._values = np.empty((T, len(obs)), dtype=np.float32) if values else None
        self._core = self._core_at_start()

    def step(self, t: int, obs: np.ndarray) -> np.ndarray:
        """Record step `t`'s `obs [K, ...]` and choose its actions `[K]` (or `[K, D]`)."""
        self._obs[t] = obs
        if self._values is None:
            actions, self._params[t] = self.act(obs)
        else:
            actions, self._params[t], self._values[t] = self.act_and_value(obs)
        return actions

    def end(self, obs: np.ndarray) -> Recorded:
        """The unroll's record, `obs [K, ...]` its bootstrap observation."""
        self._obs[-1] = obs
        return Recorded({"obs": self._obs, "behaviour_params": self._params, **self._core}, self._values, self._params)

    # -- the network -----------------------------------------------------------------------------
    def _start_episodes(self) -> None:
        """Zero the core state and extra input of the envs whose next step begins an episode."""
        start = self._episode_start
        if start.any():
            self._core_state[:, start] = 0.0
            self._core_inputs[start] = 0.0
            self._episode_start = np.zeros_like(start)

    def _core_at_start(self) -> dict[str, np.ndarray]:
        """A recurrent policy's `core_state` and `core_inputs` as the unroll's step 0 reads them ({} without a core)."""
        if self._core_state is None:
            return {}
        self._start_episodes()
        return {"core_state": self._core_state.copy(), "core_inputs": self._core_inputs.copy()}

    def _forward(self, obs: np.ndarray, with_value: bool) -> tuple[np.ndarray, np.ndarray | None]:
        if self.numpy_policy is not None:
            policy = self.numpy_policy
            return policy.dist_params(obs), policy.values(obs) if with_value else None
        with torch.inference_mode(), autocast(torch.device("cpu"), self._dtype):
            x = torch.from_numpy(obs)
            if self._core_state is not None:
                self._start_episodes()
                extra, starts = torch.from_numpy(self._core_inputs)[None], torch.zeros(1, len(obs), dtype=torch.bool)
                dist_params, values, h, c = recurrent_unroll(self.model, x[None], extra, starts,
                                                             torch.from_numpy(self._core_state))
                self._core_state = torch.stack([h[0], c[0]]).numpy()
                return dist_params[0].float().numpy(), values[0].float().numpy()
            if not with_value:
                return self.model.dist_params(x).float().numpy(), None
            dist_params, values = self.model(x)
            return dist_params.float().numpy(), values.float().numpy()

    def _choose(self, dist_params: np.ndarray, greedy: bool) -> tuple[np.ndarray, np.ndarray]:
        if greedy:
            if self.spec.discrete:
                return np.argmax(dist_params, axis=1).astype(np.int64), dist_params
            return dist_params[:, : self.spec.action_dim].copy(), dist_params
        if self.spec.discrete:
            return sample_categorical(dist_params, self._rng), dist_params
        return distributions.sample(torch.from_numpy(dist_params), False, self._gen).numpy(), dist_params
