"""SFL, Sampling For Learnability (Rutherford, Beukman, Willi, Lacerda, Hawes, Foerster, "No Regrets: Investigating
and Improving Regret Approximations for Curriculum Discovery", NeurIPS 2024), as a level source: `--level-source
sfl` (config `levels.source`, its settings `levels.sfl`, `contracts.config_sfl`).

PLR's scores were found to track the success rate rather than regret, so its buffers fill with levels the agent
already solves. SFL scores a level by its learnability p(1 - p), p the current policy's success rate on it: highest
for levels solved half the time, 0 for those always or never solved. As `amacrutherford/sampling-for-learnability`
runs it (`sfl/train/minigrid_sfl.py`), one cycle is:

1. evaluate (`get_learnability_set`): the current policy plays `NUM_BATCHES x BATCH_SIZE` random levels, each for
   `ROLLOUT_STEPS` steps with the level replayed at every episode end (`AutoReplayWrapper`), without gradient; a
   level's p is the success rate over the episodes completed in the rollout (at most 10), learnability p(1 - p);
2. keep the `NUM_TO_SAVE` levels of highest learnability (`argsort(learnability)[-NUM_TO_SAVE:]`);
3. train for `EVAL_FREQ` updates, each update's envs `NUM_ENVS_FROM_SAMPLED` levels drawn uniformly with replacement
   from those (`randint`) and `NUM_ENVS_TO_GENERATE` fresh random levels; then 1 again, with the trained policy.

Here, with the actors playing and the learner training apart (pure NumPy; the level service wraps it):

- **evaluate**: every draw hands out a play of a candidate, flagged not trained (`replayed` False: under Robust PLR's
  `levels.robust`, which SFL requires, its steps carry no gradient), so the learner waits as SFL's does. The
  `episodes` plays of each of the batch's `num_candidates` distinct random levels are handed out round robin (the
  j-th play to candidate j mod C): each is handed out `episodes` times, to whichever envs draw next, and its p is
  the share of its reported plays that were solved (`EpisodeResults.solved`; a play counts when its result comes
  back flagged not trained, `EpisodeResults.replayed`, so a level that is also a training level on a fixed set is
  never mixed up).
- **the tail, and lost plays**: once every play is handed out, draws are the training mix (of the buffer the last
  batch chose; fresh levels alone before the first) while the last plays come back: the actors' prefetched levels
  and open episodes take a second or so, which SFL's learner, waiting on one synchronous computation, never has.
  The batch closes when every candidate has its `episodes` plays reported, or, where some never come back (an actor
  killed mid-batch: its prefetched and open plays die with it), once the batch has been idle on both clocks: no play
  of it handed out or reported for `play_timeout_s` seconds, and the env steps of training episodes reported since
  its last play was handed out at least those its reported plays took (`batch_steps`, time to measure the whole batch
  again). Env steps alone do not tell a lost play from one still queued: on Ray an actor plays the levels it
  prefetched before the batch began (about a second of them, `actors.env_actor.SeedPrefetcher`) ahead of its plays,
  while its other envs report training episodes, so a batch with no play back yet has `batch_steps` 0; the seconds
  wait for the queues, the steps for an inline run, whose seconds also pass while its learner trains and its envs
  wait. It then refreshes from what was reported: each candidate's p over its plays that came back, a candidate none
  of whose plays came back left out (SFL's code would give it a NaN learnability, which `argsort` puts at the top).
  So a killed actor loses only its own plays (`num_lost_plays`); a play reported after its batch closed is not used
  (`num_late_plays`).
- **refresh**: when a batch closes, the buffer becomes its `buffer_size` candidates of highest learnability (the
  earlier candidate first on ties), with their p; the source then trains until `refresh_steps` env steps of
  training episodes (flagged trained) have been reported since, and starts the next batch.
- **train**: every draw is flagged trained: a buffered level (uniform) with probability `buffer_fraction`, else a
  fresh random level. SFL fixes the split per update over its envs, each env keeping its level for a whole
  256-step rollout; here the split is per episode (a Bernoulli draw), each episode on a level of its own.

A fixed level set (`--num-levels N`) is the space the levels come from (a batch holds at most its N levels); an
unbounded one draws seeds of `[start_level, MAX_SEED)`. Results for ids outside the space are refused.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from levelray.contracts.config import ConfigError, EnvConfig, LevelConfig
from levelray.contracts.families import reports_success
from levelray.contracts.levels import EpisodeResults
from levelray.contracts.rng import make_rng
from levelray.level_service.checks import as_int_array, check_real, checked_config, episode_columns
from levelray.level_service.curriculum import CurriculumSetup, LevelSource, LevelView
from levelray.level_service.sampler_state import config_state
from levelray.level_service.sfl_state import SFL_STATE_VERSION, LevelSpace, read_sfl_state
from levelray.level_service.slots import check_draw_request
from levelray.level_service.spaces import CURRICULA

__all__ = ["SFL", "learnability"]

SFL_COUNT_KEYS = (
    "num_samples", "num_replays", "num_new", "num_episodes", "num_update_calls", "num_batches",
    "num_candidate_plays", "num_plays_reported", "num_lost_plays", "num_late_plays", "num_trained_steps",
    "num_untrained_steps",
)


def learnability(solved: np.ndarray, plays: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`(p(1 - p), p)` `[C]` of levels with `solved [C]` of `plays [C]` (>= 1) episodes solved: SFL's score."""
    p = np.asarray(solved, dtype=np.float64) / np.asarray(plays, dtype=np.float64)
    return p * (1.0 - p), p


