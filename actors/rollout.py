"""Actor-side rollouts: a local CPU copy of the policy steps an env vector for fixed-length unrolls.

Used by the Ray `EnvActor` and by the inline runner alike. Consecutive unrolls overlap by one
observation: `obs[T]` of one unroll (its bootstrap) is `obs[0]` of the next. With level windows
(`actors.level_windows`) the worker opens the next window at the last step of each, and says of each unroll whether
it stays on the actor (`withheld`: a Robust PLR explore window's).

A recurrent policy (`learner.lstm_size` > 0) carries each env's core state (h, c) and extra input (previous
action and reward, `policy.recurrent`) from step to step, and across unrolls. They are zeroed before the first
step of an episode: a step whose previous step was terminated or truncated (`observe`), or the first step after
the envs were reset. Every unroll carries them as its step 0 reads them (`core_state`, `core_inputs`). An env a
window's end restarts begins an episode too: its last step is marked truncated before `observe` reads it.
"""

from __future__ import annotations

import numpy as np
import torch

from levelray.actors.env_vector import EnvVector, LevelDraws, StepResult
from levelray.actors.episode_scorer import EpisodeScorer
from levelray.actors.level_windows import LevelWindows
from levelray.contracts.config import LearnerConfig
from levelray.contracts.spec import EnvSpec
from levelray.policy import distributions
from levelray.policy.models import build_model, resolve_model_kind
from levelray.policy.numpy_policy import NumpyPolicy
from levelray.policy.precision import autocast, compute_dtype
from levelray.policy.recurrent import core_inputs
from levelray.policy.recurrent import unroll as recurrent_unroll
from levelray.policy.weights import load_numpy_weights


