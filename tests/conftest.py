"""Shared fixtures. Ray is started once per test session (it takes ~6 s) and shared by every
test that asks for `ray_session`: a Ray of the session's own (`address="local"`), never a cluster that a `ray start`
on this machine or RAY_ADDRESS points at."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture(scope="session")
def ray_session():
    import ray

    if not ray.is_initialized():
        ray.init(
            address="local",
            num_cpus=8,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            object_store_memory=512 * 1024 * 1024,
        )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def one_thread():
    """Tiny batches: one torch thread is as fast, and spinning threads crawl on a loaded machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
