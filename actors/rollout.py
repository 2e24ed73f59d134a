"""Actor-side rollouts: an acting policy steps an env vector for fixed-length unrolls.

Used by the Ray `EnvActor` and by the inline runner alike: the actor's own CPU copy of the network
(`actors.acting.HostPolicy`), or a network on a torch device with the unroll kept there
(`actors.device_policy.DevicePolicy`, the inline backend's). Consecutive unrolls overlap by one
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

from levelray.actors.acting import HostPolicy
from levelray.actors.device_policy import DevicePolicy
from levelray.actors.env_vector import EnvVector, LevelDraws, StepResult
from levelray.actors.episode_scorer import EpisodeScorer
from levelray.actors.level_windows import LevelWindows
from levelray.contracts.config import LearnerConfig
from levelray.contracts.spec import EnvSpec

__all__ = ["RolloutWorker"]


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
        policy: DevicePolicy | None = None,
    ):
        """`level_draws`: the envs' level source when the level service feeds them (it knows which levels are
        replays); without one every step's `level_replayed` flag is False. `learner`: the run's learner section,
        for the network the actors run as the learner does (`model`, `hidden_sizes`, and `precision`: the torch
        network's arithmetic here too; the NumPy MLP path is float32); None: that section's defaults. `scorer`: scores
        each finished episode from this worker's own network (its values, or its logits), for the level service.
        `windows`: the actor's level windows (their `levels` are then `level_draws`); None: levels per episode.
        `policy`: a `DevicePolicy` to act through (the inline backend's fast path); None: a `HostPolicy` of this
        worker's own, seeded with `seed`, its weights set by `set_weights`."""
        learner = learner if learner is not None else LearnerConfig()
        self.envs = envs
        self._level_draws = level_draws
        self.scorer = scorer
        self.spec: EnvSpec = envs.spec
        self.T = unroll_length
        self.actor_id = actor_id
        self.env_ids = np.arange(env_id_offset, env_id_offset + envs.num_envs, dtype=np.int64)
        self.policy = policy if policy is not None else HostPolicy(self.spec, learner, envs.num_envs, seed)
        K = envs.num_envs
        self.windows = windows
        self.withheld = False  # the last unroll stays on the actor (an explore window's, under Robust PLR)
        if windows is not None:
            windows.begin()
        self._obs = envs.reset()
        self.last_values: np.ndarray | None = None  # [T, K] V(x_t) of the last unroll, where it computed them
        self._ep_return = np.zeros(K, dtype=np.float64)
        self._ep_length = np.zeros(K, dtype=np.int64)
        self.env_steps = 0
        self.episodes = 0

    @property
    def model(self) -> torch.nn.Module:
        """The network this worker acts with."""
        return self.policy.model

    @property
    def policy_version(self) -> int:
        return self.policy.policy_version

    def set_weights(self, version: int, weights: dict[str, np.ndarray]) -> None:
        """A `HostPolicy`'s weights, as the learner published them at `version`."""
        self.policy.set_weights(version, weights)

    @property
    def observation(self) -> np.ndarray:
        """The envs' current observation `[K, *obs_shape]` (what the next `act` sees)."""
        return self._obs

    def act(self, obs: np.ndarray, *, greedy: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """`HostPolicy.act`: actions and distribution parameters for `obs [K, ...]` (evaluation plays through it)."""
        return self.policy.act(obs, greedy=greedy)

    def observe(self, actions: np.ndarray, step: StepResult) -> None:
        """What a recurrent policy reads from the env step just taken with `actions` (`HostPolicy.observe`)."""
        self.policy.observe(actions, step)

    def unroll(self) -> dict:
        T, K, spec = self.T, self.envs.num_envs, self.spec
        if spec.discrete:
            actions = np.empty((T, K), dtype=np.int64)
        else:
            actions = np.empty((T, K, spec.action_dim), dtype=np.float32)
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
        success = np.zeros((T, K), dtype=bool)
        ended_return = np.zeros((T, K), dtype=np.float64)
        version = self.policy_version
        policy = self.policy
        policy.begin(T, self._obs, values=scorer is not None and scorer.needs_values,
                     host_params=scorer is not None and scorer.uses_logits)
        for t in range(T):
            actions[t] = policy.step(t, self._obs)
            if self._level_draws is not None:  # read before the step: an env that ends in it draws its next level
                replayed[t] = self._level_draws.replayed
            if closing and t == T - 1:
                windows.open_next()
            step = self.envs.step(actions[t])
            if closing and t == T - 1:
                cut[t] = windows.close(self.envs, step)  # restarted envs: their next step begins an episode
            policy.observe(actions[t], step)
            rewards[t], terminated[t], truncated[t], seeds[t] = (step.rewards, step.terminated, step.truncated,
                                                                 step.level_seeds)
            for k, o in step.final_obs.items():
                final_obs.append(o)
                final_index.append((t, k))
            self._end_episodes(step, cut[t], replayed[t], episodes, ended_return[t], success[t])
            self._obs = step.obs
        recorded = policy.end(self._obs)
        self.env_steps += T * K
        self.episodes += len(episodes[0])
        if windows is not None:
            windows.unroll_done()
            self.withheld = windows.withhold and not in_replay_window
        unroll = {
            **recorded.fields,
            "actions": actions,
            "rewards": rewards,
            "terminated": terminated,
            "truncated": truncated,
            "level_seeds": seeds,
            "level_replayed": replayed,
            "final_obs": (np.stack(final_obs) if final_obs
                          else np.empty((0, *spec.obs_shape), dtype=self._obs.dtype)),
            "final_obs_index": np.asarray(final_index, dtype=np.int64).reshape(-1, 2),
            "env_ids": self.env_ids.copy(),
            "policy_version": version,
            "actor_id": self.actor_id,
            "episode_returns": np.asarray(episodes[0], dtype=np.float64),
            "episode_lengths": np.asarray(episodes[1], dtype=np.int64),
            "episode_seeds": np.asarray(episodes[2], dtype=np.int64),
            "episode_replayed": np.asarray(episodes[3], dtype=bool),
        }
        self.last_values = recorded.values
        if scorer is not None:
            scorer.add({**unroll, "behaviour_params": recorded.host_params, "episode_success": success,
                        "episode_return": ended_return, "episode_cut": cut}, recorded.values)
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
