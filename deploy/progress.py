"""How a run is going, for people: the stop-at-return rule and the one-line progress report."""

from __future__ import annotations

from typing import Any

from levelray.contracts.config import RunConfig
from levelray.contracts.status import LearnerCoreStats

MIN_EPISODES_TO_STOP_AT_RETURN = 50  # a mean over fewer episodes is too noisy to end a run on


def reached_return(cfg: RunConfig, learner_stats: LearnerCoreStats) -> bool:
    """`stop_at_return` is met by the mean of at least `MIN_EPISODES_TO_STOP_AT_RETURN` episodes."""
    ret = learner_stats.get("episode_return_mean")
    return (
        cfg.stop_at_return is not None
        and ret is not None
        and learner_stats.get("episode_returns_window", 0) >= MIN_EPISODES_TO_STOP_AT_RETURN
        and ret >= cfg.stop_at_return
    )


def progress_line(record: dict[str, Any]) -> str:
    """One line of a `metrics.jsonl` record; the actors part is left out where the record has no count."""
    ret = record.get("episode_return_mean")
    ret_s = f"{ret:8.2f}" if ret is not None else "     n/a"
    actors = record.get("actors_alive")
    actors_s = f"  actors {actors}/{record.get('actors_desired')}" if actors is not None else ""
    if record.get("actors_pending"):
        actors_s += f" ({record['actors_pending']} pending)"
    if record.get("test_return_mean") is not None:
        actors_s += f"  held-out return {record['test_return_mean']:.2f}"
    return (
        f"steps {record['env_steps']:>10,d}  {record['env_steps_per_second']:>8,.0f}/s  return {ret_s}  "
        f"lag {record['policy_lag_mean']:5.2f}  version {record['learner_version']:>6d}{actors_s}"
    )
