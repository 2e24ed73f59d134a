"""The services' arguments from the run config, and their in-process cores (used by both backends)."""

from __future__ import annotations

import numpy as np

from levelray.contracts.config import LevelConfig, RunConfig


def sampler_kwargs(levels: LevelConfig, discount: float) -> dict:
    return dict(
        strategy=levels.strategy,
        replay_schedule=levels.replay_schedule,
        score_transform=levels.score_transform,
        temperature=levels.temperature,
        eps=levels.eps,
        rho=levels.rho,
        nu=levels.nu,
        alpha=levels.alpha,
        staleness_coef=levels.staleness_coef,
        staleness_transform=levels.staleness_transform,
        staleness_temperature=levels.staleness_temperature,
        discount=discount,
    )


def level_service_kwargs(cfg: RunConfig) -> dict:
    """The PLR sampler's arguments for `LevelServiceCore` (Ray actor or in process)."""
    return {**sampler_kwargs(cfg.levels, cfg.learner.discount), "rng": cfg.seed}


def make_level_service(cfg: RunConfig, seeds: np.ndarray, initial_state: dict | None = None):
    from levelray.level_service.service import LevelServiceCore

    return LevelServiceCore(seeds, level_service_kwargs(cfg), initial_state=initial_state)


def replay_kwargs(cfg: RunConfig) -> dict:
    r = cfg.replay
    return dict(alpha=r.alpha, max_use=r.max_use, min_size=r.min_size, seed=cfg.seed,
                snapshot_max_item_bytes=r.snapshot_max_item_bytes)


def make_replay(cfg: RunConfig):
    from levelray.replay_service.service import ReplayServiceCore

    return ReplayServiceCore(cfg.replay.capacity, **replay_kwargs(cfg))
