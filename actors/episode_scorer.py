"""PLR's level scores computed where the episodes are played: from the acting network's own outputs.

DCD, JaxUED and the PLR paper score a level with the values (or logits) of the network that played it. The actor
holds that network, so it scores each finished episode itself and tells the level service only the episode's
result (`contracts.levels.EpisodeResults`): the level service never sees step data, and the learner never talks
to it. An episode may span several unrolls: each env's open episode is carried from one unroll to the next and
scored when it ends, whole, by the level score `levels.strategy` names (`policy.level_scores.LEVEL_SCORES`: a
built-in, GAE with the learner's discount and `levels.gae_lambda` for gae, value_l1 and positive_value_loss, the
logits for the policy-based strategies, one_step_td_error; or a score of one's own by `module:attribute`). What the
score reads of the network's outputs (`policy.level_scores.score_reads`) is all the actor computes and carries.
"""

from __future__ import annotations

import numpy as np

from levelray.contracts.config import RunConfig
from levelray.contracts.levels import UNSCORED_STRATEGIES, EpisodeResults
from levelray.policy.level_scores import Episode, load_level_score, score_reads

# one unroll's part of an open episode: (rewards [n] float64, values [n] or None, policy params [n, P] or None)
Chunk = tuple[np.ndarray, np.ndarray | None, np.ndarray | None]


def _chunk(steps: tuple[np.ndarray, np.ndarray | None, np.ndarray | None], start: int, stop: int | None,
           k: int) -> Chunk:
    """Env `k`'s steps `[start, stop)` of an unroll's `(rewards, values, policy params)` `[T, K, ...]` (None kept)."""
    return tuple(None if x is None else x[start:stop, k] for x in steps)


def _joined(chunks: list[Chunk], i: int) -> np.ndarray | None:
    """Field `i` of an episode's chunks, in one array (None where the score does not read it)."""
    return None if chunks[0][i] is None else np.concatenate([c[i] for c in chunks])


class EpisodeScorer:
    """Per-env open episodes `[K]` and the finished ones' results, for one actor's env vector.

    `add(unroll, values)`: one unroll (`contracts.trajectory`'s fields `level_seeds`, `rewards`, `terminated`,
    `truncated`, `behaviour_params` `[T, K, ...]`, plus `episode_success [T, K]` and `episode_return [T, K]`, and
    optionally `episode_cut [T, K]`: episodes a level window's end cut, never scored; `level_replayed [T, K]`, where
    present, gives each result its `replayed` flag, else False) and the acting network's values `[T, K]` of its steps
    (None where the score does not read them); `take()` hands out the results finished since the last call.
    `strategy` names the level score (`policy.level_scores.load_level_score`: ConfigError naming `--level-strategy`
    for one that does not load)."""

    def __init__(self, strategy: str, num_envs: int, *, discount: float, gae_lambda: float):
        self.strategy = strategy
        self.discount = float(discount)
        self.gae_lambda = float(gae_lambda)
        # an unscored strategy (random, sequential) scores every episode 0 and reads nothing
        self.score = None if strategy in UNSCORED_STRATEGIES else load_level_score(strategy)
        reads = () if self.score is None else score_reads(self.score)
        self.needs_values = "values" in reads
        self.uses_logits = "policy_params" in reads  # the acting policy's outputs, a discrete policy's logits
        self._open: list[list[Chunk]] = [[] for _ in range(num_envs)]  # env k's open episode, from earlier unrolls
        self._results: list[tuple[int, float, int, float, bool, bool]] = []

    @classmethod
    def for_run(cls, cfg: RunConfig) -> EpisodeScorer:
        """The scorer of one actor of run `cfg`: its strategy, the learner's discount, `levels.gae_lambda`."""
        return cls(cfg.levels.strategy, cfg.actors.envs_per_actor, discount=cfg.learner.discount,
                   gae_lambda=cfg.levels.gae_lambda)

    def add(self, unroll: dict, values: np.ndarray | None) -> None:
        rewards = unroll["rewards"].astype(np.float64)
        dones = unroll["terminated"] | unroll["truncated"]
        if self.needs_values and values is None:
            values = np.zeros_like(rewards)
        steps = (rewards, values if self.needs_values else None,
                 unroll["behaviour_params"] if self.uses_logits else None)
        levels, success, returns = unroll["level_seeds"], unroll["episode_success"], unroll["episode_return"]
        # the flag each env's level was drawn with (`level_replayed [T, K]`): an episode's, at the step it ends
        flags = unroll.get("level_replayed")
        cut = unroll.get("episode_cut")
        ends_t, ends_k = np.nonzero(dones)
        order = np.lexsort((ends_k, ends_t))  # the order they ended: step, then env
        starts = np.zeros(dones.shape[1], dtype=np.int64)
        by_env: dict[int, list[int]] = {}
        for t, k in zip(ends_t.tolist(), ends_k.tolist(), strict=True):
            by_env.setdefault(k, []).append(t)
        finished: dict[tuple[int, int], tuple[int, float, int, float, bool, bool]] = {}
        for k, ts in by_env.items():
            for t in ts:
                chunks = [*self._open[k], _chunk(steps, int(starts[k]), t + 1, k)]
                self._open[k] = []
                if cut is None or not cut[t, k]:
                    level, solved = int(levels[t, k]), bool(success[t, k])
                    finished[(t, k)] = (level, self._score(chunks, solved, level), sum(c[0].size for c in chunks),
                                        float(returns[t, k]), solved, flags is not None and bool(flags[t, k]))
                starts[k] = t + 1
        T = dones.shape[0]
        for k in range(dones.shape[1]):
            if starts[k] < T:  # the policy outputs are copied: the unroll's own array is handed on with it
                r, v, p = _chunk(steps, int(starts[k]), None, k)
                self._open[k].append((r, v, None if p is None else p.copy()))
        ends = ((int(ends_t[i]), int(ends_k[i])) for i in order.tolist())
        self._results.extend(finished[end] for end in ends if end in finished)

    def _score(self, chunks: list[Chunk], solved: bool, level: int) -> float:
        """The score of the episode whose steps `chunks` hold (0 for an unscored strategy); ValueError naming the
        score where it is not a finite number (the level service would refuse the whole report)."""
        if self.score is None:
            return 0.0
        episode = Episode(np.concatenate([c[0] for c in chunks]), _joined(chunks, 1), _joined(chunks, 2), solved,
                          self.discount, self.gae_lambda)
        score = self.score(episode)
        if not isinstance(score, int | float | np.floating | np.integer) or not np.isfinite(score):
            raise ValueError(f"level score {self.strategy} (levels.strategy) gave {score!r} for an episode of level "
                             f"{level}: a level score must be a finite number")
        return float(score)

    def take(self) -> EpisodeResults | None:
        """The episodes finished since the last call, in the order they ended; None when there are none."""
        if not self._results:
            return None
        levels, scores, lengths, returns, solved, replayed = zip(*self._results, strict=True)
        self._results = []
        return EpisodeResults(
            levels=np.array(levels, dtype=np.int64),
            scores=np.array(scores, dtype=np.float64),
            lengths=np.array(lengths, dtype=np.int64),
            returns=np.array(returns, dtype=np.float64),
            solved=np.array(solved, dtype=bool),
            replayed=np.array(replayed, dtype=bool),
        )
