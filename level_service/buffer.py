"""PLR over an unbounded level space: a buffer of the highest-scoring levels (Robust PLR's setting).

Jiang, Dennis, Parker-Holder, Foerster, Grefenstette, Rocktaschel, "Replay-Guided Adversarial Environment
Design" (NeurIPS 2021), as `facebookresearch/dcd`'s `LevelSampler(sample_full_distribution=True)` runs it:
levels are seeds from `[start_level, MAX_SEED)`, far too many to score them all, so PLR keeps at most
`buffer_size` of them with their scores and staleness. Pure NumPy; a `level_service.curriculum.LevelSource`
whose draws, staleness and scores are `level_service.slots`'s, as the fixed set's are; `level_service.service`
wraps it. At `replay_prob = 0` it is domain randomisation: every draw a new level, none twice.

Each draw (`draw()`, once per episode start; `draw_many(n)` for n in a row, as an actor prefetches them):

* **replay** with probability `replay_prob` (schedule `fixed`) or `min(fill, replay_prob)` (`proportionate`,
  `fill` = buffered / buffer_size), once at least `rho x buffer_size` levels are buffered: a buffered level
  from P = (1 - staleness_coef) P_score + staleness_coef P_staleness over the buffered levels (`slots`): a
  score-proportional slot is one search in a cached CDF, a staleness-proportional one an O(buffer_size) pass
  over `last` (NumPy, ~10 us at 4,000 levels; made for a `staleness_coef` share of the replays only, where a
  Fenwick tree's upkeep would cost every draw and commit);
* else a **new** level: the k-th new level is `start + (a k + c) mod R` with `R = MAX_SEED - start` and `a`
  coprime to `R` (drawn once from the run's seed), a permutation of the space: no seed is handed out as new
  twice within R draws, with O(1) state (a counter), where a set of played seeds would grow without bound.

Scores arrive per finished episode (`update_with_episodes`, scored where the episode was played), in the order
the episodes ended. A buffered level's score is updated by the EWA with `alpha`.
Any other level is a candidate: it enters the buffer while the buffer is not full; in a full buffer it replaces
the level of the lowest replay weight (`sample_weights`: score rank mixed with staleness; the first slot on
ties) when its score is >= that level's score, else it is dropped (DCD's `seed_buffer_priority
replay_support`). Weighing by replay weight rather than by score lets a level that has sat unreplayed and
low-ranked leave, so the buffer keeps turning over. A level evicted while an env still plays it comes back as a
candidate when that episode ends. A level entering the buffer has staleness 0. Every draw advances the
staleness counter, as in the fixed-set sampler.

With an editor (ACCEL's, `levels.editor accel` on a maze run: `families.maze.editor`; any editor is a plug-in
behind `level_service.curriculum.LevelEditor`, loaded by `level_service.editors.LEVEL_EDITORS`), every episode of a
buffered level (a replay) makes a child with `num_edits` edits, and each draw plays a queued child before
anything else: children are as many as replays, as DCD and JaxUED follow each replay step with an edit step,
so the episodes split replay : child : fresh level as `p : p : 1 - p` for the replay probability `p`. A child
is a new level (never a replay) and enters the buffer by the rule above once its episode is scored.

Any seed of the space is a valid level id, and so is an edited level the editor holds: a result for any other
id is rejected.
Every public mutator validates all of its input before changing anything (ValueError naming the field).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from levelray.contracts.config import LevelConfig
from levelray.contracts.levels import MAX_SEED
from levelray.contracts.validate import level_buffer_problems
from levelray.level_service.buffer_state import BUFFER_STATE_VERSION, read_buffer_state
from levelray.level_service.checks import checked_config
from levelray.level_service.curriculum import CurriculumSetup, LevelEditor, LevelSource, LevelView
from levelray.level_service.editors import make_editor
from levelray.level_service.rank_counts import RankCounts
from levelray.level_service.sampler_state import config_state, pending_state
from levelray.level_service.slots import LevelSlots, check_draw_request

__all__ = ["LevelBuffer"]

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


class LevelBuffer(LevelSlots):
    """PLR's level buffer over the seeds `[start_level, MAX_SEED)`; see the module docstring.

    `config` is the run's `levels` section (`buffer_size`, `replay_prob` and PLR's settings); `discount` is the
    learner's (for `one_step_td_error`); `rng` seeds the draws, the new-level permutation and the edits; `editor`
    makes children of replayed levels (ACCEL, `level_service.curriculum.LevelEditor`; None: no editing).
    """

    COUNT_KEYS = BUFFER_COUNT_KEYS

    def __init__(self, start_level: int, config: LevelConfig | None = None, *, discount: float = 0.99, rng=None,
                 editor: LevelEditor | None = None):
        if isinstance(start_level, bool) or not isinstance(start_level, int | np.integer) or not (
            0 <= start_level < MAX_SEED
        ):
            raise ValueError(f"start_level must be an int in [0, {MAX_SEED}), got {start_level!r}")
        config = checked_config(LevelConfig() if config is None else config)
        found = level_buffer_problems(config)
        if found:
            raise ValueError(found[0].message)
        self._init_slots(config, discount, rng, config.buffer_size, tree=False)
        self.start_level = int(start_level)
        self._space = MAX_SEED - self.start_level
        self._perm = new_level_permutation(self._rng, self._space)
        self._slot_of: dict[int, int] = {}
        self.editor = editor
        # ACCEL's children: one per scored replay (per-episode replay); level windows make them when a replay
        # window is drawn instead (`level_service.windows`) and switch this off
        self.edit_on_scoring = True
        # the rank transform kept per changed score: a full buffer weighs every candidate against its lowest
        # replay weight, which would otherwise sort the buffer once per committed episode
        self._ranks = RankCounts(config.buffer_size, config.temperature) if config.score_transform == "rank" else None

    @classmethod
    def for_run(cls, setup: CurriculumSetup) -> LevelBuffer:
        """PLR's level buffer over the run's unbounded space, with the editor `levels.editor` names
        (`level_service.editors.make_editor`); ValueError naming `levels.source` for a fixed set."""
        if setup.seeds is not None:
            raise ValueError(f"levels.source {setup.levels.source} keeps a level buffer over an unbounded "
                             f"level space (env.num_levels = 0, --num-levels 0), not a fixed set")
        editor = make_editor(setup.env, setup.levels, unbounded=True)
        return cls(setup.start_level, setup.levels, discount=setup.discount, rng=setup.rng, editor=editor)

    def check_same_space(self, saved: LevelSource, what: str) -> None:
        """ValueError unless `saved` (read back) is a level buffer from the same `start_level`, with the same editor
        on the same env family (or none)."""
        if not isinstance(saved, LevelBuffer) or saved.start_level != self.start_level:
            raise ValueError(f"{what} was not written for an unbounded level space from seed "
                             f"{self.start_level} (--num-levels 0 --start-level {self.start_level})")
        family = [None if s.editor is None else f"{s.config.editor} on {s.editor.family}" for s in (saved, self)]
        if family[0] != family[1]:
            raise ValueError(f"{what} was written with level editor {family[0] or 'none'}, this run has "
                             f"{family[1] or 'none'} (levels.editor, --env, --maze-blocks)")

    # ------------------------------------------------------------------ reading
    def _held(self) -> slice:
        return slice(0, len(self._slot_of))

    def _num_held(self) -> int:
        return len(self._slot_of)

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

    def sample_weights(self) -> np.ndarray:
        """The replay distribution over the buffered levels `[size]` (slot order; empty before any level)."""
        return np.zeros(0) if self.size == 0 else self._held_weights()

    def view(self) -> LevelView:
        """The buffered levels, in slot order, all scored."""
        return LevelView(self.buffered_seeds(), np.ones(self.size, dtype=bool), self.scores(), self.staleness(),
                         self.sample_weights(), self.capacity, True)

    # ------------------------------------------------------------------ drawing
    def sample(self) -> int:
        """The seed of `draw()`."""
        return self.draw()[0]

    def draw(self) -> tuple[int, bool]:
        """One level for an episode start: `(level id, replayed)`; advances staleness."""
        self._counter += 1
        self._counts["num_samples"] += 1
        children = self.editor.take(1) if self.editor is not None else []
        if children:
            self._counts["num_new"] += 1
            return children[0], False
        p = self._replay_prob()
        if p > 0.0 and self._rng.random() < p:
            i = self._replay_slot(self._counter)
            self._last[i] = self._counter
            self._counts["num_replays"] += 1
            return int(self._seeds[i]), True
        k = self._counts["num_new"]
        self._counts["num_new"] += 1
        return int(self._new_level(k)), False

    def draw_many(self, n: int, kind: str = "any") -> tuple[np.ndarray, np.ndarray]:
        """`n` draws in a row: `(seeds [n] int64, replayed [n] bool)`. `kind` "any" is distributed as `n` calls of
        `draw()` (the same distribution, not the same random numbers); "replay" draws buffered levels only (while
        the buffer is empty, new levels, flagged False); "new" new levels only. Queued children come first for
        "any" and "new".

        Within the `n` draws the buffered levels and their scores stay put (only commits change them), so the
        replay decisions and the score-proportional slots are independent draws from fixed distributions,
        made in one NumPy call each. A staleness-proportional draw depends on the draws before it: the
        replays before it are applied to `last` first.
        """
        check_draw_request(n, kind)
        if kind == "replay" and self.size == 0:
            kind = "new"
        if n == 1 and kind == "any":  # one level at a time (the inline backend): the scalar path, without NumPy's cost
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
        replayed = self._replay_mask(n, kind)
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

    def _replay_mask(self, n: int, kind: str) -> np.ndarray:
        """`[n] bool`: which of `n` draws of `kind` replay."""
        if kind != "any":
            return np.full(n, kind == "replay")
        p = self._replay_prob()
        return self._rng.random(n) < p if p > 0.0 else np.zeros(n, dtype=bool)

    def replay_probability(self) -> float:
        """The probability that the next `draw()` replays a buffered level: 0 until `rho` of the buffer is filled,
        then `replay_prob` (schedule `fixed`) or `min(fill, replay_prob)` (`proportionate`)."""
        return self._replay_prob()

    def _replay_prob(self) -> float:
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

    # ------------------------------------------------------------------ scores
    def _level_keys(self, name: str, ids: np.ndarray) -> np.ndarray:
        """`ids` themselves: a level is committed under its id; ValueError naming `name` for an id that is neither a
        seed of the space nor an edited level the editor holds."""
        unknown = (ids < self.start_level) | (ids >= MAX_SEED)
        if self.editor is not None and unknown.any():
            unknown[unknown] = ~self.editor.knows(ids[unknown])
        if unknown.any():
            raise ValueError(f"{name} holds level id {int(ids[unknown][0])}, outside the level space "
                             f"[{self.start_level}, {MAX_SEED}){self._edited_note()}")
        return ids

    def _commit(self, keys: np.ndarray, scores: np.ndarray) -> None:
        self._commit_all(keys.tolist(), scores.tolist())
        self._counts["num_episodes"] += int(keys.size)

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
                if self._ranks is not None:
                    self._ranks.set(slot, buf[slot])
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

    def _score_probs(self, held: slice) -> np.ndarray:
        return super()._score_probs(held) if self._ranks is None else self._ranks.weights()

    def lowest_weight_slot(self) -> int:
        """The slot a new level would replace in a full buffer: the lowest replay weight, the first on ties."""
        return int(np.argmin(self.sample_weights()))

    def _place(self, slot: int, seed: int, score: float) -> None:
        self._seeds[slot] = seed
        self._scores[slot] = score
        if self._ranks is not None:  # a new slot (the next one) or a replaced one
            self._ranks.set(slot, score)
        self._last[slot] = self._counter
        self._slot_of[seed] = slot
        self._score_cache = None
        self._counts["num_inserted"] += 1
        if self.editor is not None:
            self.editor.buffered(seed)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything (config, buffered levels, scores, staleness, counters, the new-level
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
            "pending": pending_state({}),
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
        if obj._ranks is not None:
            obj._ranks.reset(st.scores[: st.size])
        obj._slot_of = {int(s): i for i, s in enumerate(st.seeds[: st.size].tolist())}
        obj._counter = st.counter
        obj._counts = st.counts
        obj._counts["num_dropped_fragments"] += len(st.pending)  # see `sampler_state`: nothing can finish them
        return obj
