"""Joining a Ray cluster or starting the embedded local one: what training, evaluation and the tools share."""

from __future__ import annotations

import os

from levelray.deploy.supervisor import NAMESPACE


def init_ray(address: str | None, num_actors: int, *, dashboard: bool = False) -> bool:
    """Connect to `address` or start a local Ray; returns True when this process started it.

    The local Ray gets max(cores, num_actors + 1) logical CPUs: enough for the learner and `num_actors`
    one-CPU tasks or actors (held-out evaluation, `levelray evaluate`). A training job's env actors ask
    for no CPU on it (`RayJob(embedded=True)`), so scaling them up later is never refused here."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address:
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False)
        return False
    cpus = max(os.cpu_count() or 1, num_actors + 1)
    # address="local": a new Ray of its own, even where a `ray start` cluster runs on this machine or
    # RAY_ADDRESS is set (plain ray.init() would join that one, and refuse num_cpus for it).
    ray.init(address="local", num_cpus=cpus, namespace=NAMESPACE, include_dashboard=dashboard,
             dashboard_host="127.0.0.1", log_to_driver=False)
    return True
