"""What every scored level source shares: levels in slots with scores and staleness, PLR's replay distribution over
the slots it may replay, its draws, and the counters.

A source keeps its levels in slots: `seeds [capacity]` (the level id in each slot), `scores [capacity]` (the EWA of
the level's episode scores) and `last [capacity]` (the value of the staleness counter when the level was last
drawn; staleness = counter - last). Which slots a draw may replay (`_held()`) is the source's own: a fixed set's
seen levels (an index array, growing as levels are first scored), a buffer's filled prefix (a slice; the buffer
replaces levels in place). Either indexes the slot arrays the same way, so one implementation serves both:

* P = (1 - staleness_coef) P_score + staleness_coef P_staleness over the held slots (`sample_weights`), each
  component a transform of `level_service.transforms`;
* a replay draw (`_replay_slot`) picks the component first (probability staleness_coef for staleness), then:
  - score: one search in a CDF over the held slots, cached until the scores or the held set change;
  - staleness, `power` transform at temperature 1 (the default): a fixed set descends the Fenwick trees of
    `level_service.staleness`, O(log n) (its held set only grows, which the trees take as point inserts); a buffer
    makes one NumPy pass over its at most `buffer_size` levels (~10 us at 4,000), which only the staleness share of
    replays pays, where the trees' upkeep would cost every draw and every eviction;
  - staleness, `constant`: uniform over the held slots; any other transform: the weights recomputed for that draw.
* scores: finished episodes, scored where they were played (`update_with_episodes`), fold into their levels' scores
  by the EWA with `alpha`, the source deciding what a level it does not hold yet does;
* counters in one dict (`COUNT_KEYS`, the source's).

Whether a draw counts itself in the staleness it weighs is the source's (the `counter` it passes): a fixed set
weighs the staleness as it stood before the draw, a buffer counts the draw being made, so that a level just let in
(staleness 0) already has weight.

Pure NumPy. `level_service.sampler` (a fixed set) and `level_service.buffer` (a level buffer) build on it; the level
source protocol they implement is `level_service.curriculum`.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from levelray.contracts.config import LevelConfig
from levelray.contracts.levels import UNSCORED_STRATEGIES, EpisodeResults
from levelray.contracts.rng import make_rng
from levelray.level_service.checks import check_real, checked_config, episode_columns
from levelray.level_service.staleness import StalenessTree
from levelray.level_service.transforms import transform_weights

__all__ = ["DRAW_KINDS", "LevelSlots", "check_draw_request"]

DRAW_KINDS = ("any", "replay", "new")  # `draw_many`'s kinds: the source's own schedule, replays only, new levels only
Held = slice | np.ndarray  # the slots a draw may replay: a buffer's filled prefix, or a fixed set's seen levels


def check_draw_request(n, kind) -> None:
    """ValueError unless `n` is an int >= 0 and `kind` one of `DRAW_KINDS`."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    if kind not in DRAW_KINDS:
        raise ValueError(f"kind must be one of {', '.join(DRAW_KINDS)}, got {kind!r}")


def _slot(held: Held, k: int) -> int:
    """The slot at position `k` of the held slots."""
    return k if isinstance(held, slice) else int(held[k])


