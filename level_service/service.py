"""Level service: a thin Ray actor around a level source, which the env actors draw levels from and report their
episodes to.

It runs over one of two level spaces (`level_service.spaces`): a fixed training set (`LevelSampler`), or an
unbounded space from `start_level` on, where PLR keeps a buffer of its best levels (`LevelBuffer`); it uses either
only through the level source protocol (`level_service.curriculum.LevelSource`).

`LevelServiceCore` is the Ray-free core of the service (a `*ServiceCore` always is): it holds all the logic,
and tests and the Ray-free `inline` backend use it directly; `LevelService` is the same class wrapped by
`ray.remote` (a sync actor, so Ray runs one
method at a time: `max_concurrency=1`, no locking needed).  Every method validates its input first; a bad
call raises ValueError, which Ray re-raises in the caller (as a RayTaskError that is also a ValueError),
and the actor keeps serving.

Why `sample_levels(n)` returns a batch: one actor round trip costs a few hundred microseconds to a
millisecond (serialisation, two RPC hops, scheduling), versus ~10 us to draw a seed.  Env actors therefore
prefetch a small buffer of levels per env (e.g. n = 32 for a vector env) and take the next one locally at
every episode start, so an episode never waits on the service; the buffer is refilled in the background.
Each level comes with whether it is a replay (Robust PLR trains on replays only), and actors call `draw_levels(n)`,
which adds the encodings of the edited levels among them (ACCEL's children exist only as data, held here), so
an episode on an edited level needs no extra round trip either. The actors' results arrive the same way, many
finished episodes per call (`report_episodes`).
Slightly stale priorities (a seed drawn a few episodes before it is played) are harmless: scores change
slowly and the staleness term only needs approximate counts.  `benchmarks/bench_plr.py` measures one call
through Ray for n = 1 and n = 32 and the amortised cost per seed.

Snapshots: `snapshot()` writes the sampler state and the service counters atomically (msgpack, via
`contracts.snapshot`) and returns the path; any call also writes one when the section's
`snapshot_interval_s` has passed since the last write.  On start, an existing snapshot at `snapshot_path`
is restored (the snapshot's sampler configuration wins over the `config` given; its level space must be the
one given); a missing
file starts from `initial_state` (a checkpoint's sampler state) or fresh; a corrupt one raises
`SnapshotError` naming the file. Run as a Ray actor with `max_restarts`, a crashed service therefore
comes back with the state of its last snapshot.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from levelray.contracts import snapshot
from levelray.contracts.config import EnvConfig, LevelConfig
from levelray.contracts.families import level_statistics
from levelray.contracts.levels import EpisodeResults
from levelray.level_service.buffer import LevelBuffer
from levelray.level_service.slots import DRAW_KINDS
from levelray.level_service.spaces import (
    LevelSource,
    LevelView,
    check_same_space,
    level_encodings,
    levels_view,
    make_sampler,
    sampler_from_state,
)
from levelray.level_service.windows import Window, WindowDecider

__all__ = ["LevelServiceCore", "LevelService", "SNAPSHOT_FORMAT"]

SNAPSHOT_FORMAT = "levelray.level_service/1"
MAX_SEEDS_PER_CALL = 1 << 20


class LevelServiceCore:
    """The level service without Ray: PLR over `seeds` (None: the unbounded space from `start_level`), configured
    by the `levels` section.

    `discount` is the learner's (for `one_step_td_error`); `rng` seeds the sampler (an int, a Generator or
    None). The section's `snapshot_interval_s` is the period of the automatic snapshots to `snapshot_path`.
    `env` is the run's `env` section: where its family measures its levels (`contracts.families.level_statistics`:
    a maze run's wall counts and path lengths) `stats()` has those measures of the levels it holds, flat and under
    `level_statistics`, and an editor (`levels.editor`) edits the levels of the family it names; without the
    section those keys are absent (and an editor refused).
    """

    def __init__(
        self,
        seeds,
        config: LevelConfig | None = None,
        *,
        start_level: int = 0,
        discount: float = 0.99,
        rng=None,
        snapshot_path: str | None = None,
        initial_state: dict | None = None,
        env: EnvConfig | None = None,
    ):
        self._level_statistics = level_statistics(env, self._edited_level)
        fresh = make_sampler(seeds, config, start_level=start_level, discount=discount, rng=rng, env=env)
        # a finite float >= 0 (the sampler checked the section's leaves); 0 is a valid leaf, which a resumed run may
        # carry, and `deploy.training.components.service_section` hands the service at least 1 ms
        snapshot_interval_s = fresh.config.snapshot_interval_s
        if not snapshot_interval_s > 0:
            raise ValueError(f"snapshot_interval_s must be a positive number, got {snapshot_interval_s!r}")
        self._snapshot_path = None if snapshot_path is None else str(snapshot_path)
        self._schedule = snapshot.SnapshotSchedule("level service", snapshot_interval_s)
        self._num_sample_calls = 0
        self._num_update_calls = 0
        self._num_snapshots = 0
        self._windows: WindowDecider | None = None  # level windows (`level_service.windows`); restored or made below
        self._restored = False
        if self._snapshot_path is not None and Path(self._snapshot_path).exists():
            self._sampler = self._restore(self._snapshot_path, fresh)
            self._restored = True
        elif initial_state is not None:  # e.g. the sampler state of a checkpoint being resumed
            self._sampler = sampler_from_state(initial_state)
            check_same_space(self._sampler, fresh, "initial_state")
            self._restored = True
        else:
            self._sampler = fresh
        self._schedule.written()  # the first periodic snapshot is one interval after the start
        if not self._windowed():
            self._windows = None
        elif self._windows is None:  # fresh, or restored from a state without level windows
            self._windows = WindowDecider(_windows_rng(rng))
        self._set_window_mode()

    # ------------------------------------------------------------------ snapshots
    def _restore(self, path: str, fresh: LevelSource) -> LevelSource:
        data = snapshot.load(path)
        if not isinstance(data, dict) or data.get("format") != SNAPSHOT_FORMAT:
            raise snapshot.SnapshotError(f"{path} is not a level-service snapshot ({SNAPSHOT_FORMAT})")
        try:
            sampler = sampler_from_state(data["sampler"])
            counts = data["service"]
            self._num_sample_calls = int(counts["num_sample_calls"])
            self._num_update_calls = int(counts["num_update_calls"])
            self._num_snapshots = int(counts["num_snapshots"])
            if counts.get("windows") is not None:
                self._windows = WindowDecider.from_state_dict(counts["windows"])
        except (KeyError, TypeError, ValueError) as exc:
            raise snapshot.SnapshotError(f"snapshot {path} holds an invalid level-service state: {exc}") from exc
        check_same_space(sampler, fresh, f"snapshot {path}")
        return sampler

    def _state(self) -> dict[str, Any]:
        return {
            "format": SNAPSHOT_FORMAT,
            "sampler": self._sampler.state_dict(),
            "service": {
                "num_sample_calls": self._num_sample_calls,
                "num_update_calls": self._num_update_calls,
                "num_snapshots": self._num_snapshots,
                "windows": None if self._windows is None else self._windows.state_dict(),
            },
        }

    def snapshot(self) -> str:
        """Write a snapshot now; returns its path.  Raises ValueError if no snapshot_path was given."""
        if self._snapshot_path is None:
            raise ValueError("snapshot() needs a snapshot_path; the service was created without one")
        self._num_snapshots += 1
        snapshot.save(self._snapshot_path, self._state())
        self._schedule.written()
        return self._snapshot_path

    def _maybe_snapshot(self) -> None:
        self._schedule.run_if_due(self._snapshot_path, self.snapshot)

    # ------------------------------------------------------------------ API
    def _windowed(self) -> bool:
        """Level windows: a level buffer whose section asks for them (`levels.window` > 0)."""
        return isinstance(self._sampler, LevelBuffer) and self._sampler.config.window > 0

    def _set_window_mode(self) -> None:
        """With level windows, ACCEL's children are made per replay window, not per scored replay."""
        if isinstance(self._sampler, LevelBuffer):
            self._sampler.edit_on_scoring = self._windows is None

    def sample_levels(self, n: int, kind: str = "any") -> tuple[list[int], list[bool]]:
        """`n` levels drawn one after the other (a prefetch buffer for an actor): their seeds, and whether each
        is a replay (Robust PLR trains only on those; see `LevelSampler.draw` and `LevelBuffer.draw`). `kind`:
        "any" (the replay schedule), "replay" or "new" (see `LevelBuffer.draw_many`)."""
        try:
            if isinstance(n, bool) or not isinstance(n, int | np.integer) or not 0 <= n <= MAX_SEEDS_PER_CALL:
                raise ValueError(f"n must be an int in [0, {MAX_SEEDS_PER_CALL}], got {n!r}")
            if kind not in DRAW_KINDS:
                raise ValueError(f"kind must be one of {', '.join(DRAW_KINDS)}, got {kind!r}")
            seeds, replayed = self._sampler.draw_many(int(n), kind)
            self._num_sample_calls += 1
            return seeds.tolist(), replayed.tolist()
        finally:
            self._maybe_snapshot()

    def draw_levels(self, n: int, kind: str = "any") -> tuple[list[int], list[bool], dict[int, bytes]]:
        """`sample_levels(n, kind)` and the encodings of the edited levels among them, `{id: MazeLevel encoding}`
        (what an actor needs to play them; empty without an editor)."""
        ids, replayed = self.sample_levels(n, kind)
        return ids, replayed, level_encodings(self._sampler, ids)

    def draw_window(self, num_envs: int, extra: int = 0) -> Window:
        """An actor's next level window (`level_service.windows`): replay or explore, decided here, with one level
        per env and, for a replay window, `extra` more replayed levels. ValueError naming the field for a bad count,
        or where the service has no level windows (a fixed level set, or `levels.window` 0); nothing changes."""
        try:
            if self._windows is None:
                raise ValueError("draw_window needs a level buffer with level windows (--num-levels 0, levels.window "
                                 "> 0); this service decides replay per episode")
            window = self._windows.draw(self._sampler, num_envs, extra,
                                        lambda ids: level_encodings(self._sampler, ids))
            self._num_sample_calls += 1
            return window
        finally:
            self._maybe_snapshot()

    def sample_seeds(self, n: int) -> list[int]:
        """The seeds of `sample_levels(n)`, for tools that do not need the replay flags."""
        return self.sample_levels(n)[0]

    def report_episodes(self, results: EpisodeResults) -> None:
        """An actor's finished episodes, each scored where it was played (`EpisodeResults`); see the samplers'
        `update_with_episodes`. Bad input raises ValueError naming the field, and nothing changes."""
        try:
            self._sampler.update_with_episodes(results)
            self._num_update_calls += 1
        finally:
            self._maybe_snapshot()

    def sample_weights(self) -> np.ndarray:
        """The sampler's replay distribution over its seeds (see `LevelSampler.sample_weights`)."""
        try:
            return self._sampler.sample_weights()
        finally:
            self._maybe_snapshot()

    def state_dict(self) -> dict[str, Any]:
        """The sampler's full state (what a snapshot holds), for tests and tooling."""
        return self._sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the sampler's state by `state` (a `state_dict()`), for the same level space. A state that
        does not load, or was written for another level space, raises and leaves the service as it was."""
        sampler = sampler_from_state(state)
        check_same_space(sampler, self._sampler, "state")
        self._sampler = sampler
        self._set_window_mode()
        self._restored = True

    def _edited_level(self, level_id: int) -> Any:
        """The level the editor holds for `level_id` (None without an editor): the family's statistics resolve
        the levels that exist only as data here, and every other level from its id."""
        editor = self._sampler.editor
        return None if editor is None else editor.level(level_id)

    def stats(self, vectors: bool | None = None) -> dict[str, Any]:
        """Summary for logs/metrics (see the module docstring of the sampler for definitions). `vectors`: with
        the per-level `seeds`, `weights` and `staleness_vector` (by default for a fixed set only, whose driver
        records them at every report; a buffer's slots change levels, so its driver does not)."""
        try:
            return self._stats(vectors)
        finally:
            self._maybe_snapshot()

    def _stats(self, vectors: bool | None) -> dict[str, Any]:
        s = self._sampler
        view = levels_view(s)
        num_scored = int(view.scored.sum())
        out: dict[str, Any] = {
            "num_levels": view.capacity,
            "num_seen": num_scored,
            "seen_fraction": num_scored / view.capacity,
            "levels_buffered": num_scored,
            "buffered": view.buffered,
            "strategy": s.config.strategy,
            "restored_from_snapshot": self._restored,
            "num_sample_calls": self._num_sample_calls,
            "num_update_calls": self._num_update_calls,
            "num_snapshots": self._num_snapshots,
            **(self._windows.counts if self._windows is not None else {}),
            "snapshot_errors": self._schedule.errors,
            "last_snapshot_error": self._schedule.last_error,
        }
        # num_samples, num_replays, num_episodes (committed scores), dropped fragments; a buffer's
        # num_new, num_inserted, num_evicted, num_rejected
        counts = s.counters()
        counts["num_rollout_batches"] = counts.pop("num_update_calls")
        out.update(counts)
        out["levels_evicted"] = counts.get("num_evicted", 0)
        editor = s.editor
        if editor is not None:  # ACCEL: children made (levels_edited), dropped, waiting, edited levels buffered
            out["editor"] = {**editor.counters(), "buffered": int(editor.knows(view.seeds).sum())}
            out["levels_edited"] = out["editor"]["num_children"]
        out.update(_distribution_stats(view, not view.buffered if vectors is None else vectors))
        # the family's measures of the scored levels (a maze's walls), and the source's own where it has some (SFL's
        # learnability): both `contracts.families.LevelStatistics`, flowing alike to records, status and Prometheus
        measures = [m for m in (self._level_statistics, getattr(s, "level_statistics", None)) if m is not None]
        if measures:
            measured = {k: v for m in measures for k, v in m.summary(view.seeds[view.scored]).items()}
            out.update(measured)
            out["level_statistics"] = measured
            out["level_statistics_help"] = {k: v for m in measures for k, v in m.descriptions.items()}
        return out


def _windows_rng(rng) -> np.random.Generator:
    """The level windows' own generator, from the service's `rng`: a stream apart from the sampler's."""
    if isinstance(rng, np.random.Generator):
        return rng.spawn(1)[0]
    return np.random.default_rng(None if rng is None else [int(rng), 1])


def _distribution_stats(view: LevelView, vectors: bool) -> dict[str, Any]:
    """Score quantiles, staleness, the top replay weights and (`vectors`) the full vectors of the levels."""
    out: dict[str, Any] = {"score": None, "staleness": None}
    if view.scored.any():
        sc = view.scores[view.scored]
        q = np.percentile(sc, [0, 25, 50, 75, 100])
        out["score"] = {"min": float(q[0]), "p25": float(q[1]), "median": float(q[2]), "p75": float(q[3]),
                        "max": float(q[4]), "mean": float(sc.mean())}
        st = view.staleness[view.scored]
        out["staleness"] = {"mean": float(st.mean()), "max": int(st.max())}
    weights = view.weights
    top = np.argsort(-weights, kind="stable")[:10]
    out["top_levels"] = [
        {"seed": int(view.seeds[i]), "score": float(view.scores[i]), "weight": float(weights[i])}
        for i in top.tolist()
        if weights[i] > 0
    ]
    if vectors:
        out["weights"] = weights
        out["staleness_vector"] = view.staleness
        out["seeds"] = view.seeds
    return out


try:  # Ray is optional: the Ray-free (inline) backend imports only LevelServiceCore.
    import ray
except ImportError:  # pragma: no cover - exercised only where Ray is not installed
    ray = None

# A sync actor: Ray runs one method at a time, so the core needs no locking.
LevelService = ray.remote(max_concurrency=1)(LevelServiceCore) if ray is not None else None
