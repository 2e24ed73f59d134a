"""Prioritized Level Replay: the pure sampler (`LevelSampler`) and the level service around it.

`scores` (one pure function per strategy), `transforms` (score/staleness transforms, the EWA), `episodes`
(cutting a batch into episodes) and `staleness` (the Fenwick trees) hold the maths; `sampler` the state and
bookkeeping; `service` the service: `LevelServiceCore`, its Ray-free core, and `LevelService`, the Ray actor.
Those two are imported lazily so that importing the sampler never imports Ray.
"""

from levelray.level_service.sampler import LevelSampler

__all__ = ["LevelSampler", "LevelService", "LevelServiceCore"]


def __getattr__(name):
    if name in ("LevelService", "LevelServiceCore"):
        from levelray.level_service import service

        return getattr(service, name)
    raise AttributeError(f"module 'level_service' has no attribute {name!r}")