class LevelSlots:
    """The shared part of `LevelSampler` and `LevelBuffer` (see the module doc). A subclass sets `COUNT_KEYS`, calls
    `_init_slots` and implements `_held`, `_num_held`, `_level_keys` and `_commit` (and `_tree_slot` where it is
    built with `tree`)."""

    COUNT_KEYS: ClassVar[tuple[str, ...]]
    editor = None  # a source with ACCEL's editor sets one (`level_service.curriculum.LevelEditor`)

    def _init_slots(self, config: LevelConfig | None, discount: float, rng, capacity: int, *, tree: bool) -> None:
        self.config = checked_config(LevelConfig() if config is None else config)
        self.discount = check_real("discount", discount, 0.0, 1.0)
        self._rng = make_rng(rng)
        self._seeds = np.full(capacity, -1, dtype=np.int64)
        self._scores = np.zeros(capacity, dtype=np.float64)
        self._last = np.zeros(capacity, dtype=np.int64)  # value of _counter when last drawn (or let in)
        self._counter = 0
        self._counts = dict.fromkeys(self.COUNT_KEYS, 0)
        # power at temperature 1: P_staleness is staleness itself, normalised (no transform call needed)
        self._fast_staleness = self.config.staleness_transform == "power" and self.config.staleness_temperature == 1.0
        self._use_tree = tree and self._fast_staleness
        self._tree: StalenessTree | None = None
        self._score_cache: tuple[Held, np.ndarray, np.ndarray] | None = None  # (held, P_score, its CDF)

    # ------------------------------------------------------------------ what a subclass provides
    def _held(self) -> Held:
        """The slots a draw may replay."""
        raise NotImplementedError

    def _num_held(self) -> int:
        raise NotImplementedError

    def _level_keys(self, name: str, ids: np.ndarray) -> np.ndarray:
        """The keys the source commits level ids `ids` under; ValueError naming `name` for an id it does not know."""
        raise NotImplementedError

    def _commit(self, keys: np.ndarray, scores: np.ndarray) -> None:
        """Fold finished episodes' scores (`keys [E]`, `scores [E]`, in the order they ended) into the source."""
        raise NotImplementedError

    # ------------------------------------------------------------------ reading
    def counters(self) -> dict[str, int]:
        return dict(self._counts)

    def _get_score_cache(self) -> tuple[Held, np.ndarray, np.ndarray]:
        if self._score_cache is None:
            held = self._held()
            probs = self._score_probs(held)
            self._score_cache = (held, probs, np.cumsum(probs))
        return self._score_cache

    def _score_probs(self, held: Held) -> np.ndarray:
        """P_score over the held slots `[m]` (the score transform of their scores)."""
        c = self.config
        return transform_weights(c.score_transform, c.temperature, c.eps, self._scores[held])

    def _held_weights(self) -> np.ndarray:
        """The replay distribution over the held slots, in `_held()` order (at least one slot held)."""
        _, probs, _ = self._get_score_cache()
        c = self.config.staleness_coef
        if c == 0.0:
            return probs.copy()
        cfg = self.config
        stale = (self._counter - self._last[self._held()]).astype(np.float64)
        return (1.0 - c) * probs + c * transform_weights(cfg.staleness_transform, cfg.staleness_temperature, cfg.eps,
                                                         stale)

    # ------------------------------------------------------------------ draws
    def _replay_slot(self, counter: int) -> int:
        """One slot from P, with staleness at staleness counter `counter`."""
        c = self.config.staleness_coef
        if c > 0.0 and self._rng.random() < c:
            return self._staleness_slot(counter)
        held, _, cdf = self._get_score_cache()
        k = min(int(np.searchsorted(cdf, self._rng.random() * cdf[-1], side="right")), cdf.size - 1)
        return k if isinstance(held, slice) else int(held[k])

    def _score_slots(self, m: int) -> np.ndarray:
        """`m` independent slots `[m]` from P_score."""
        if m == 0:
            return np.zeros(0, dtype=np.int64)
        held, _, cdf = self._get_score_cache()
        pos = np.minimum(np.searchsorted(cdf, self._rng.random(m) * cdf[-1], side="right"), cdf.size - 1)
        return pos if isinstance(held, slice) else held[pos]

    def _staleness_slot(self, counter: int) -> int:
        """One slot from P_staleness at staleness counter `counter` (`last` holds every earlier draw)."""
        if self._use_tree:
            return self._tree_slot(counter)
        rng, cfg, held = self._rng, self.config, self._held()
        m = self._num_held()
        if cfg.staleness_transform == "constant":
            return _slot(held, int(rng.integers(m)))
        stale = counter - self._last[held]  # [m] >= 0
        if not self._fast_staleness:
            stale = transform_weights(cfg.staleness_transform, cfg.staleness_temperature, cfg.eps,
                                      stale.astype(np.float64))
        cdf = np.cumsum(stale)
        if cdf[-1] <= 0:  # every held level has staleness 0: uniform
            return _slot(held, int(rng.integers(m)))
        return _slot(held, min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), m - 1))

    def _tree_slot(self, counter: int) -> int:
        """`_staleness_slot` by the Fenwick trees (a source built with `tree`, at power staleness, temperature 1)."""
        raise NotImplementedError

    def _new_held(self, slots: np.ndarray) -> None:
        """Slots `slots` joined the held set (their `last` set): the caches follow. The trees take a few as point
        inserts and are rebuilt lazily after many."""
        self._score_cache = None
        if self._tree is not None and slots.size * 32 < self._seeds.size:
            for i in slots.tolist():
                self._tree.add(i, 1, int(self._last[i]))
        else:
            self._tree = None

    # ------------------------------------------------------------------ scores
    def update_with_episodes(self, results: EpisodeResults) -> None:
        """Commit finished episodes scored where they were played (`EpisodeResults`, in the order they ended): each
        folds into its level's score by the EWA with `alpha` (the source decides what an unheld level does). Every
        field, and every level id, is checked before anything changes."""
        levels, scores = episode_columns(results)
        keys = self._level_keys("levels", levels)
        if self.config.strategy in UNSCORED_STRATEGIES:
            self._counts["num_update_calls"] += 1
            return
        self._commit(keys, scores)
        self._counts["num_update_calls"] += 1
