"""Level curricula: the level sources (`LevelSampler` over a fixed set, `LevelBuffer` over an unbounded space), the
editors, and the level service around them.

`curriculum` holds the interface a source and an editor implement; `slots` the draws, staleness and scores both
sources share; `transforms` (score/staleness transforms, the EWA) and `staleness` (the Fenwick trees) the maths;
`sampler` and `buffer` the sources, `sfl` (with `sfl_state`) SFL's, `edited_levels` what every editor does and
`editors` an editor from its registration; `service` the service: `LevelServiceCore`, its Ray-free core, and
`LevelService`, the Ray actor. Those two are imported lazily so that importing the sampler never imports Ray.
"""

from levelray.level_service.sampler import LevelSampler

__all__ = ["LevelSampler", "LevelService", "LevelServiceCore"]


def __getattr__(name):
    if name in ("LevelService", "LevelServiceCore"):
        from levelray.level_service import service

        return getattr(service, name)
    raise AttributeError(f"module 'level_service' has no attribute {name!r}")
