"""PLR's level scores computed where the episodes are played: from the acting network's own outputs.

DCD, JaxUED and the PLR paper score a level with the values (or logits) of the network that played it. The actor
holds that network, so it scores each finished episode itself and tells the level service only the episode's
result (`contracts.levels.EpisodeResults`): the level service never sees step data, and the learner never talks
to it. An episode may span several unrolls: each env's open episode is carried from one unroll to the next and
scored when it ends (`policy.level_scores.episode_score`: GAE with the learner's discount and
`levels.gae_lambda` for gae, value_l1 and positive_value_loss; the logits' step scores for the policy-based
strategies; one_step_td_error).
"""

from __future__ import annotations

import numpy as np

from levelray.contracts.config import RunConfig
from levelray.contracts.levels import LOGIT_STRATEGIES, UNSCORED_STRATEGIES, EpisodeResults
from levelray.policy.level_scores import LOGIT_SCORES, episode_score


class EpisodeScorer:
    """Per-env open episodes `[K]` and the finished ones' results, for one actor's env vector.

    `add(unroll, values)`: one unroll (`contracts.trajectory`'s fields `level_seeds`, `rewards`, `terminated`,
    `truncated`, `behaviour_params` `[T, K, ...]`, plus `episode_success [T, K]` and `episode_return [T, K]`, and
    optionally `episode_cut [T, K]`: episodes a level window's end cut, never scored) and the acting network's values
    `[T, K]` of its steps (None for the logit strategies); `take()` hands out the results finished since the last
    call."""

    def __init__(self, strategy: str, num_envs: int, *, discount: float, gae_lambda: float):
        self.strategy = strategy
        self.discount = float(discount)
        self.gae_lambda = float(gae_lambda)
        self.uses_logits = strategy in LOGIT_STRATEGIES
        self.needs_values = strategy not in LOGIT_STRATEGIES and strategy not in UNSCORED_STRATEGIES
        # env k's open episode: chunks of (rewards, values or logit step scores) from earlier unrolls
        self._open: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(num_envs)]
        self._results: list[tuple[int, float, int, float, bool]] = []

    @classmethod
    def for_run(cls, cfg: RunConfig) -> EpisodeScorer:
        """The scorer of one actor of run `cfg`: its strategy, the learner's discount, `levels.gae_lambda`."""
        return cls(cfg.levels.strategy, cfg.actors.envs_per_actor, discount=cfg.learner.discount,
                   gae_lambda=cfg.levels.gae_lambda)

    def add(self, unroll: dict, values: np.ndarray | None) -> None:
        rewards = unroll["rewards"].astype(np.float64)
        dones = unroll["terminated"] | unroll["truncated"]
        per_step = LOGIT_SCORES[self.strategy](unroll["behaviour_params"]) if self.uses_logits else values
        if per_step is None:
            per_step = np.zeros_like(rewards)
        levels, success, returns = unroll["level_seeds"], unroll["episode_success"], unroll["episode_return"]
        cut = unroll.get("episode_cut")
        ends_t, ends_k = np.nonzero(dones)
        order = np.lexsort((ends_k, ends_t))  # the order they ended: step, then env
        starts = np.zeros(dones.shape[1], dtype=np.int64)
        by_env: dict[int, list[int]] = {}
        for t, k in zip(ends_t.tolist(), ends_k.tolist(), strict=True):
            by_env.setdefault(k, []).append(t)
        finished: dict[tuple[int, int], tuple[int, float, int, float, bool]] = {}
        for k, ts in by_env.items():
            for t in ts:
                chunks = [*self._open[k], (rewards[starts[k]: t + 1, k], per_step[starts[k]: t + 1, k])]
                self._open[k] = []
                r = np.concatenate([c[0] for c in chunks])
                s = np.concatenate([c[1] for c in chunks])
                if cut is None or not cut[t, k]:
                    finished[(t, k)] = (int(levels[t, k]), self._score(r, s), int(r.size), float(returns[t, k]),
                                        bool(success[t, k]))
                starts[k] = t + 1
        T = dones.shape[0]
        for k in range(dones.shape[1]):
            if starts[k] < T:
                self._open[k].append((rewards[starts[k]:, k], per_step[starts[k]:, k]))
        ends = ((int(ends_t[i]), int(ends_k[i])) for i in order.tolist())
        self._results.extend(finished[end] for end in ends if end in finished)

    def _score(self, rewards: np.ndarray, per_step: np.ndarray) -> float:
        if self.uses_logits:
            return episode_score(self.strategy, logit_scores=per_step)
        if not self.needs_values:
            return 0.0
        return episode_score(self.strategy, rewards=rewards, values=per_step, discount=self.discount,
                             gae_lambda=self.gae_lambda)

    def take(self) -> EpisodeResults | None:
        """The episodes finished since the last call, in the order they ended; None when there are none."""
        if not self._results:
            return None
        levels, scores, lengths, returns, solved = zip(*self._results, strict=True)
        self._results = []
        return EpisodeResults(
            levels=np.array(levels, dtype=np.int64),
            scores=np.array(scores, dtype=np.float64),
            lengths=np.array(lengths, dtype=np.int64),
            returns=np.array(returns, dtype=np.float64),
            solved=np.array(solved, dtype=bool),
        )
