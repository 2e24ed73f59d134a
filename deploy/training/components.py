"""The services' in-process cores from the run config (the inline backend), and the one rule both backends
apply to the sections they hand the services."""

from __future__ import annotations

import dataclasses
from typing import TypeVar

from levelray.contracts.config import LevelConfig, ReplayConfig, RunConfig
from levelray.contracts.levels import training_seeds

Section = TypeVar("Section", LevelConfig, ReplayConfig)


def service_section(section: Section) -> Section:
    """`section` with `snapshot_interval_s` at least 1 ms: a service checks the interval inside its calls,
    and a resumed run may carry an interval of 0."""
    return dataclasses.replace(section, snapshot_interval_s=max(section.snapshot_interval_s, 1e-3))


def make_level_service(cfg: RunConfig, initial_state: dict | None = None):
    """The level service's core over the run's level space (its training set, or the unbounded space from
    `env.start_level`), configured by `cfg.levels` (discount and seed from `cfg`; the `env` section whole, so
    that a maze run's stats measure its levels)."""
    from levelray.level_service.service import LevelServiceCore

    return LevelServiceCore(training_seeds(cfg.env), service_section(cfg.levels), start_level=cfg.env.start_level,
                            discount=cfg.learner.discount, rng=cfg.seed, initial_state=initial_state,
                            env=cfg.env)


def make_replay(cfg: RunConfig):
    """The replay service's core, configured by `cfg.replay` (seeded by `cfg.seed`)."""
    from levelray.replay_service.service import ReplayServiceCore

    return ReplayServiceCore(service_section(cfg.replay), seed=cfg.seed)
