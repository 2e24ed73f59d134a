"""PLR over an unbounded level space: a buffer of the highest-scoring levels (Robust PLR's setting).

Jiang, Dennis, Parker-Holder, Foerster, Grefenstette, Rocktaschel, "Replay-Guided Adversarial Environment
Design" (NeurIPS 2021), as `facebookresearch/dcd`'s `LevelSampler(sample_full_distribution=True)` runs it:
levels are seeds from `[start_level, MAX_SEED)`, far too many to score them all, so PLR keeps at most
`buffer_size` of them with their scores and staleness. Pure NumPy; `level_service.service` wraps it.

Each draw (`draw()`, once per episode start; `draw_many(n)` for n in a row, as an actor prefetches them):

* **replay** with probability `replay_prob` (schedule `fixed`) or `min(fill, replay_prob)` (`proportionate`,
  `fill` = buffered / buffer_size), once at least `rho x buffer_size` levels are buffered: a buffered level
  from P = (1 - staleness_coef) P_score + staleness_coef P_staleness, the fixed-set sampler's distribution
  over the buffered levels (same transforms): a score-proportional slot is one search in a cached CDF, a
  staleness-proportional one an O(buffer_size) pass over `last` (NumPy, ~10 us at 4,000 levels; made for a
  `staleness_coef` share of the replays only, where a Fenwick tree's upkeep would cost every draw and commit);
* else a **new** level: the k-th new level is `start + (a k + c) mod R` with `R = MAX_SEED - start` and `a`
  coprime to `R` (drawn once from the run's seed), a permutation of the space: no seed is handed out as new
  twice within R draws, with O(1) state (a counter), where a set of played seeds would grow without bound.

Scores (`update_with_rollouts`, the fixed-set sampler's strategies, partial-episode stitching and chronological
commit order) are committed per complete episode. A buffered level's score is updated by the EWA with `alpha`.
Any other level is a candidate: it enters the buffer while the buffer is not full; in a full buffer it replaces
the level of the lowest replay weight (`sample_weights`: score rank mixed with staleness; the first slot on
ties) when its score is >= that level's score, else it is dropped (DCD's `seed_buffer_priority
replay_support`). Weighing by replay weight rather than by score lets a level that has sat unreplayed and
low-ranked leave, so the buffer keeps turning over. A level evicted while an env still plays it comes back as a
candidate when that episode ends. A level entering the buffer has staleness 0. Every draw advances the
staleness counter, as in the fixed-set sampler.

With ACCEL's editor (`levels.editor accel`, a maze run; `level_service.editor`), every complete episode of a
buffered level (a replay) makes a child with `num_edits` edits, and each draw plays a queued child before
anything else: children are as many as replays, as DCD and JaxUED follow each replay step with an edit step,
so the episodes split replay : child : fresh level as `p : p : 1 - p` for the replay probability `p`. With level
windows (`level_service.windows`) the children are made when a replay window is drawn instead (`edit_on_scoring`
off). A child
is a new level (never a replay) and enters the buffer by the rule above once its episode is scored.

Any seed of the space is a valid level id, and so is an edited level the editor holds: feedback for any other
id is rejected.
Every public mutator validates all of its input before changing anything (ValueError naming the field).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from levelray.contracts.config import LevelConfig
from levelray.contracts.levels import MAX_SEED, EpisodeResults, LevelFeedback
from levelray.contracts.rng import make_rng
from levelray.contracts.validate import level_buffer_problems
from levelray.level_service import episodes
from levelray.level_service.buffer_state import BUFFER_STATE_VERSION, read_buffer_state
from levelray.level_service.checks import check_real, checked_config, episode_columns
from levelray.level_service.editor import MazeEditor
from levelray.level_service.sampler_state import config_state, pending_state
from levelray.level_service.scores import step_scores
from levelray.level_service.transforms import transform_weights

__all__ = ["DRAW_KINDS", "LevelBuffer"]

DRAW_KINDS = ("any", "replay", "new")  # what `draw_many` draws: by the replay schedule, replays only, new levels only

BUFFER_COUNT_KEYS = (
    "num_samples", "num_replays", "num_new", "num_episodes", "num_inserted", "num_evicted", "num_rejected",
    "num_update_calls", "num_dropped_fragments",
)


def new_level_permutation(rng: np.random.Generator, size: int) -> tuple[int, int]:
    """`(a, c)` of the affine permutation `k -> (a k + c) mod size`: `a` in [1, size) coprime to `size`."""
    if size == 1:
        return 1, 0
    a = int(rng.integers(1, size))
    while math.gcd(a, size) != 1:
        a = a % (size - 1) + 1
    return a, int(rng.integers(size))


class LevelBuffer:
    """PLR's level buffer over the seeds `[start_level, MAX_SEED)`; see the module docstring.

    `config` is the run's `levels` section (`buffer_size`, `replay_prob` and PLR's settings); `discount` is the
    learner's (for `one_step_td_error`); `rng` seeds the draws, the new-level permutation and the edits; `editor`
    makes children of replayed levels (ACCEL; None: no editing).
    """

    def __init__(self, start_level: int, config: LevelConfig | None = None, *, discount: float = 0.99, rng=None,
                 editor: MazeEditor | None = None):
        if isinstance(start_level, bool) or not isinstance(start_level, int | np.integer) or not (
            0 <= start_level < MAX_SEED
        ):
            raise ValueError(f"start_level must be an int in [0, {MAX_SEED}), got {start_level!r}")
        self.config = checked_config(LevelConfig() if config is None else config)
        found = level_buffer_problems(self.config)
        if found:
            raise ValueError(found[0].message)
        cap = self.config.buffer_size
        self.discount = check_real("discount", discount, 0.0, 1.0)
        self._rng = make_rng(rng)
        self.start_level = int(start_level)
        self._space = MAX_SEED - self.start_level
        self._perm = new_level_permutation(self._rng, self._space)
        self._seeds = np.full(cap, -1, dtype=np.int64)  # slot -> seed; the first `_size` slots are filled
        self._scores = np.zeros(cap, dtype=np.float64)
        self._last = np.zeros(cap, dtype=np.int64)  # value of _counter when last drawn (or inserted)
        self._slot_of: dict[int, int] = {}
        self._counter = 0
        self._pending: episodes.Pending = {}  # actor id -> (seed, score sum, steps)
        self._counts = dict.fromkeys(BUFFER_COUNT_KEYS, 0)
        # power at temperature 1: P_staleness is staleness itself, normalised (no transform call needed)
        self._fast_staleness = self.config.staleness_transform == "power" and self.config.staleness_temperature == 1.0
        self._score_cache: tuple[np.ndarray, np.ndarray] | None = None  # (probs, cdf) over the filled slots
        self.editor = editor
        # ACCEL's children: one per scored replay (per-episode replay); level windows make them when a replay
        # window is drawn instead (`level_service.windows`), and switch this off
        self.edit_on_scoring = True

    # ------------------------------------------------------------------ reading
    @property
    def capacity(self) -> int:
        return int(self._seeds.size)

    @property
    def size(self) -> int:
        """Levels in the buffer."""
        return len(self._slot_of)

    def buffered_seeds(self) -> np.ndarray:
        """The buffered levels' seeds `[size]`, in slot order (the order of `scores`, `staleness`, weights)."""
        return self._seeds[: self.size].copy()

    def scores(self) -> np.ndarray:
        return self._scores[: self.size].copy()

    def staleness(self) -> np.ndarray:
        return self._counter - self._last[: self.size]

    def counters(self) -> dict[str, int]:
        return {**self._counts, "num_pending": len(self._pending)}

    def sample_weights(self) -> np.ndarray:
        """The replay distribution over the buffered levels `[size]` (slot order; empty before any level)."""
        n = self.size
        if n == 0:
            return np.zeros(0)
        probs, _ = self._get_score_cache()
        c = self.config.staleness_coef
        if c == 0.0:
            return probs.copy()
        cfg = self.config
        stale = transform_weights(cfg.staleness_transform, cfg.staleness_temperature, cfg.eps,
                                  self.staleness().astype(np.float64))
        return (1.0 - c) * probs + c * stale

    # ------------------------------------------------------------------ drawing
    def sample(self) -> int:
        """The seed of `draw()`."""
        return self.draw()[0]

    def draw(self) -> tuple[int, bool]:
        """One level for an episode start: `(level id, replayed)`; advances staleness."""
        self._counter += 1
        self._counts["num_samples"] += 1
        if self.editor is not None and self.editor.queue:
            self._counts["num_new"] += 1
            return self.editor.take(1)[0], False
        p = self._replay_prob()
        if p > 0.0 and self._rng.random() < p:
            c = self.config.staleness_coef
            if c > 0.0 and self._rng.random() < c:
                i = self._staleness_slot(self._counter)
            else:
                _, cdf = self._get_score_cache()
                i = min(int(np.searchsorted(cdf, self._rng.random() * cdf[-1], side="right")), self.size - 1)
            self._last[i] = self._counter
            self._counts["num_replays"] += 1
            return int(self._seeds[i]), True
        k = self._counts["num_new"]
        self._counts["num_new"] += 1
        return int(self._new_level(k)), False

    def draw_many(self, n: int, kind: str = "any") -> tuple[np.ndarray, np.ndarray]:
        """`n` draws in a row: `(seeds [n] int64, replayed [n] bool)`, distributed as `n` calls of `draw()`
        (the same distribution, not the same random numbers). `kind` (`DRAW_KINDS`): "any" by the replay schedule;
        "replay" replayed levels only (new ones, flagged False, while nothing can be replayed); "new" new levels
        only, the editor's queued children first (a level window decides replay for all its levels at once).

        Within the `n` draws the buffered levels and their scores stay put (only commits change them), so the
        replay decisions and the score-proportional slots are independent draws from fixed distributions,
        made in one NumPy call each. A staleness-proportional draw depends on the draws before it: the
        replays before it are applied to `last` first.
        """
        if kind not in DRAW_KINDS:
            raise ValueError(f"kind must be one of {DRAW_KINDS}, got {kind!r}")
        if n == 1 and kind == "any":  # one level at a time (the inline backend): the scalar path
            seed, replayed = self.draw()
            return np.array([seed], dtype=np.int64), np.array([replayed])
        children = self.editor.take(n) if self.editor is not None and kind != "replay" else []
        if children:  # played first (see the module doc); each is a draw that advances staleness
            self._counter += len(children)
            self._counts["num_samples"] += len(children)
            self._counts["num_new"] += len(children)
            seeds, replayed = self.draw_many(n - len(children), kind)
            return np.concatenate([np.array(children, dtype=np.int64), seeds]), np.concatenate(
                [np.zeros(len(children), dtype=bool), replayed])
        counters = self._counter + 1 + np.arange(n, dtype=np.int64)  # [n] the staleness counter at each draw
        p = self._replay_prob()
        if kind == "any":
            replayed = self._rng.random(n) < p if p > 0.0 else np.zeros(n, dtype=bool)
        else:
            replayed = np.full(n, kind == "replay" and p > 0.0)
        at = np.flatnonzero(replayed)  # [m] the draws that replay
        c = self.config.staleness_coef
        by_staleness = self._rng.random(at.size) < c if c > 0.0 else np.zeros(at.size, dtype=bool)
        slots = np.empty(at.size, dtype=np.int64)  # [m] their buffer slots
        slots[~by_staleness] = self._score_slots(int(at.size - by_staleness.sum()))
        applied = 0
        for j in np.flatnonzero(by_staleness).tolist():
            self._mark_drawn(slots[applied:j], counters[at[applied:j]])
            slots[j] = self._staleness_slot(int(counters[at[j]]))
            applied = j
        self._mark_drawn(slots[applied:], counters[at[applied:]])
        seeds = np.empty(n, dtype=np.int64)
        seeds[at] = self._seeds[slots]
        seeds[~replayed] = self._new_seeds(n - at.size)
        self._counter += n
        self._counts["num_samples"] += n
        self._counts["num_replays"] += int(at.size)
        return seeds, replayed

    def replay_probability(self) -> float:
        """The probability that the next draw (or level window) replays: 0 until `rho` of the buffer is filled."""
        return self._replay_prob()

    def _replay_prob(self) -> float:
        """The probability that the next draw replays: 0 until `rho` of the buffer is filled."""
        n, cfg = self.size, self.config
        fill = n / self.capacity
        if n == 0 or fill < cfg.rho:
            return 0.0
        return cfg.replay_prob if cfg.replay_schedule == "fixed" else min(fill, cfg.replay_prob)

    def _new_seeds(self, m: int) -> np.ndarray:
        """The next `m` new levels `[m]`."""
        k = self._counts["num_new"] + np.arange(m, dtype=np.int64)
        self._counts["num_new"] += m
        return self._new_level(k)

    def _new_level(self, k):
        """The k-th new level, `start + (a k + c) mod R`, for an int or an int64 array `k` (a, k mod R < 2**31: no
        int64 overflow)."""
        a, c = self._perm
        return self.start_level + (a * (k % self._space) + c) % self._space

    def _mark_drawn(self, slots: np.ndarray, counters: np.ndarray) -> None:
        """`last[slot] = counter` for draws in order (`counters [k]` increasing); a slot drawn twice keeps the
        later counter."""
        if slots.size:
            np.maximum.at(self._last, slots, counters)

    def _get_score_cache(self) -> tuple[np.ndarray, np.ndarray]:
        if self._score_cache is None:
            c = self.config
            probs = transform_weights(c.score_transform, c.temperature, c.eps, self._scores[: self.size])
            self._score_cache = (probs, np.cumsum(probs))
        return self._score_cache

    def _score_slots(self, m: int) -> np.ndarray:
        """`m` independent slots `[m]` from P_score."""
        if m == 0:
            return np.zeros(0, dtype=np.int64)
        _, cdf = self._get_score_cache()
        u = self._rng.random(m) * cdf[-1]
        return np.minimum(np.searchsorted(cdf, u, side="right"), self.size - 1)

    def _staleness_slot(self, counter: int) -> int:
        """One slot from P_staleness at staleness counter `counter` (`last` holds every earlier draw)."""
        rng, n, cfg = self._rng, self.size, self.config
        if cfg.staleness_transform == "constant":
            return int(rng.integers(n))
        stale = counter - self._last[:n]  # [n] >= 0
        if not self._fast_staleness:
            stale = transform_weights(cfg.staleness_transform, cfg.staleness_temperature, cfg.eps,
                                      stale.astype(np.float64))
        cdf = np.cumsum(stale)
        if cdf[-1] <= 0:  # every buffered level has staleness 0: uniform
            return int(rng.integers(n))
        return min(int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right")), n - 1)

    # ------------------------------------------------------------------ scores
    def update_with_rollouts(self, feedback: LevelFeedback) -> None:
        """Score the episodes of a time-major rollout batch (`LevelFeedback`), stitching episodes across calls
        by actor id, and let each complete episode's level into the buffer by the buffer's rule."""
        seeds, dones, ids = episodes.feedback_columns(feedback)
        unknown = self._unknown_ids(seeds)
        if unknown.any():
            raise ValueError(f"seeds holds level id {int(seeds[unknown][0])}, outside the level space "
                             f"[{self.start_level}, {MAX_SEED}){self._edited_note()}")
        episodes.check_constant_levels(seeds, dones)
        seg = episodes.segment(step_scores(self.config.strategy, feedback, dones, self.discount), dones, seeds)
        dropped = episodes.merge_pending(self._pending, seg, ids)
        if not np.isfinite(seg.sums).all():
            raise ValueError("episode score sums overflow (non-finite); check the magnitude of the inputs")
        chrono = episodes.chronological_ends(seg, seeds.shape[0])
        tails = episodes.open_tails(seg, ids)
        # ---- validated: mutate
        for a in ids:
            self._pending.pop(a, None)
        self._pending.update(tails)
        self._counts["num_dropped_fragments"] += dropped
        self._counts["num_update_calls"] += 1
        self._commit_all(seg.levels[chrono].tolist(), (seg.sums[chrono] / seg.lengths[chrono]).tolist())
        self._counts["num_episodes"] += int(chrono.size)

    def update_with_episodes(self, results: EpisodeResults) -> None:
        """Commit finished episodes scored where they were played (`EpisodeResults`, in the order they ended) by the
        buffer's rule. Every field, and every level id, is checked before anything changes."""
        levels, scores = episode_columns(results)
        unknown = self._unknown_ids(levels)
        if unknown.any():
            raise ValueError(f"levels holds level id {int(levels[unknown][0])}, outside the level space "
                             f"[{self.start_level}, {MAX_SEED}){self._edited_note()}")
        self._counts["num_update_calls"] += 1
        self._commit_all(levels.tolist(), scores.tolist())
        self._counts["num_episodes"] += int(levels.size)

    def _unknown_ids(self, ids: np.ndarray) -> np.ndarray:
        """`[...] bool`: the level ids of `ids` that are neither a seed of the space nor an edited level held."""
        unknown = (ids < self.start_level) | (ids >= MAX_SEED)
        if self.editor is not None and unknown.any():
            unknown[unknown] = ~self.editor.knows(ids[unknown])
        return unknown

    def _edited_note(self) -> str:
        return "" if self.editor is None else " and not an edited level this service holds"

    def _commit_all(self, seeds: list[int], scores: list[float]) -> None:
        """Complete episodes' scores in the order they ended: the EWA for a buffered level, the buffer's rule
        for any other. A candidate for a full buffer is weighed against the level of the lowest replay weight
        (`sample_weights`, the first slot on ties) as the buffer stands after the commits before it."""
        buf, slot_of, alpha, counts = self._scores, self._slot_of, self.config.alpha, self._counts
        for seed, score in zip(seeds, scores, strict=True):
            slot = slot_of.get(seed)
            if slot is not None:
                if self.editor is not None and self.edit_on_scoring:  # a replay was scored: ACCEL edits it
                    self.editor.make_child(seed, self._rng)
                buf[slot] = (1.0 - alpha) * buf[slot] + alpha * score
                self._score_cache = None
            elif len(slot_of) < buf.size:
                self._place(len(slot_of), seed, score)
            else:
                lowest = self.lowest_weight_slot()
                if score >= buf[lowest]:
                    evicted = int(self._seeds[lowest])
                    del slot_of[evicted]
                    self._place(lowest, seed, score)
                    counts["num_evicted"] += 1
                    if self.editor is not None:
                        self.editor.released(evicted)
                else:
                    counts["num_rejected"] += 1
                    if self.editor is not None:
                        self.editor.released(seed)

    def lowest_weight_slot(self) -> int:
        """The slot a new level would replace in a full buffer: the lowest replay weight, the first on ties."""
        return int(np.argmin(self.sample_weights()))

    def _place(self, slot: int, seed: int, score: float) -> None:
        self._seeds[slot] = seed
        self._scores[slot] = score
        self._last[slot] = self._counter
        self._slot_of[seed] = slot
        self._score_cache = None
        self._counts["num_inserted"] += 1
        if self.editor is not None:
            self.editor.buffered(seed)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything (config, buffered levels, scores, staleness, pending fragments, counters, the new-level
        permutation and its position, RNG state) as plain values and arrays for `contracts.snapshot.packb`."""
        return {
            "version": BUFFER_STATE_VERSION,
            "kind": "buffer",
            "config": config_state(self.config, self.discount),
            "start_level": self.start_level,
            "seeds": self._seeds.copy(),
            "scores": self._scores.copy(),
            "last_sampled": self._last.copy(),
            "size": self.size,
            "counter": int(self._counter),
            "permutation": list(self._perm),
            "pending": pending_state(self._pending),
            "counts": dict(self._counts),
            "rng": self._rng.bit_generator.state,
            "editor": None if self.editor is None else self.editor.state_dict(),
        }

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> LevelBuffer:
        """A buffer rebuilt from `state_dict()` output; ValueError naming the first bad field."""
        st = read_buffer_state(d, BUFFER_COUNT_KEYS)
        obj = cls(st.start_level, st.config, discount=st.discount, editor=st.editor)
        obj._rng = st.rng
        obj._perm = st.permutation
        obj._seeds, obj._scores, obj._last = st.seeds, st.scores, st.last
        obj._slot_of = {int(s): i for i, s in enumerate(st.seeds[: st.size].tolist())}
        obj._counter = st.counter
        obj._pending = st.pending
        obj._counts = st.counts
        return obj
