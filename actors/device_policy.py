"""`DevicePolicy`: a rollout worker's acting policy on a torch device, for the inline backend's fast path.

On one machine with one GPU the fastest layout is one process: the env vector steps on the CPU, the network acts on
the GPU for every env at once, and the unrolls stay on the GPU, where the learner trains on them (`actors.acting`
says how it pairs with `HostPolicy`). What crosses between host and device, per env step:

- the observations `[K, ...]`, once: written into a page-locked staging buffer and copied with `non_blocking`, so the
  copy is queued on the stream ahead of the forward pass instead of making the host wait for it;
- the actions `[K]`, once, back: the envs need them, so this is the step's one wait for the device;
- for a recurrent policy, `[K, 2]` float32 (the clipped reward and the episode start of the step just taken), the
  same way as the observations: the next step's extra input is built on the device from it and the actions there.

Nothing else waits for the device inside an unroll: values and distribution parameters are written into device
buffers, and come back to the host once per unroll and only where a level score reads them.

The network is shared, not copied: given the learner's own module (`model`) on the same device, the worker acts with
the weights the last update left, and `sync(version)` only records the version. The learner's value head may be in
PopArt's normalised units; `value_scale` then turns the values the level scores read into reward units.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from levelray.actors.acting import Recorded, ValueScale
from levelray.actors.env_vector import StepResult
from levelray.contracts.config import LearnerConfig
from levelray.contracts.spec import EnvSpec
from levelray.policy import distributions
from levelray.policy.models import resolve_model_kind
from levelray.policy.numpy_policy import NumpyPolicy
from levelray.policy.precision import autocast, compute_dtype
from levelray.policy.recurrent import unroll as recurrent_unroll
from levelray.policy.weights import load_numpy_weights


class DevicePolicy:
    """Acts with `model` (on `device`) for `num_envs` envs; `learner`: the run's learner section (the network's
    precision). On the CPU the feed-forward MLP runs in NumPy, as `HostPolicy`'s does (per-call dispatch costs more
    than its arithmetic at actor batch sizes)."""

    def __init__(self, model: nn.Module, spec: EnvSpec, learner: LearnerConfig, num_envs: int, seed: int,
                 device: torch.device, *, value_scale: ValueScale | None = None):
        self.model, self.spec, self.device = model, spec, torch.device(device)
        self._dtype = compute_dtype(learner.precision, self.device, resolve_model_kind(spec, learner.model),
                                    inference=True)
        self.numpy_policy = NumpyPolicy(model) if self._host_views() and NumpyPolicy.supports(model) else None
        self._value_scale = value_scale
        self.policy_version = 0
        self._gen = torch.Generator().manual_seed(seed)
        self._rng = np.random.default_rng(seed)
        self._pinned = self.device.type == "cuda"
        self._staging: torch.Tensor | None = None  # page-locked `[K, ...]` observations, made at the first step
        core = model.core
        # a recurrent policy's state `[2, K, N]` and next extra input `[K, E]` on the device; its episode starts `[K]`
        # on the host (where the env's flags are) and the last step's (reward, start) pairs `[K, 2]` both sides
        self._core_state = None if core is None else torch.zeros(2, num_envs, core.size, device=self.device)
        self._core_inputs = None if core is None else torch.zeros(num_envs, spec.core_input_size, device=self.device)
        self._episode_start = np.ones(num_envs, dtype=bool)
        self._step_flags = self._host(np.zeros((num_envs, 2), dtype=np.float32))
        self._step_flags_on_device = torch.zeros(num_envs, 2, device=self.device)
        self._step_flags_on_device[:, 1] = 1.0  # the first step after a reset begins every env's episode
        self._actions_on_device: torch.Tensor | None = None

    def _host(self, x: np.ndarray) -> torch.Tensor:
        """`x` as a host tensor the device can copy from without waiting: page-locked for CUDA."""
        t = torch.from_numpy(x)
        return t.pin_memory() if self._pinned else t

    def sync(self, version: int, weights: dict[str, np.ndarray] | None = None) -> None:
        """The learner is at `version`. `weights`: its published weights, for a network that is not the learner's
        own module (None: it is, and has them already)."""
        if weights is not None:
            load_numpy_weights(self.model, weights)
        if self.numpy_policy is not None:
            self.numpy_policy.refresh()
        self.policy_version = int(version)

    # -- one unroll ------------------------------------------------------------------------------
    def begin(self, T: int, obs: np.ndarray, *, values: bool, host_params: bool) -> None:
        """Fresh device buffers for an unroll of `T` steps from `obs [K, ...]` (the last unroll's belong to the
        learner now), and its Gumbel noise `[T, K, A]` in one copy."""
        K, device = len(obs), self.device
        self._obs = torch.empty((T + 1, *obs.shape), dtype=torch.from_numpy(obs[:0]).dtype, device=device)
        self._params = torch.empty(T, K, self.spec.policy_params, device=device)
        self._values = torch.empty(T, K, device=device) if values else None
        self._host_params = host_params
        self._noise = None
        if self.spec.discrete:
            self._noise = self._host(self._rng.gumbel(size=(T, K, self.spec.num_actions))).to(device, non_blocking=True)
        # On the CPU the buffers are also read and written as NumPy arrays (views), as `HostPolicy` does: at actor
        # batch sizes torch's per-call dispatch costs more than the work
        self._views = None
        if self._host_views():
            self._views = tuple(None if x is None else x.numpy() for x in (self._obs, self._params, self._values,
                                                                            self._noise))
        self._core = self._core_at_start()

    def step(self, t: int, obs: np.ndarray) -> np.ndarray:
        """Record step `t`'s `obs [K, ...]` on the device, run the network there, and return the actions chosen
        (the step's one wait for the device)."""
        self._copy_in(t, obs)
        if self.numpy_policy is not None:
            self._step_in_numpy(t, obs)
            return self._sample(t)
        with torch.inference_mode():  # written into the (normal) unroll buffers, which the learner's backward reads
            dist_params, values = self._forward(self._obs[t])
            self._params[t] = dist_params
            if self._values is not None:
                self._values[t] = self._in_reward_units(values)
            return self._sample(t)

    def observe(self, actions: np.ndarray, step: StepResult) -> None:
        """A recurrent policy's next extra input (the action taken, one-hot or its vector, and the reward clipped to
        [-1, 1]: `policy.recurrent.core_inputs`) and episode starts, from the step just taken."""
        if self._core_state is None:
            return
        self._episode_start = step.terminated | step.truncated
        flags = self._step_flags.numpy()
        flags[:, 0] = np.clip(step.rewards, -1.0, 1.0)
        flags[:, 1] = self._episode_start
        self._step_flags_on_device.copy_(self._step_flags, non_blocking=True)
        if self.spec.discrete:
            action_part = nn.functional.one_hot(self._actions_on_device, self.spec.num_actions).float()
        else:
            action_part = torch.from_numpy(np.asarray(actions, dtype=np.float32)).to(self.device)
        self._core_inputs = torch.cat([action_part, self._step_flags_on_device[:, :1]], dim=1)

    def end(self, obs: np.ndarray) -> Recorded:
        """The unroll's record, `obs [K, ...]` its bootstrap observation: device tensors (NumPy views on the CPU),
        and the values and parameters the level scores read, copied to the host once."""
        self._copy_in(len(self._obs) - 1, obs)
        fields = {"obs": self._obs, "behaviour_params": self._params, **self._core}
        if self.device.type == "cpu":
            fields = {key: value.numpy() for key, value in fields.items()}
        values = None if self._values is None else self._values.cpu().numpy()
        host_params = self._params.cpu().numpy() if self._host_params else None
        return Recorded(fields, values, host_params)

    # -- the network -----------------------------------------------------------------------------
    def _host_views(self) -> bool:
        """Whether the buffers are the host's memory, to be read and written as NumPy arrays: on the CPU."""
        return self.device.type == "cpu"

    def _copy_in(self, t: int, obs: np.ndarray) -> None:
        """`obs [K, ...]` into step `t` of the observation buffer: through the page-locked staging buffer on a GPU
        (its last copy is done: each step waits for its actions, which the stream computes after that copy)."""
        if self._views is not None:
            self._views[0][t] = obs
            return
        if not self._pinned:  # a device without page-locked copies
            self._obs[t].copy_(torch.from_numpy(obs))
            return
        if self._staging is None:
            self._staging = torch.empty(obs.shape, dtype=self._obs.dtype, pin_memory=True)
        self._staging.numpy()[...] = obs
        self._obs[t].copy_(self._staging, non_blocking=True)

    def _step_in_numpy(self, t: int, obs: np.ndarray) -> None:
        """The NumPy MLP's step `t` (on the CPU), into the buffers' NumPy views."""
        _, params, values, _ = self._views
        params[t] = self.numpy_policy.dist_params(obs)
        if values is not None:
            v = self.numpy_policy.values(obs)
            if self._value_scale is not None:
                sigma, mu = self._value_scale()
                v = v * sigma + mu
            values[t] = v

    def _forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The network's `(dist_params [K, P], values [K] or None)` on `x [K, ...]`, float32."""
        with_values = self._values is not None
        with autocast(self.device, self._dtype):
            if self._core_state is not None:
                self._start_episodes()
                starts = torch.zeros(1, len(x), dtype=torch.bool, device=self.device)
                dist_params, values, h, c = recurrent_unroll(self.model, x[None], self._core_inputs[None], starts,
                                                             self._core_state)
                self._core_state = torch.stack([h[0], c[0]])
                return dist_params[0].float(), values[0].float()
            if not with_values:
                return self.model.dist_params(x).float(), None
            dist_params, values = self.model(x)
            return dist_params.float(), values.float()

    def _in_reward_units(self, values: torch.Tensor) -> torch.Tensor:
        if self._value_scale is None:
            return values
        sigma, mu = self._value_scale()
        return values * sigma + mu

    def _sample(self, t: int) -> np.ndarray:
        """Step `t`'s actions on the host: argmax(logits + noise) in float64 (as `sample_categorical`), or a Gaussian
        draw from the host generator (as `HostPolicy`)."""
        if self.spec.discrete and self._views is not None:
            _, params, _, noise = self._views
            actions = np.argmax(params[t] + noise[t], axis=1)
            self._actions_on_device = torch.from_numpy(actions)
            return actions
        if self.spec.discrete:
            self._actions_on_device = torch.argmax(self._params[t].double() + self._noise[t], dim=1)
            return self._actions_on_device.cpu().numpy()
        return distributions.sample(self._params[t].cpu(), False, self._gen).numpy()

    def _start_episodes(self) -> None:
        """Zero the core state and extra input of the envs whose next step begins an episode (the flags of the last
        step, already on the device)."""
        if self._episode_start.any():
            keep = self._step_flags_on_device[:, 1:] == 0  # [K, 1]
            self._core_state = torch.where(keep, self._core_state, 0.0)
            self._core_inputs = torch.where(keep, self._core_inputs, 0.0)
            self._episode_start = np.zeros_like(self._episode_start)

    def _core_at_start(self) -> dict[str, torch.Tensor]:
        """A recurrent policy's `core_state` and `core_inputs` as the unroll's step 0 reads them ({} without a core)."""
        if self._core_state is None:
            return {}
        self._start_episodes()
        return {"core_state": self._core_state.clone(), "core_inputs": self._core_inputs.clone()}
