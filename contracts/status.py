"""The status snapshot: what a backend's `poll()` reports of a running job, and what the driver loop turns
into a `metrics.jsonl` record, the Prometheus series and the progress line.

TypedDicts rather than classes, as `Unroll` is: a snapshot crosses Ray as plain dicts (the learner's and the
supervisor's answers are merged as they arrive), and type checkers still see every field. A field that only
one backend has is `NotRequired` and absent elsewhere, never filled with a stand-in value; readers take
absent fields through `actor_counts` (the actors) or `.get` with the default the record documents.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from levelray.contracts.counters import LearnerCounters


class LearnerCoreStats(LearnerCounters):
    """`LearnerCore.stats()`: the learner's counters (every field of `LearnerCounters`) and its last update's
    metrics."""

    episode_return_mean: float | None  # over the last 100 episodes; None before the first
    episode_length_mean: float | None
    episode_returns_window: int  # episodes the mean is over
    policy_lag_mean: float
    policy_lag_buckets: list[float]
    policy_lag_counts: list[int]  # [len(buckets) + 1]: the histogram, the last bin unbounded
    policy_lag_sum: float
    last_nonfinite: str | None
    metrics: dict[str, float]  # the last update's losses, entropy, grad norm, ...
    device: str
    threads: int  # torch's intra-op threads in the learner's process (`policy.threads`)
    replay_beta: float


class LearnerStats(LearnerCoreStats):
    """The learner's part of a snapshot: its core's stats and how unrolls reach it."""

    queue_depth: int  # unrolls waiting for the learner (0 inline: the actors hand them over in turn)
    # The Ray learner service only (inline, the services are called directly and raise instead):
    error: NotRequired[str | None]  # why its training thread stopped: the job must stop
    node: NotRequired[str]
    time: NotRequired[float]
    replay_failures: NotRequired[int]
    replay_write_failures: NotRequired[dict[str, int]]


class ActorError(TypedDict):
    """An env actor's death."""

    time: float
    actor: int
    error: str
    when: str  # "at start" or "after N s"


class SupervisorStatus(TypedDict):
    """`Supervisor.status()`: the env actors of a Ray job (see `deploy.cluster.supervisor`)."""

    actors_alive: int
    actors_desired: int
    actors_pending: int
    actors_unresponsive: int
    actor_restarts: int
    actor_failures: int  # deaths before a healthy run
    actor_cpus: float
    restart_backoff_s: float  # the longest delay a waiting replacement has
    respawns: list[dict[str, Any]]
    last_actor_error: ActorError | None
    recent_deaths: list[dict[str, Any]]
    error: str | None  # a lineage ran out of restarts: the job must stop
    actors: list[dict[str, Any]]  # one per actor, with its state
    progress: dict[str, Any]  # the driver's latest view (`env_steps_per_second`, `time`)


class StatusSnapshot(TypedDict):
    """`Backend.poll()`."""

    learner: LearnerStats
    # Ray: the supervisor (absent from a report it did not answer in time); inline has none.
    supervisor: NotRequired[SupervisorStatus]
    in_process_actors: NotRequired[int]  # inline: rollout workers stepped in the driver's process
    levels: NotRequired[dict[str, Any]]  # the level service's stats(), with a level set
    replay: NotRequired[dict[str, Any]]  # the replay service's stats(), with replay
    learner_restarts: NotRequired[int]  # Ray: learners restarted from a checkpoint
    supervisor_restarts: NotRequired[int]  # Ray: supervisors replaced
    # Added by the driver loop before the snapshot goes to Prometheus:
    env_steps_per_second: NotRequired[float]
    levels_replay_fraction: NotRequired[float | None]  # `deploy.training.driver.RecentFraction`
    levels_trained_fraction: NotRequired[float | None]  # the same, of env steps trained on
    test_return_mean: NotRequired[float]  # the last successful held-out evaluation


class ActorCounts(TypedDict):
    """The env actors as a record and Prometheus report them, whichever backend (None: not known)."""

    actors_alive: int | None
    actors_desired: int | None
    actors_pending: int | None
    actor_restarts: int | None
    actor_failures: int | None
    restart_backoff_s: float | None


def actor_counts(snap: StatusSnapshot) -> ActorCounts:
    """The supervisor's counts (Ray); in-process actors (inline) are all alive, none waits or restarted;
    every count None when the snapshot has neither (the supervisor did not answer this report)."""
    if "supervisor" in snap:
        sup = snap["supervisor"]
        return ActorCounts(**{key: sup.get(key) for key in ActorCounts.__annotations__})
    n = snap.get("in_process_actors")
    if n is None:
        return ActorCounts(**dict.fromkeys(ActorCounts.__annotations__))
    return ActorCounts(actors_alive=n, actors_desired=n, actors_pending=0, actor_restarts=0, actor_failures=0,
                       restart_backoff_s=0.0)


# ACCEL's editor (`levels.editor accel`): children made so far; in the records of runs with the editor only.
LEVEL_EDITOR_KEYS = ("levels_edited",)
# The learner's fields `levelray status` shows beside the supervisor's.
# What the driver hands the supervisor of each record, for `levelray status` (the rate and the level counters are
# computed by the driver, or read from the level service, not by the learner).
# Every other `levels_*` key of a record is published too: the family's measures of its levels (a maze's
# `levels_mean_walls`, `contracts.families.LevelStatistics`), `published`.
PUBLISHED_KEYS = ("env_steps_per_second", "time", "levels_buffered", "levels_replay_fraction",
                  "levels_trained_fraction", "levels_evicted", *LEVEL_EDITOR_KEYS)


def published(record: dict[str, Any]) -> dict[str, Any]:
    """What the driver hands the supervisor of a record (see `PUBLISHED_KEYS`)."""
    return {key: record.get(key) for key in PUBLISHED_KEYS} | {
        key: value for key, value in record.items() if key.startswith("levels_")}
STATUS_LEARNER_KEYS = ("learner_version", "env_steps", "episode_return_mean", "policy_lag_mean", "queue_depth",
                       "learners")  # learners: one {rank, node, device, threads, queue_depth, version} per learner
