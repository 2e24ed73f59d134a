"""Reading a `LevelSampler.state_dict()` back: every field checked before the sampler is rebuilt from it.

Version 2 (what `state_dict` writes) saves the config as `dataclasses.asdict` of the sampler's `LevelConfig` plus
`discount` (a section inside it, `levels.sfl`, as a mapping); a field missing from a saved config takes the
section's default. Version 1 states hold the
sampler's twelve settings as flat keys (no `snapshot_interval_s`): they load the same way, so checkpoints
and service snapshots in that format resume.

`pending` holds unfinished episodes scored step by step (`{actor id: (level, score sum, steps)}`). Scores arrive
as finished episodes (`update_with_episodes`), so nothing can finish such a fragment: a state is written with none,
and a state holding some loads with them checked, then dropped and counted in `num_dropped_fragments`. The key
stays so that every state of either version reads alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from levelray.contracts.config import LevelConfig, field_types, from_dict
from levelray.contracts.rng import rng_from_state
from levelray.level_service.checks import as_int_array

__all__ = [
    "STATE_VERSION", "SamplerState", "config_state", "pending_state", "read_config", "read_pending_rows", "read_state",
]

STATE_VERSION = 2
_V1_CONFIG_KEYS = (
    "strategy", "replay_schedule", "score_transform", "temperature", "eps", "rho", "nu", "alpha",
    "staleness_coef", "staleness_transform", "staleness_temperature", "discount",
)
COUNT_KEYS = ("num_samples", "num_episodes", "num_update_calls", "num_dropped_fragments")


class SamplerState(NamedTuple):
    """A checked sampler state; arrays are `[n]` over the sampler's seeds, in their order."""

    seeds: np.ndarray
    config: LevelConfig
    discount: float
    rng: np.random.Generator
    scores: np.ndarray  # float64, finite
    seen: np.ndarray  # bool
    last: np.ndarray  # int64 in [0, counter]
    counter: int
    next_seed_index: int
    pending: dict[int, tuple[int, float, int]]  # actor id -> (level index, score sum, steps): dropped on load
    counts: dict[str, int]  # COUNT_KEYS


def config_state(config: LevelConfig, discount: float) -> dict[str, Any]:
    """The saved form of a sampler's settings. `source` (the level source that wrote the state,
    `level_service.spaces`) is left out for the default, `plr`, so that a PLR state is the one written before level
    sources were named, which reads as `plr` (`read_config` gives a missing field its default)."""
    saved = {**dataclasses.asdict(config), "discount": discount}
    if saved["source"] == "plr":
        del saved["source"]
    return saved


def read_config(cfg: Any, version: int) -> tuple[LevelConfig, Any]:
    """The saved settings of a version 1 or 2 state: `(LevelConfig, discount)`."""
    fields = {f.name for f in dataclasses.fields(LevelConfig)}
    if version == 1:
        if not isinstance(cfg, dict) or set(cfg) != set(_V1_CONFIG_KEYS):
            raise ValueError(f"state['config'] must have exactly the keys {sorted(_V1_CONFIG_KEYS)}")
    elif not isinstance(cfg, dict) or "discount" not in cfg or not set(cfg) <= fields | {"discount"}:
        raise ValueError(f"state['config'] must hold 'discount' and fields of LevelConfig {sorted(fields)}")
    settings = {k: v for k, v in cfg.items() if k != "discount"}
    hints = field_types(LevelConfig)
    for name, value in settings.items():  # a section inside `levels` (`levels.sfl`) is saved as a mapping
        if dataclasses.is_dataclass(hints[name]):
            settings[name] = from_dict(value, hints[name], f"levels.{name}.")
    return LevelConfig(**settings), cfg["discount"]


def _array(d: dict[str, Any], name: str, dtype, n: int) -> np.ndarray:
    a = np.asarray(d[name])
    if a.shape != (n,) or a.dtype != dtype:
        raise ValueError(f"state[{name!r}] must be a {np.dtype(dtype)} array of shape ({n},)")
    return a.copy()


def pending_state(pending: dict[int, tuple[int, float, int]]) -> dict[str, Any]:
    """The saved form of pending fragments `{actor id: (level, score sum, steps)}` (`read_pending_rows` reads it)."""
    ids = list(pending)
    return {
        "actor_ids": [int(a) for a in ids],
        "levels": np.array([pending[a][0] for a in ids], dtype=np.int64),
        "sums": np.array([pending[a][1] for a in ids], dtype=np.float64),
        "steps": np.array([pending[a][2] for a in ids], dtype=np.int64),
    }


def read_pending_rows(p: dict[str, Any], bad_level: Callable[[np.ndarray], np.ndarray]
                      ) -> dict[int, tuple[int, float, int]]:
    """Pending fragments `{actor id: (level, score sum, steps)}`; `bad_level(levels)` marks levels out of range."""
    pid = [int(a) for a in p["actor_ids"]]
    plv = np.asarray(p["levels"], dtype=np.int64).reshape(-1)
    psm = np.asarray(p["sums"], dtype=np.float64).reshape(-1)
    pst = np.asarray(p["steps"], dtype=np.int64).reshape(-1)
    if not (len(pid) == plv.size == psm.size == pst.size) or len(set(pid)) != len(pid):
        raise ValueError("state['pending'] must hold equal-length actor_ids/levels/sums/steps, ids distinct")
    if bad_level(plv).any() or (pst < 0).any() or not np.isfinite(psm).all():
        raise ValueError("state['pending'] holds out-of-range levels, negative steps or non-finite sums")
    rows = zip(pid, plv.tolist(), psm.tolist(), pst.tolist(), strict=True)
    return {a: (lv, sm, st) for a, lv, sm, st in rows}


def read_state(d: Any) -> SamplerState:
    """The checked content of a version 1 or 2 state; ValueError naming the first bad field."""
    try:
        return _read_state(d)
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        raise ValueError(f"malformed sampler state: {type(exc).__name__}: {exc}") from exc


def _read_state(d: Any) -> SamplerState:
    if not isinstance(d, dict) or d.get("version") not in (1, STATE_VERSION):
        raise ValueError(f"sampler state must be a dict with version 1 or {STATE_VERSION}")
    rng = rng_from_state(d["rng"], "state['rng']")
    config, discount = read_config(d["config"], d["version"])
    seeds = as_int_array("seeds", d["seeds"], 1)
    n = seeds.size
    scores = _array(d, "scores", np.float64, n)
    seen = _array(d, "seen", np.bool_, n)
    last = _array(d, "last_sampled", np.int64, n)
    counter = int(d["counter"])
    if not np.isfinite(scores).all():
        raise ValueError("state['scores'] must be finite")
    if counter < 0 or (last < 0).any() or (last > counter).any():
        raise ValueError("state['last_sampled'] must lie in [0, counter]")
    nxt = int(d["next_seed_index"])
    if not 0 <= nxt < n:
        raise ValueError(f"state['next_seed_index'] must be in [0, {n})")
    pending = read_pending_rows(d["pending"], lambda lv: (lv < 0) | (lv >= n))
    counts = {k: int(d["counts"][k]) for k in COUNT_KEYS}
    if "num_replays" in d["counts"]:  # states written before replays were counted lack it
        counts["num_replays"] = int(d["counts"]["num_replays"])
    return SamplerState(seeds, config, discount, rng, scores, seen, last, counter, nxt, pending, counts)
