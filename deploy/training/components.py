"""The services' in-process cores from the run config (the inline backend), and what both backends hand the
services: the sections (`service_section`) and each service's arguments (`level_service_args`,
`replay_service_args`)."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from levelray.contracts.config import LevelConfig, ReplayConfig, RunConfig
from levelray.contracts.levels import training_seeds

Section = TypeVar("Section", LevelConfig, ReplayConfig)


def service_section(section: Section) -> Section:
    """`section` with `snapshot_interval_s` at least 1 ms: a service checks the interval inside its calls,
    and a resumed run may carry an interval of 0."""
    return dataclasses.replace(section, snapshot_interval_s=max(section.snapshot_interval_s, 1e-3))


def level_service_args(cfg: RunConfig, *, snapshot_path: str | None = None,
                       initial_state: dict | None = None) -> dict[str, Any]:
    """The level service core's keyword arguments from the run config, for both backends (the inline one builds
    the core with them, the Ray one creates the actor with them): its level space (the training set, or the
    unbounded space from `env.start_level`), configured by `cfg.levels`, discount and seed from `cfg`, and the
    `env` section whole, so that a maze run's stats measure its levels and ACCEL's editor knows its family."""
    return dict(seeds=training_seeds(cfg.env), config=service_section(cfg.levels), start_level=cfg.env.start_level,
                discount=cfg.learner.discount, rng=cfg.seed, snapshot_path=snapshot_path,
                initial_state=initial_state, env=cfg.env)


def make_level_service(cfg: RunConfig, initial_state: dict | None = None):
    """The level service's core in this process (`level_service_args`, without snapshots)."""
    from levelray.level_service.service import LevelServiceCore

    return LevelServiceCore(**level_service_args(cfg, initial_state=initial_state))


def replay_service_args(cfg: RunConfig, *, snapshot_path: str | None = None,
                        initial_state: dict | None = None) -> dict[str, Any]:
    """The replay service core's keyword arguments from the run config, for both backends: configured by
    `cfg.replay`, seeded by `cfg.seed`."""
    return dict(config=service_section(cfg.replay), seed=cfg.seed, snapshot_path=snapshot_path,
                initial_state=initial_state)


def make_replay(cfg: RunConfig):
    """The replay service's core in this process (`replay_service_args`, without snapshots)."""
    from levelray.replay_service.service import ReplayServiceCore

    return ReplayServiceCore(**replay_service_args(cfg))
