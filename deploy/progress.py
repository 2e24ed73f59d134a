"""Run statistics shared by both backends: episode return window, throughput, the report record."""

from __future__ import annotations

import math
import time
from collections import deque

import numpy as np


class Progress:
    """Counts env steps and episodes; `report()` builds one `metrics.jsonl` record."""

    def __init__(self, window: int = 100, env_steps: int = 0, episodes: int = 0):
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.lags: deque[float] = deque(maxlen=window * 10)
        self.env_steps = env_steps
        self.episodes = episodes
        self.start_time = time.time()
        self._last_time = self.start_time
        self._last_steps = env_steps
        self.steps_per_second = 0.0

    def add_unroll(self, unroll: dict, learner_version: int) -> None:
        self.env_steps += int(unroll["rewards"].size)
        rets = unroll.get("episode_returns")
        if rets is not None and len(rets):
            self.returns.extend(float(r) for r in rets)
            self.lengths.extend(int(x) for x in unroll["episode_lengths"])
            self.episodes += len(rets)
        self.lags.append(float(learner_version - int(unroll["policy_version"])))

    @property
    def mean_return(self) -> float:
        return float(np.mean(self.returns)) if self.returns else math.nan

    def report(self, learner_version: int, extra: dict | None = None) -> dict:
        now = time.time()
        dt = now - self._last_time
        if dt > 0 and self.env_steps > self._last_steps:
            self.steps_per_second = (self.env_steps - self._last_steps) / dt
        self._last_time, self._last_steps = now, self.env_steps
        record = {
            "time": now,
            "elapsed_s": now - self.start_time,
            "env_steps": self.env_steps,
            "env_steps_per_second": self.steps_per_second,
            "episodes": self.episodes,
            "episode_return_mean": self.mean_return if self.returns else None,
            "episode_length_mean": float(np.mean(self.lengths)) if self.lengths else None,
            "learner_version": learner_version,
            "policy_lag_mean": float(np.mean(self.lags)) if self.lags else 0.0,
        }
        if extra:
            record.update(extra)
        return record


def progress_line(record: dict) -> str:
    ret = record.get("episode_return_mean")
    ret_s = f"{ret:8.2f}" if ret is not None else "     n/a"
    actors = record.get("actors_alive")
    actors_s = f"  actors {actors}/{record.get('actors_desired')}" if actors is not None else ""
    if record.get("test_return_mean") is not None:
        actors_s += f"  held-out return {record['test_return_mean']:.2f}"
    return (
        f"steps {record['env_steps']:>10,d}  {record['env_steps_per_second']:>8,.0f}/s  return {ret_s}  "
        f"lag {record['policy_lag_mean']:5.2f}  version {record['learner_version']:>6d}{actors_s}"
    )
