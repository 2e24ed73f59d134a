"""The `actors` section of the run config (`ActorConfig`): the env actors, their envs and unrolls, and where the
inline backend's actors run the network. Imported from `contracts.config` like every section."""

from __future__ import annotations

from dataclasses import dataclass, field

from levelray.contracts.config_values import Section as _Section
from levelray.contracts.config_values import flag as _flag


@dataclass(frozen=True)
class ActorConfig(_Section):
    num_actors: int = field(default=2, metadata=_flag("--num-actors", "number of env actors", min=0, resumable=True))
    envs_per_actor: int = field(default=16, metadata=_flag("--envs-per-actor", "environments per actor", min=1))
    unroll_length: int = field(default=20, metadata=_flag("--unroll-length", "steps per unroll (T)", min=1))
    seed_prefetch: int = field(
        default=4, metadata=_flag("--seed-prefetch", "levels each env keeps ready from the level service, at least "
                                                     "(where episodes are short: about a second of them)", min=1,
                                                     resumable=True)
    )
    unrolls_per_submit: int = field(
        default=1,
        metadata=_flag("--unrolls-per-submit", "unrolls an actor sends to the learner per call (fewer, larger calls)",
                       min=1, resumable=True),
    )
    num_cpus: float | None = field(
        default=None,
        metadata=_flag("--actor-cpus", "logical CPUs Ray reserves per env actor (none: 1 on a cluster, 0 on the "
                       "embedded local Ray, so that `levelray scale` may go past the cores)", min=0.0, resumable=True),
    )
    device: str = field(
        default="auto",
        metadata=_flag("--actor-device", "where the inline backend's actors run the network: auto (the learner's "
                       "device: on a GPU the envs step on the CPU, the network acts on the GPU for all of them and the "
                       "unrolls stay there for the learner), cpu, cuda or cuda:N; the Ray backend's env actors act "
                       "on CPU"),
    )
    max_restarts: int = field(
        default=6,
        metadata=_flag("--max-actor-restarts", "times in a row an env actor that dies within a minute of starting "
                       "is replaced (after 0.5 s, doubling to 30 s); one more failure stops the job", min=0,
                       resumable=True),
    )
