"""The curriculum interface: what the level service asks of a level source, and what a level buffer asks of an
editor. Protocols only (no implementation), so that a new source or editor is checked against one small list.

A **level source** hands out levels and takes back the results of the episodes played on them:

- a fixed set, `level_service.sampler.LevelSampler`: PLR over given seeds (strategies `random` = uniform and
  `sequential` = in order among them);
- an unbounded space, `level_service.buffer.LevelBuffer`: PLR's level buffer (Robust PLR with `levels.robust`,
  ACCEL with an editor);
- domain randomisation is the level buffer at `replay_prob = 0`: every draw a new level, never one twice, which a
  run needs no service for (each env draws its own seed; `contracts.config.uses_level_service`).

Both share one implementation of draws, staleness and scores (`level_service.slots`).

A **curriculum** is what `levels.source` names, a plug-in (`level_service.spaces.CURRICULA`: `plr`, the two
sources above, by default; a user's own by `module:attribute`): a class that builds a run's source from a
`CurriculumSetup` (`for_run`) and reads a saved one back (`from_state_dict`). A level source class is one; `plr`
picks one of its two by the level space. A source's saved state holds its `levels` section (`config`), so that a
state names the curriculum that wrote it and resumes only with it. A curriculum that learns from how the episodes
went (SFL's learnability p(1 - p) of the success rate, `level_service.sfl`) reads `EpisodeResults.solved` and
`returns`, and `EpisodeResults.replayed` (the flag each level was drawn with) where it hands one level out both to be
trained on and not; one that wants new levels played to find them draws them by kind ("new"). Two optional parts:
a classmethod `check_run(levels, env)` (ConfigError naming the flag, called before the run starts: what the
curriculum needs of the run, such as SFL's success signal), and a `level_statistics` attribute, a
`contracts.families.LevelStatistics` of its own measures of the levels it holds (`levels_*` keys: SFL's mean
learnability), which the service's `stats()` adds to the env family's, so that they reach `metrics.jsonl`, `levelray
status` and Prometheus as the family's do. `level_service.spaces` builds a source from a run's config and reads its
state back; the level service (`level_service.service`) talks to it only through `LevelSource` and `levels_view`.

An **editor** (ACCEL's) makes children of levels and holds the levels it made, so that they can be played, scored
and saved with the buffer; one per env family, a plug-in (`level_service.editors.LEVEL_EDITORS`: a built-in by its
name, a user's own by `module:attribute`).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np

from levelray.contracts.config import EnvConfig, LevelConfig
from levelray.contracts.levels import EpisodeResults

__all__ = ["Curriculum", "CurriculumSetup", "LevelEditor", "LevelSource", "LevelView"]


class LevelView(NamedTuple):
    """The levels a source holds, as arrays in one order: every seed of a fixed set, the filled slots of a buffer."""

    seeds: np.ndarray  # [n] int64
    scored: np.ndarray  # [n] bool: the level has a committed score
    scores: np.ndarray  # [n] float64
    staleness: np.ndarray  # [n] int64
    weights: np.ndarray  # [n] the replay distribution
    capacity: int  # what `scored.sum()` is a fraction of: the set's size, or the buffer's
    buffered: bool  # a level buffer (unbounded space)


class CurriculumSetup(NamedTuple):
    """What a run's level source is built from (`Curriculum.for_run`)."""

    seeds: np.ndarray | None  # [n] int64 a fixed training set; None: the unbounded space from start_level
    start_level: int  # the first seed of the unbounded space (`contracts.levels.MAX_SEED` ends it)
    levels: LevelConfig  # the run's levels section: the curriculum's name and settings (`levels.source`)
    discount: float  # the learner's
    rng: np.random.Generator  # the run's seed: a source's draws, and what it saves of them
    env: EnvConfig | None  # the run's env section (None in tests of a source alone): an editor's env family


