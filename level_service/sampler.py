"""Prioritized Level Replay (PLR) level sampler over a fixed set of seeds, pure NumPy (no Ray, no torch).

Algorithm: Jiang, Grefenstette, Rocktaschel, "Prioritized Level Replay" (2021), as implemented by the
authors' `level-replay` code and DI-engine's `LevelSampler`.  Semantics and defaults follow those, with
the reference bugs fixed:

* No transform ever writes into the stored scores; `power` clips signed scores (gae) at 0; every
  transform is computed in log space / with max-subtraction so that temperatures near 0 give no NaN;
  `rank` gives tied scores the same (best, "1224" competition) rank, so ties do not depend on sort order.
* `max` / `eps_greedy` split the greedy mass evenly over exactly tied maxima (the reference picks one
  tie at random on every call, so its distribution is not a function of the scores).
* A mixture component whose weights are all zero (e.g. all staleness 0 right after the first replay) is
  uniform over seen levels; the reference left it unnormalised, so its mixture summed to
  1 - staleness_coef and `np.random.choice` raised.
* Episodes are scored whole, where they were played (the actors, `actors.episode_scorer`, with the score
  functions of `policy.level_scores`): an episode that spans several unrolls is one score, never its last
  fragment's.

The draws, staleness and scores are `level_service.slots`'s, which the level buffer shares (the transforms and
the EWA in `level_service.transforms`, the staleness trees in `level_service.staleness`); this class holds what
a fixed set adds: its seeds, the seen set and the replay schedule. It is a `level_service.curriculum.LevelSource`.

Design decisions
----------------
Seen levels.  As in the reference, a level leaves the unseen set when a score is committed for it; being
*sampled* does not make it seen.  A level is seen once the score of its first finished episode is committed
(`update_with_episodes`).  Both the score part and the staleness part of the replay distribution are over seen
levels only (the reference ranked unseen levels too, which let an unseen 0 outrank a seen negative score).

Replay distribution.  P = (1 - staleness_coef) * P_score + staleness_coef * P_staleness.  A component whose
transformed weights are all zero (e.g. `power` of all-zero scores, or all-zero staleness) is taken as
uniform over the seen levels, so P always sums to 1 once a level is seen (before that, `sample_weights()`
is all zeros and `sample()` draws an unseen level).

Sampling cost.  `sample()` never rebuilds P (`level_service.slots`).  It draws the mixture component first
(probability staleness_coef for staleness), then:
  * score component: a CDF over the seen levels is cached and rebuilt lazily (O(n log n) for rank) only
    after scores or the seen set changed; a draw is one `searchsorted`, O(log n).
  * staleness component, `power` transform with staleness_temperature == 1 (the default): an O(log n)
    descent of the Fenwick trees of `level_service.staleness`, and one O(log n) point update per sample.
    The trees are built vectorised (cumsum) after the seen set changes by many levels, else updated
    point-wise.
  * staleness component, `constant`: uniform over the cached list of seen levels, O(1).
  * staleness component, any other transform/temperature: P_staleness is recomputed vectorised (O(n)) for
    that draw only, i.e. expected cost staleness_coef * O(n) per sample.  Documented, not the default.
  * unseen draw: uniform over a cached index array of unseen levels, O(1).
Staleness is kept as a global sample counter minus a per-level "last sampled at" counter; every `sample()`
(any strategy) advances it, and a draw weighs the staleness as it stood before it.

Multiple episodes of the same level committed in one call are applied as successive EWA updates in the order
they ended, in closed form (`transforms.ewa_update`).

Every public mutator validates all of its input before mutating anything and raises ValueError naming the
bad field and the expected form; on error the sampler is unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from levelray.contracts.levels import SCHEDULES, STRATEGIES, TRANSFORMS, UNSCORED_STRATEGIES
from levelray.level_service.checks import as_int_array
from levelray.level_service.curriculum import CurriculumSetup, LevelSource, LevelView
from levelray.level_service.editors import make_editor
from levelray.level_service.sampler_state import STATE_VERSION, config_state, pending_state, read_state
from levelray.level_service.slots import LevelSlots, check_draw_request
from levelray.level_service.staleness import StalenessTree
from levelray.level_service.transforms import ewa_update

__all__ = ["LevelSampler", "STRATEGIES", "TRANSFORMS", "SCHEDULES"]


class LevelSampler(LevelSlots):
    """Prioritized Level Replay sampler over a fixed set of integer level seeds.  See module docstring.

    `config` is the run's `levels` section (its `snapshot_interval_s` belongs to the service and is only
    carried along); `discount` is the learner's, read by `one_step_td_error`. A fixed set has no editor: ACCEL
    edits only a level buffer's levels.
    """

    COUNT_KEYS = ("num_samples", "num_replays", "num_episodes", "num_update_calls", "num_dropped_fragments")

    def __init__(self, seeds, config=None, *, discount: float = 0.99, rng=None):
        seeds_arr = as_int_array("seeds", seeds, 1)
        n = seeds_arr.size
        if n == 0:
            raise ValueError("seeds must be a non-empty 1-D sequence of distinct integers")
        if np.unique(seeds_arr).size != n:
            raise ValueError("seeds must be distinct integers; got duplicates")
        self._init_slots(config, discount, rng, n, tree=True)
        self._n = n
        self._seeds = seeds_arr.copy()
        self._seed_list = self._seeds.tolist()
        order = np.argsort(self._seeds, kind="stable")
        self._sorted_seeds = self._seeds[order]
        self._sorted_pos = order.astype(np.int64)
        self._seed_lo = int(self._sorted_seeds[0])
        self._contiguous = bool(np.array_equal(self._seeds, np.arange(self._seed_lo, self._seed_lo + n)))
        self._seen = np.zeros(n, dtype=bool)
        self._num_seen = 0
        self._next_seed_index = 0
        self._seen_idx: np.ndarray | None = None
        self._unseen_idx: np.ndarray | None = None

    @classmethod
    def for_run(cls, setup: CurriculumSetup) -> LevelSampler:
        """PLR over the run's fixed set (`level_service.curriculum.LevelSource.for_run`): ValueError naming
        `levels.source` on an unbounded space, or `levels.editor` for an editor (it edits a level buffer's)."""
        if setup.seeds is None:
            raise ValueError(f"levels.source {setup.levels.source} runs over a fixed level set (env.num_levels "
                             f"> 0, --num-levels N), not an unbounded level space")
        make_editor(setup.env, setup.levels, unbounded=False)  # None, or the refusal of any editor on a fixed set
        return cls(setup.seeds, setup.levels, discount=setup.discount, rng=setup.rng)

    def check_same_space(self, saved: LevelSource, what: str) -> None:
        """ValueError unless `saved` (read back) is a fixed set of the same seeds, in the same order."""
        if not isinstance(saved, LevelSampler) or not np.array_equal(saved.seeds, self._seeds):
            size = saved.num_levels if isinstance(saved, LevelSampler) else "an unbounded space of"
            raise ValueError(f"{what} was written for a different seed set ({size} levels) than the "
                             f"{self._n} seeds given")

    # ------------------------------------------------------------------ the held set: the seen levels
    def _held(self) -> np.ndarray:
        if self._seen_idx is None:
            self._seen_idx = np.flatnonzero(self._seen)
        return self._seen_idx

    def _num_held(self) -> int:
        return self._num_seen

    def _get_unseen_idx(self) -> np.ndarray:
        if self._unseen_idx is None:
            self._unseen_idx = np.flatnonzero(~self._seen)
        return self._unseen_idx

    # ------------------------------------------------------------------ sampling
    def sample(self) -> int:
        """The seed of `draw()`."""
        return self.draw()[0]

    def draw(self, kind: str = "any") -> tuple[int, bool]:
        """Draw one level: `(seed, replayed)`, `replayed` False for an unseen level (and for every draw of `random`
        and `sequential`); advances staleness. `kind` as in `draw_many`."""
        i, replayed = self._sample_index(kind)
        self._counter = counter = self._counter + 1
        if self._tree is not None and self._seen[i]:  # the trees follow the drawn level's staleness
            self._tree.add(i, 0, counter - int(self._last[i]))
        self._last[i] = counter
        counts = self._counts
        counts["num_samples"] += 1
        counts["num_replays"] += replayed
        return self._seed_list[i], replayed

    def draw_many(self, n: int, kind: str = "any") -> tuple[np.ndarray, np.ndarray]:
        """`n` calls of `draw(kind)`: `(seeds [n] int64, replayed [n] bool)`. `kind` "any" follows the replay
        schedule; "replay" draws from the replay distribution only (while no level is seen, unseen levels, flagged
        False); "new" draws unseen levels only (once all are seen, uniformly from the set, flagged False).
        `random` and `sequential` follow their own order for every kind."""
        check_draw_request(n, kind)
        pairs = [self.draw(kind) for _ in range(n)]
        return (np.fromiter((seed for seed, _ in pairs), dtype=np.int64, count=n),
                np.fromiter((replayed for _, replayed in pairs), dtype=bool, count=n))

    def replay_probability(self) -> float:
        """The probability that the next `draw()` replays a seen level under the schedule (0 for `random` and
        `sequential`, and before `rho` of the levels are seen)."""
        cfg, ns = self.config, self._num_seen
        if cfg.strategy in UNSCORED_STRATEGIES or ns == 0 or ns / self._n < cfg.rho:
            return 0.0
        if cfg.replay_schedule == "fixed":
            return 1.0 if ns == self._n else 1.0 - cfg.nu
        return ns / self._n

    def _sample_index(self, kind: str) -> tuple[int, bool]:
        cfg = self.config
        strategy = cfg.strategy
        if strategy == "random":
            return int(self._rng.integers(self._n)), False
        if strategy == "sequential":
            i = self._next_seed_index
            self._next_seed_index = (i + 1) % self._n
            return i, False
        ns = self._num_seen
        frac = ns / self._n
        if kind != "any":
            replay = kind == "replay" and ns > 0
        elif ns == 0 or frac < cfg.rho:
            replay = False
        elif cfg.replay_schedule == "fixed":
            replay = ns == self._n or self._rng.random() > cfg.nu
        else:
            replay = self._rng.random() < frac
        if not replay:
            if ns < self._n:
                unseen = self._get_unseen_idx()
                return int(unseen[self._rng.integers(unseen.size)]), False
            return int(self._rng.integers(self._n)), False  # a "new" draw with every level seen
        return self._replay_slot(self._counter), True

    def _tree_slot(self, counter: int) -> int:
        rng, tree = self._rng, self._tree
        if tree is None:
            tree = self._tree = StalenessTree(self._seen, self._last)
        total = counter * self._num_seen - tree.sum_last
        if total <= 0:  # all seen levels have staleness 0: uniform
            held = self._held()
            return int(held[rng.integers(held.size)])
        pos = tree.find(rng.random() * total, counter)
        if pos >= self._n or not self._seen[pos]:  # float round-off at the very top; practically unreachable
            held = self._held()
            return int(held[int(np.argmax(counter - self._last[held]))])
        return pos

    def sample_weights(self) -> np.ndarray:
        """The distribution the next `sample()` draws a *replay* level from, over `seeds` (same order).

        Sums to 1 once a level is seen (all zeros before).  For `random` it is uniform; for `sequential`
        it is one-hot on the next level.
        """
        n = self._n
        if self.config.strategy == "random":
            return np.full(n, 1.0 / n)
        w = np.zeros(n)
        if self.config.strategy == "sequential":
            w[self._next_seed_index] = 1.0
            return w
        if self._num_seen:
            w[self._held()] = self._held_weights()
        return w

    def scores(self) -> np.ndarray:
        """Current level scores (EWA with alpha), same order as `seeds`; 0 for unseen levels."""
        return self._scores.copy()

    def staleness(self) -> np.ndarray:
        """Number of samples since each level was last sampled (int64), same order as `seeds`."""
        return self._counter - self._last

    def seen(self) -> np.ndarray:
        """Boolean mask of levels with at least one committed episode score."""
        return self._seen.copy()

    def view(self) -> LevelView:
        """Every seed of the set; the seen ones are scored."""
        return LevelView(self.seeds, self.seen(), self.scores(), self.staleness(), self.sample_weights(), self._n,
                         False)

    @property
    def seeds(self) -> np.ndarray:
        return self._seeds.copy()

    @property
    def num_levels(self) -> int:
        return self._n

    @property
    def num_seen(self) -> int:
        return self._num_seen

    # ------------------------------------------------------------------ seed lookup
    def _level_keys(self, name: str, arr: np.ndarray) -> np.ndarray:
        """Map an int64 array of seeds to level indices; ValueError naming an unknown seed."""
        if self._contiguous:
            idx = arr - self._seed_lo
            bad = (idx < 0) | (idx >= self._n)
        else:
            pos = np.searchsorted(self._sorted_seeds, arr)
            pos = np.minimum(pos, self._n - 1)
            bad = self._sorted_seeds[pos] != arr
            idx = self._sorted_pos[pos]
        if bad.any():
            first = arr.ravel()[np.flatnonzero(bad.ravel())[0]]
            raise ValueError(f"{name} holds unknown seed {int(first)} (not among the sampler's {self._n} seeds)")
        return idx

    # ------------------------------------------------------------------ score updates
    def _commit(self, keys: np.ndarray, scores: np.ndarray) -> None:
        uniq, new_scores = ewa_update(self._scores, keys, scores, self.config.alpha)
        self._apply_commit(uniq, new_scores, int(keys.size))

    def _apply_commit(self, uniq: np.ndarray, new_scores: np.ndarray, num_episodes: int) -> None:
        if uniq.size == 0:
            return
        self._scores[uniq] = new_scores
        fresh = uniq[~self._seen[uniq]]
        self._counts["num_episodes"] += num_episodes
        if fresh.size:
            self._seen[fresh] = True
            self._num_seen += int(fresh.size)
            self._seen_idx = self._unseen_idx = None
            self._new_held(fresh)
        else:
            self._score_cache = None

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything (config, seeds, scores, staleness, counters, RNG state) as plain
        dicts/lists/ints/floats/strings/NumPy arrays, serialisable by `contracts.snapshot.packb`."""
        return {
            "version": STATE_VERSION,
            "config": config_state(self.config, self.discount),
            "seeds": self._seeds.copy(),
            "scores": self._scores.copy(),
            "seen": self._seen.copy(),
            "last_sampled": self._last.copy(),
            "counter": int(self._counter),
            "next_seed_index": int(self._next_seed_index),
            "pending": pending_state({}),
            "counts": dict(self._counts),
            "rng": self._rng.bit_generator.state,
        }

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> LevelSampler:
        """A sampler rebuilt from `state_dict()` output (this version's or version 1's); ValueError if bad."""
        st = read_state(d)
        obj = cls(st.seeds, st.config, discount=st.discount, rng=st.rng)
        obj._scores = st.scores
        obj._seen = st.seen
        obj._num_seen = int(st.seen.sum())
        obj._last = st.last
        obj._counter = st.counter
        obj._next_seed_index = st.next_seed_index
        obj._counts = {k: st.counts.get(k, 0) for k in cls.COUNT_KEYS}  # a version 1 state holds no num_replays
        obj._counts["num_dropped_fragments"] += len(st.pending)  # see `sampler_state`: nothing can finish them
        return obj

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore everything from `state_dict()` output (validated first; on error self is unchanged)."""
        new = type(self).from_state_dict(d)
        self.__dict__.clear()
        self.__dict__.update(new.__dict__)