@CURRICULA.register("sfl")
class SFL:
    """Sampling For Learnability over a level space (see the module doc). `seeds`: a fixed set `[n]`, or None for the
    unbounded space from `start_level`; `config`: the run's `levels` section (`config.sfl` its settings); `rng` seeds
    the candidates, the mix and the buffer's draws."""

    editor = None  # SFL makes no levels: every one is a seed of its space
    COUNT_KEYS = SFL_COUNT_KEYS

    def __init__(self, seeds, config: LevelConfig | None = None, *, start_level: int = 0, discount: float = 0.99,
                 rng=None, clock: Callable[[], float] = time.monotonic):
        self.config = checked_config(LevelConfig(source="sfl") if config is None else config)
        self.discount = check_real("discount", discount, 0.0, 1.0)
        self._space = LevelSpace(seeds, start_level)
        self._rng = make_rng(rng)
        self._clock = clock  # seconds, for the lost plays' idle time (a test's own clock)
        self._counts = dict.fromkeys(SFL_COUNT_KEYS, 0)
        self._buffer = np.zeros(0, dtype=np.int64)  # [k] the levels trained on beside fresh ones
        self._learnability = np.zeros(0)  # [k] their p(1 - p) when their batch closed
        self._success = np.zeros(0)  # [k] their p
        self._trained_steps = 0  # env steps of training episodes reported since the last refresh
        self._new_batch()

    # ------------------------------------------------------------------ a run's source
    @classmethod
    def check_run(cls, levels: LevelConfig, env: EnvConfig | None) -> None:
        """What SFL needs of a run (`level_service.spaces.check_curriculum`, before it starts; `for_run` again):
        ConfigError naming the flag. `env` None (a source built alone) skips what needs the env."""
        if not levels.robust:
            raise ConfigError("--level-source sfl (levels.source) plays its candidate levels without gradient, "
                              "which needs --level-robust (levels.robust: only levels drawn flagged replayed are "
                              "trained on)")
        if levels.editor != "none":
            raise ConfigError(f"--level-source sfl (levels.source) makes no levels: levels.editor must be none, "
                              f"not {levels.editor} (an editor edits PLR's level buffer)")
        if env is not None and env.num_levels == 0 and levels.window > 0:
            raise ConfigError(f"--level-source sfl (levels.source) draws a level per episode: set --level-window 0 "
                              f"(levels.window is {levels.window}; level windows are PLR's level buffer's)")
        if env is not None and not reports_success(env):
            raise ConfigError(f"--level-source sfl (levels.source) learns from success rates, but env {env.id} does "
                              f"not say whether an episode reached its goal (its env family has no reports_success): "
                              f"use a family that does, such as maze:<W>x<H>, minigrid:<name> or procgen:<game>")

    @classmethod
    def for_run(cls, setup: CurriculumSetup) -> SFL:
        """SFL over the run's level space (a fixed set or the unbounded one); ConfigError as `check_run`."""
        cls.check_run(setup.levels, setup.env)
        return cls(setup.seeds, setup.levels, start_level=setup.start_level, discount=setup.discount, rng=setup.rng)

    def check_same_space(self, saved: LevelSource, what: str) -> None:
        """ValueError unless `saved` (read back) is SFL over this source's level space."""
        if not isinstance(saved, SFL) or not saved._space.same_as(self._space):
            raise ValueError(f"{what} was not written for {self._space.words()}, this run's level space")

    # ------------------------------------------------------------------ the batch of candidates
    def _new_batch(self) -> None:
        """Phase evaluate: a batch of distinct random candidates, none of its plays handed out yet."""
        self._phase = "evaluate"
        self._candidates = self._space.distinct(self._rng, self.config.sfl.num_candidates)  # [C]
        self._index = {int(level): i for i, level in enumerate(self._candidates.tolist())}
        c = self._candidates.size
        self._plays = np.zeros(c, dtype=np.int64)  # [C] plays reported
        self._solved = np.zeros(c, dtype=np.int64)  # [C] of those, solved
        self._handed = 0  # plays handed out, of C * episodes
        self._batch_steps = 0  # env steps of the plays reported
        self._tail_steps = 0  # env steps trained on reported since the last play was handed out
        self._moved_at = self._clock()  # when a play of the batch was last handed out or reported

    def _close_batch(self) -> None:
        """Phase train: the buffer is the batch's `buffer_size` candidates of highest learnability (SFL's top-k),
        among those with a play reported."""
        played = np.flatnonzero(self._plays > 0)  # [m] a candidate none of whose plays came back has no p
        score, p = learnability(self._solved[played], self._plays[played])
        top = np.argsort(-score, kind="stable")[: self.config.sfl.buffer_size]  # [k] highest first; ties: earlier
        self._buffer, self._learnability, self._success = self._candidates[played[top]], score[top], p[top]
        self._phase, self._trained_steps = "train", 0
        self._counts["num_batches"] += 1
        self._counts["num_lost_plays"] += int(np.maximum(self.config.sfl.episodes - self._plays, 0).sum())

    def _plays_left(self) -> int:
        return self._candidates.size * self.config.sfl.episodes - self._handed

    def _candidate_plays(self, n: int) -> np.ndarray:
        """The next `n` plays `[n]` (candidate indices, `n` at most the plays left): play j goes to candidate
        j mod C, so each candidate's plays are spread over the batch and over the actors that draw them."""
        picks = (self._handed + np.arange(n, dtype=np.int64)) % self._candidates.size
        self._handed += n
        self._counts["num_candidate_plays"] += n
        if n:
            self._moved_at = self._clock()
        return picks

    # ------------------------------------------------------------------ draws
    def draw(self) -> tuple[int, bool]:
        """One level for an episode start: `(level id, trained)` (`draw_many(1)`)."""
        ids, flags = self.draw_many(1)
        return int(ids[0]), bool(flags[0])

    def draw_many(self, n: int, kind: str = "any") -> tuple[np.ndarray, np.ndarray]:
        """`n` levels: `(ids [n] int64, replayed [n] bool)`, `replayed` meaning trained on. "any": the phase's
        (candidate plays, flagged False, while a batch is measured; the training mix, flagged True, after);
        "replay": the training mix whatever the phase (fresh levels alone before the first buffer); "new": candidate
        plays while a batch has some left, else fresh levels flagged False (played, never trained on or counted)."""
        check_draw_request(n, kind)
        n = int(n)
        self._counts["num_samples"] += n
        plays = min(n, self._plays_left()) if self._phase == "evaluate" and kind != "replay" else 0
        ids, flags = np.empty(n, dtype=np.int64), np.zeros(n, dtype=bool)  # [n] each
        ids[:plays] = self._candidates[self._candidate_plays(plays)]
        if kind == "new":
            ids[plays:] = self._space.random(self._rng, n - plays)
        else:  # the training mix: after a batch, in its tail, or asked for
            ids[plays:], flags[plays:] = self._training_levels(n - plays), True
        self._counts["num_replays"] += int(flags.sum())
        self._counts["num_new"] += int(n - flags.sum())
        return ids, flags

    def _training_levels(self, n: int) -> np.ndarray:
        """`n` training levels `[n]`: each a buffered level (uniform) with probability `buffer_fraction`, else a
        fresh random one."""
        ids = self._space.random(self._rng, n)
        if self._buffer.size:
            buffered = np.flatnonzero(self._rng.random(n) < self.config.sfl.buffer_fraction)
            ids[buffered] = self._buffer[self._rng.integers(self._buffer.size, size=buffered.size)]
        return ids

    def replay_probability(self) -> float:
        """The probability that the next draw is trained on: 0 while a batch has plays to hand out, else 1."""
        return 0.0 if self._phase == "evaluate" and self._plays_left() else 1.0

    # ------------------------------------------------------------------ results
    def update_with_episodes(self, results: EpisodeResults) -> None:
        """Fold finished episodes in (see the module doc): a candidate's plays (flagged not trained) into its success
        rate, training episodes' steps into the refresh period. Every field, and every level id, is checked first;
        `results.replayed` must be given."""
        levels, _ = episode_columns(results)
        if results.replayed is None:
            raise ValueError("replayed must be a boolean array: SFL tells a candidate's plays (False) from training "
                             "episodes (True) by it")
        outside = ~self._space.contains(levels)
        if outside.any():
            raise ValueError(f"levels holds level id {int(levels[outside][0])}, not a level of {self._space.words()}")
        trained = np.asarray(results.replayed, dtype=bool)
        solved = np.asarray(results.solved, dtype=bool)
        lengths = as_int_array("lengths", results.lengths, 1)
        steps = int(lengths[trained].sum())
        self._counts["num_trained_steps"] += steps
        self._counts["num_untrained_steps"] += int(lengths[~trained].sum())
        if self._phase == "train":
            self._trained_steps += steps
        elif not self._plays_left():  # the batch's tail: the clock a lost play is given up by
            self._tail_steps += steps
        self._count_plays(levels[~trained], solved[~trained], lengths[~trained])
        self._counts["num_episodes"] += int(levels.size)
        self._counts["num_update_calls"] += 1
        self._advance()

    def _advance(self) -> None:
        """A batch closes with every candidate's plays reported, or with plays lost (see the module doc); a buffer
        trained on for `refresh_steps` is replaced by the next batch's."""
        if self._phase == "evaluate" and ((self._plays >= self.config.sfl.episodes).all() or self._plays_lost()):
            self._close_batch()
        elif self._phase == "train" and self._trained_steps >= self.config.sfl.refresh_steps:
            self._new_batch()

    def _plays_lost(self) -> bool:
        """Whether the plays still out are given up: every play handed out, and the batch idle on both clocks."""
        return (not self._plays_left() and self._tail_steps >= max(self._batch_steps, 1)
                and self._clock() - self._moved_at >= self.config.sfl.play_timeout_s)

    def _count_plays(self, levels: np.ndarray, solved: np.ndarray, lengths: np.ndarray) -> None:
        """Plays `levels [m]` (not trained on) with `solved [m]` and `lengths [m]`: those of the batch being measured
        count."""
        index = np.array([self._index.get(level, -1) for level in levels.tolist()], dtype=np.int64)
        counted = index >= 0 if self._phase == "evaluate" else np.zeros(index.size, dtype=bool)
        np.add.at(self._plays, index[counted], 1)
        np.add.at(self._solved, index[counted], solved[counted].astype(np.int64))
        self._batch_steps += int(lengths[counted].sum())
        self._counts["num_plays_reported"] += int(counted.sum())
        if counted.any():
            self._moved_at = self._clock()
        self._counts["num_late_plays"] += int((~counted).sum())

    # ------------------------------------------------------------------ reading
    def sample_weights(self) -> np.ndarray:
        """The training distribution over the buffer `[k]`: uniform (SFL's `randint`); empty before the first."""
        k = self._buffer.size
        return np.full(k, 1.0 / k) if k else np.zeros(0)

    def view(self) -> LevelView:
        """The buffer: its levels, their learnability as the score, no staleness (SFL keeps none)."""
        k = self._buffer.size
        return LevelView(self._buffer.copy(), np.ones(k, dtype=bool), self._learnability.copy(),
                         np.zeros(k, dtype=np.int64), self.sample_weights(), self.config.sfl.buffer_size, True)

    @property
    def level_statistics(self) -> BufferMeasures:
        """Its own measures of the levels it holds (`level_service.service` adds them to the family's)."""
        return BufferMeasures(self._buffer, self._learnability, self._success)

    def counters(self) -> dict[str, int]:
        """Draws (`num_replays` trained, `num_new` not), episodes, batches closed, candidate plays handed out,
        reported, lost and reported too late, and the env steps trained and not trained on."""
        return dict(self._counts)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything, as plain values and arrays for `contracts.snapshot.packb` (`from_state_dict` reads it)."""
        return {
            "version": SFL_STATE_VERSION,
            "kind": "sfl",
            "config": config_state(self.config, self.discount),
            "seeds": None if self._space.seeds is None else self._space.seeds.copy(),
            "start_level": self._space.start_level,
            "phase": self._phase,
            "candidates": self._candidates.copy(),
            "plays": self._plays.copy(),
            "solved": self._solved.copy(),
            "handed": self._handed,
            "batch_steps": self._batch_steps,
            "tail_steps": self._tail_steps,
            "buffer": self._buffer.copy(),
            "learnability": self._learnability.copy(),
            "success": self._success.copy(),
            "trained_steps": self._trained_steps,
            "counts": dict(self._counts),
            "rng": self._rng.bit_generator.state,
        }

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> SFL:
        """The source a `state_dict()` describes; ValueError naming the first bad field. Plays handed out before the
        state was written and not reported in it are lost plays (see the module doc), and their idle seconds are
        taken as passed: a resumed run's actors are new, so those plays went with the processes that held them, and
        a run resumed between a sweep's budgets must not wait on the wall clock (its result would depend on the
        machine's speed). The batch then closes on the env steps' clock alone, as it would for plays reported late by
        live actors after a level service restarted under them."""
        st = read_sfl_state(d, SFL_COUNT_KEYS)
        obj = cls(st.space.seeds, st.config, start_level=st.space.start_level, discount=st.discount, rng=0)
        obj._rng, obj._phase, obj._counts = st.rng, st.phase, st.counts
        obj._candidates, obj._plays, obj._solved = st.candidates, st.plays, st.solved
        obj._index = {int(level): i for i, level in enumerate(st.candidates.tolist())}
        obj._handed, obj._batch_steps, obj._tail_steps = st.handed, st.batch_steps, st.tail_steps
        obj._buffer, obj._learnability, obj._success = st.buffer, st.learnability, st.success
        obj._trained_steps = st.trained_steps
        obj._moved_at = -math.inf
        obj._advance()  # a state that was due to move on (its config's settings changed, say) does so now
        return obj


class BufferMeasures:
    """SFL's measures of its buffer, a `contracts.families.LevelStatistics` (so they flow as a family's do: into
    `metrics.jsonl`, `levelray status` and Prometheus): the mean learnability and success rate of the levels `ids`
    among the buffer's, as measured when their batch closed."""

    descriptions = {
        "levels_mean_learnability": "SFL runs: mean learnability p(1 - p) of the buffered levels, p the success rate "
                                    "measured when they were chosen",
        "levels_mean_success_rate": "SFL runs: mean success rate p of the buffered levels, as measured when they were "
                                    "chosen",
    }

    def __init__(self, buffer: np.ndarray, score: np.ndarray, success: np.ndarray):
        self.buffer, self.score, self.success = buffer, score, success  # [k] each

    def summary(self, ids: np.ndarray) -> dict[str, float | None]:
        held = np.isin(self.buffer, np.asarray(ids, dtype=np.int64))  # [k]
        if not held.any():
            return dict.fromkeys(self.descriptions)
        return {"levels_mean_learnability": float(self.score[held].mean()),
                "levels_mean_success_rate": float(self.success[held].mean())}