class LevelEditor(Protocol):
    """ACCEL's editor for one env family: children of levels, and the levels it holds as data.

    Level ids of edited levels lie in a range of the editor's own (no seed reaches it); an id it does not hold
    (`knows`) is not a level of the run.
    """

    family: str  # the levels it edits, in words ("13x13 mazes with (0, 60) walls"): a saved state resumes only with it
    edits_env: str  # the prefix of the env ids of the family it edits ("maze:"), a class attribute
    edits_family: str  # that family, in the words of a refusal ("a maze family (--env maze:<W>x<H>)")

    @classmethod
    def for_run(cls, env: EnvConfig, levels: LevelConfig) -> LevelEditor:
        """The editor of a run's `env` and `levels` sections (the env is of the editor's family: checked before)."""

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> LevelEditor:
        """An editor rebuilt from `state_dict()` output; ValueError naming the bad field."""

    def make_child(self, parent: int, rng: np.random.Generator) -> int | None:
        """Edit level `parent` and queue the child to be played; its id, or None where the child is dropped."""

    def take(self, n: int) -> list[int]:
        """Up to `n` queued children, oldest first, handed out to be played (empty when none waits)."""

    def knows(self, ids: np.ndarray) -> np.ndarray:
        """`[n] bool`: which of the edited ids `ids [n]` this editor holds."""

    def buffered(self, level_id: int) -> None:
        """Level `level_id` entered the buffer: the editor keeps it while it stays."""

    def released(self, level_id: int) -> None:
        """Level `level_id` left the buffer or was not let in: the editor may forget it once no episode plays it."""

    def check_held(self, buffered: np.ndarray) -> None:
        """ValueError unless the levels held are those a saved buffer (`buffered [n]`, its ids) and the editor's
        own queue account for."""

    def encodings_of(self, ids) -> dict[int, bytes]:
        """`{id: encoding}` for the edited levels among `ids` (what an actor needs to play them)."""

    def level(self, level_id: int) -> Any:
        """The level `level_id` names, as the env family's level object (for the service's level statistics)."""

    def counters(self) -> dict[str, int]:
        """Its counts: at least the children made (`num_children`), waiting (`queued`) and the levels held (`held`)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything the editor holds, as plain values for `contracts.snapshot.packb`."""


class LevelSource(Protocol):
    """Where a run's levels come from (see the module doc). Every mutator checks all of its input first and raises
    ValueError naming the field; on error nothing changes."""

    config: LevelConfig  # the run's levels section; `config.source` names what built it
    editor: LevelEditor | None

    @classmethod
    def for_run(cls, setup: CurriculumSetup) -> LevelSource:
        """The source of a run; ValueError naming the key where the run's level space or settings are not ones it
        runs on (a fixed-set source on an unbounded space, say)."""

    def draw(self) -> tuple[int, bool]:
        """One level for an episode start by the source's schedule: `(level id, replayed)`."""

    def draw_many(self, n: int, kind: str = "any") -> tuple[np.ndarray, np.ndarray]:
        """`n` levels: `(ids [n] int64, replayed [n] bool)`. `kind`: "any" (the source's own per-episode schedule),
        "replay" (replayed levels only, flagged True; while nothing can be replayed, new levels flagged False), "new"
        (new levels, an editor's queued children first, flagged False)."""

    def replay_probability(self) -> float:
        """The probability that the next draw by the schedule replays a level."""

    def update_with_episodes(self, results: EpisodeResults) -> None:
        """Fold finished episodes, scored where they were played, into the source."""

    def sample_weights(self) -> np.ndarray:
        """The replay distribution over the levels the source holds."""

    def counters(self) -> dict[str, int]:
        """Draws, replays, episodes, update calls and the source's own counts."""

    def view(self) -> LevelView:
        """The levels it holds, with their scores, staleness and replay weights (what the service's stats read)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything, as plain values for `contracts.snapshot.packb`, with `config` the levels section as a dict
        (`dataclasses.asdict`: its `curriculum` names the one that wrote it); `from_state_dict` reads it back."""

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> LevelSource:
        """The source a `state_dict()` describes; ValueError naming the first bad field."""

    def check_same_space(self, saved: LevelSource, what: str) -> None:
        """ValueError, naming `what` and the keys, unless `saved` (a state of the same curriculum, read back) runs
        over this source's level space, so that it may resume this run."""


class Curriculum(Protocol):
    """What `levels.source` names: a level source class (its classmethods), or one that picks one (`plr`)."""

    def for_run(self, setup: CurriculumSetup) -> LevelSource:
        """The source of a run (`LevelSource.for_run`)."""

    def from_state_dict(self, d: dict[str, Any]) -> LevelSource:
        """The source a saved state describes (`LevelSource.from_state_dict`)."""
