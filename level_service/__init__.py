"""Prioritized Level Replay: the pure sampler (`LevelSampler`) and its Ray service shell.

`LevelServiceCore` / `LevelService` are imported lazily so that importing the sampler never imports Ray.
"""

from levelray.level_service.sampler import LevelSampler

__all__ = ["LevelSampler", "LevelService", "LevelServiceCore"]


def __getattr__(name):
    if name in ("LevelService", "LevelServiceCore"):
        from levelray.level_service import service

        return getattr(service, name)
    raise AttributeError(f"module 'level_service' has no attribute {name!r}")