def sample_categorical(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per row of `logits [K, A]` by the Gumbel-max trick: argmax(logits + Gumbel noise)
    is an exact sample of softmax(logits). Three NumPy calls, where torch.multinomial's per-call
    overhead dominates at actor batch sizes."""
    return np.argmax(logits + rng.gumbel(size=logits.shape), axis=1).astype(np.int64)


class RolloutWorker:
    """Produces unrolls in the format of `contracts.trajectory` from one env vector."""

    def __init__(
        self,
        envs: EnvVector,
        unroll_length: int,
        *,
        learner: LearnerConfig | None = None,
        actor_id: int = 0,
        env_id_offset: int = 0,
        seed: int = 0,
        level_draws: LevelDraws | None = None,
        scorer: EpisodeScorer | None = None,
        windows: LevelWindows | None = None,
    ):
        """`level_draws`: the envs' level source when the level service feeds them (it knows which levels are
        replays); without one every step's `level_replayed` flag is False. `learner`: the run's learner section,
        for the network the actors run as the learner does (`model`, `hidden_sizes`, and `precision`: the torch
        network's arithmetic here too; the NumPy MLP path is float32); None: that section's defaults. `scorer`: scores
        each finished episode from this worker's own network (its values, or its logits), for the level service.
        `windows`: the actor's level windows (their `levels` are then `level_draws`); None: levels per episode."""
        learner = learner if learner is not None else LearnerConfig()
        self.envs = envs
        self._level_draws = level_draws
        self.scorer = scorer
        self.spec: EnvSpec = envs.spec
        self.T = unroll_length
        self.actor_id = actor_id
        self.env_ids = np.arange(env_id_offset, env_id_offset + envs.num_envs, dtype=np.int64)
        self.model = build_model(self.spec, learner.model, tuple(learner.hidden_sizes), learner.lstm_size)
        self.model.eval()
        self._numpy_policy = NumpyPolicy(self.model) if NumpyPolicy.supports(self.model) else None
        self._dtype = compute_dtype(learner.precision, torch.device("cpu"),
                                    resolve_model_kind(self.spec, learner.model), inference=True)
        self.policy_version = 0
        self._gen = torch.Generator().manual_seed(seed)
        self._rng = np.random.default_rng(seed)
        K = envs.num_envs
        self.windows = windows
        self.withheld = False  # the last unroll stays on the actor (an explore window's, under Robust PLR)
        if windows is not None:
            windows.begin()
        self._obs = envs.reset()
        core = self.model.core
        # a recurrent policy's per-env state `[2, K, N]`, next extra input `[K, E]`, and episode starts `[K]`
        self._core_state = None if core is None else np.zeros((2, K, core.size), dtype=np.float32)
        self._core_inputs = None if core is None else np.zeros((K, self.spec.core_input_size), dtype=np.float32)
        self._episode_start = np.ones(K, dtype=bool)
        self.last_values: np.ndarray | None = None  # [T, K] V(x_t) of the last unroll, where it computed them
        self._ep_return = np.zeros(K, dtype=np.float64)
        self._ep_length = np.zeros(K, dtype=np.int64)
        self.env_steps = 0
        self.episodes = 0

    def set_weights(self, version: int, weights: dict[str, np.ndarray]) -> None:
        load_numpy_weights(self.model, weights)
        if self._numpy_policy is not None:
            self._numpy_policy.refresh()
        self.policy_version = int(version)

    @property
    def observation(self) -> np.ndarray:
        """The envs' current observation `[K, *obs_shape]` (what the next `act` sees)."""
        return self._obs

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
        if self._numpy_policy is not None:
            policy = self._numpy_policy
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

    def unroll(self) -> dict:
        T, K, spec = self.T, self.envs.num_envs, self.spec
        obs = np.empty((T + 1, K, *spec.obs_shape), dtype=self._obs.dtype)
        if spec.discrete:
            actions = np.empty((T, K), dtype=np.int64)
        else:
            actions = np.empty((T, K, spec.action_dim), dtype=np.float32)
        dist_params = np.empty((T, K, spec.policy_params), dtype=np.float32)
        rewards = np.empty((T, K), dtype=np.float32)
        terminated = np.empty((T, K), dtype=bool)
        truncated = np.empty((T, K), dtype=bool)
        seeds = np.empty((T, K), dtype=np.int64)
        replayed = np.zeros((T, K), dtype=bool)
        final_obs, final_index = [], []
        episodes: tuple[list, list, list, list] = ([], [], [], [])  # returns, lengths, seeds, replayed
        windows = self.windows
        closing = windows is not None and windows.closing
        in_replay_window = windows is not None and windows.replay
        cut = np.zeros((T, K), dtype=bool)
        scorer = self.scorer
        values = np.empty((T, K), dtype=np.float32) if scorer is not None and scorer.needs_values else None
        success = np.zeros((T, K), dtype=bool)
        ended_return = np.zeros((T, K), dtype=np.float64)
        version = self.policy_version
        core = self._core_at_start()
        for t in range(T):
            obs[t] = self._obs
            if values is None:
                actions[t], dist_params[t] = self.act(self._obs)
            else:
                actions[t], dist_params[t], values[t] = self.act_and_value(self._obs)
            if self._level_draws is not None:  # read before the step: an env that ends in it draws its next level
                replayed[t] = self._level_draws.replayed
            if closing and t == T - 1:
                windows.open_next()
            step = self.envs.step(actions[t])
            if closing and t == T - 1:
                cut[t] = windows.close(self.envs, step)  # restarted envs: their next step begins an episode
            self.observe(actions[t], step)
            rewards[t], terminated[t], truncated[t], seeds[t] = (step.rewards, step.terminated, step.truncated,
                                                                 step.level_seeds)
            for k, o in step.final_obs.items():
                final_obs.append(o)
                final_index.append((t, k))
            self._end_episodes(step, cut[t], replayed[t], episodes, ended_return[t], success[t])
            self._obs = step.obs
        obs[T] = self._obs
        self.env_steps += T * K
        self.episodes += len(episodes[0])
        if windows is not None:
            windows.unroll_done()
            self.withheld = windows.withhold and not in_replay_window
        unroll = {
            "obs": obs,
            "actions": actions,
            "rewards": rewards,
            "terminated": terminated,
            "truncated": truncated,
            "behaviour_params": dist_params,
            "level_seeds": seeds,
            "level_replayed": replayed,
            "final_obs": (np.stack(final_obs) if final_obs else np.empty((0, *spec.obs_shape), dtype=obs.dtype)),
            "final_obs_index": np.asarray(final_index, dtype=np.int64).reshape(-1, 2),
            "env_ids": self.env_ids.copy(),
            "policy_version": version,
            "actor_id": self.actor_id,
            "episode_returns": np.asarray(episodes[0], dtype=np.float64),
            "episode_lengths": np.asarray(episodes[1], dtype=np.int64),
            "episode_seeds": np.asarray(episodes[2], dtype=np.int64),
            "episode_replayed": np.asarray(episodes[3], dtype=bool),
            **core,
        }
        self.last_values = values
        if scorer is not None:
            scorer.add({**unroll, "episode_success": success, "episode_return": ended_return, "episode_cut": cut},
                       values)
        return unroll

    def _end_episodes(self, step, cut: np.ndarray, replayed: np.ndarray, episodes: tuple[list, list, list, list],
                      ended_return: np.ndarray, success: np.ndarray) -> None:
        """After one step: add each env's reward to its open episode and close the episodes that ended (`cut [K]`:
        ended by a level window's end, dropped uncounted), writing `ended_return [K]` and `success [K]`."""
        self._ep_return += step.episode_rewards  # the game's score, not the clipped reward
        self._ep_length += 1
        ended = np.flatnonzero(step.terminated | step.truncated)
        if not len(ended):
            return
        ended_return[ended] = self._ep_return[ended]
        for k, solved in step.success.items():
            success[k] = solved
        done = ended[~cut[ended]]
        for out, values in zip(episodes, (self._ep_return, self._ep_length, step.level_seeds, replayed), strict=True):
            out.extend(values[done].tolist())
        self._ep_return[ended] = 0.0
        self._ep_length[ended] = 0
