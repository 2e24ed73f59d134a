"""Builds the services' cores from the run config (used by both backends)."""

from __future__ import annotations

import numpy as np
from levelray.contracts.config import EnvConfig, LevelConfig, RunConfig


def level_seeds(env: EnvConfig) -> np.ndarray | None:
    """The training level set `[start_level, start_level + num_levels)`; None when unbounded."""
    if env.num_levels <= 0:
        return None
    return np.arange(env.start_level, env.start_level + env.num_levels, dtype=np.int64)


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


def make_level_sampler(cfg: RunConfig, seeds: np.ndarray):
    from levelray.level_service.sampler import LevelSampler

    return LevelSampler(seeds, **sampler_kwargs(cfg.levels, cfg.learner.discount), rng=cfg.seed)


def replay_kwargs(cfg: RunConfig) -> dict:
    r = cfg.replay
    return dict(alpha=r.alpha, max_use=r.max_use, min_size=r.min_size, seed=cfg.seed,
                snapshot_max_item_bytes=r.snapshot_max_item_bytes)


def make_replay(cfg: RunConfig):
    from levelray.replay_service.service import ReplayServiceCore

    return ReplayServiceCore(cfg.replay.capacity, **replay_kwargs(cfg))
