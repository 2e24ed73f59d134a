"""Held-out evaluation during training: the same evaluation as `levelray evaluate --levels test`, every
`cfg.eval.interval_updates` learner versions (on Ray as remote tasks, inline synchronously)."""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from levelray.contracts.atari_scores import human_normalized_score
from levelray.contracts.config import RunConfig
from levelray.deploy.episodes import atari_game, play_episodes, summarize
from levelray.deploy.errors import error_summary
from levelray.deploy.level_sets import level_set_seeds

log = logging.getLogger(__name__)


class PeriodicEvaluator:
    """Held-out evaluation every `cfg.eval.interval_updates` learner versions (off when 0).

    `maybe_start(version, weights_or_ref, env_steps=None)` starts one when `version` crossed a multiple of
    the interval and none is running (on Ray: remote tasks, non-blocking; inline: runs synchronously).
    `poll()` returns `{test_return_mean, test_return_median, test_success_rate, test_episodes, test_version}`
    (+ `test_env_steps` when given, + `test_human_normalized_score` for Atari)
    once, when a started evaluation has finished, else None. Every
    evaluation plays the same held-out seeds, so successive points compare the policy, not the levels.
    """

    def __init__(self, cfg: RunConfig, use_ray: bool, *, num_cpus: float = 1.0):
        self.cfg = cfg
        self.use_ray = use_ray
        self.num_cpus = num_cpus  # per Ray task; eval_workers(cfg) tasks run at once
        self.interval = int(cfg.eval.interval_updates)
        self.episodes = int(cfg.eval.episodes)
        self.seeds = level_set_seeds(cfg, "test", self.episodes, cfg.seed) if self.interval > 0 else None
        self._last_started = 0
        self._pending: tuple[int, int | None, list] | None = None  # (version, env steps, Ray refs)
        self._finished: deque[dict] = deque()
        self.failures = 0
        self.game = atari_game(cfg.env.id) if self.interval > 0 else None
        self._ray = None
        if use_ray and self.enabled:
            from levelray.deploy import eval_ray  # Ray is imported only by a job that runs on it

            self._ray = eval_ray

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    @property
    def running(self) -> bool:
        return self._pending is not None

    def due(self, version: int) -> bool:
        return (self.enabled and self._pending is None
                and version // self.interval > self._last_started // self.interval)

    def maybe_start(self, version: int, weights_or_ref: Any, *, env_steps: int | None = None) -> None:
        """`weights_or_ref`: NumPy weights of `version` (inline), or on Ray an ObjectRef to them. `env_steps`
        (optional): the env step count of that version, returned as `test_env_steps` (the x of the point)."""
        if not self.due(version):
            return
        self._last_started = int(version)
        e = self.cfg.eval
        seed = self.cfg.seed + int(version)
        try:
            if self._ray is not None:
                refs = self._ray.start_on_ray(self.cfg, weights_or_ref, self.seeds, self.episodes, greedy=e.greedy,
                                              num_envs=e.num_envs, seed=seed, num_workers=None,
                                              num_cpus=self.num_cpus)
                self._pending = (int(version), env_steps, refs)
            else:
                raw = play_episodes(self.cfg, weights_or_ref, self.seeds, self.episodes, greedy=e.greedy,
                                    num_envs=e.num_envs, seed=seed)
                self._finished.append(self._result(int(version), env_steps, raw))
        except Exception as exc:  # noqa: BLE001 - whatever broke, training goes on (see _failed)
            self._failed(int(version), exc)

    def _failed(self, version: int, exc: BaseException) -> None:
        """A held-out evaluation that failed (a crashed task, a broken env) is reported, not raised: it
        measures training, it must not end it. The next one starts at the next interval as usual."""
        self.failures += 1
        message = error_summary(exc)
        log.warning("held-out evaluation at version %d failed (%s); training goes on", version, message)
        self._finished.append({"test_error": message, "test_version": version, "eval_failures": self.failures})

    def _result(self, version: int, env_steps: int | None, raw: dict) -> dict:
        s = summarize(raw)
        out = {
            "test_return_mean": s["return_mean"],
            "test_return_median": s["return_median"],
            "test_success_rate": s["success_rate"],
            "test_episodes": s["episodes"],
            "test_version": version,
        }
        if self.game is not None:
            out["test_human_normalized_score"] = human_normalized_score(self.game, s["return_mean"])
        if env_steps is not None:
            out["test_env_steps"] = int(env_steps)
        return out

    def _collect(self) -> None:
        if self._pending is None:
            return
        version, env_steps, refs = self._pending
        try:
            raw = self._ray.finished(refs)
            if raw is None:
                return
            self._pending = None
            self._finished.append(self._result(version, env_steps, raw))
        except Exception as exc:  # noqa: BLE001 - a task crashed or was cancelled
            self._pending = None
            self._failed(version, exc)

    @property
    def has_result(self) -> bool:
        """A finished evaluation waits to be returned by `poll()` (non-blocking)."""
        self._collect()
        return bool(self._finished)

    def poll(self) -> dict | None:
        """The oldest finished, not yet returned evaluation, or None (non-blocking)."""
        self._collect()
        return self._finished.popleft() if self._finished else None

    def cancel(self) -> None:
        """Drop a running evaluation (at shutdown)."""
        if self._pending is not None:
            self._ray.cancel(self._pending[2])
            self._pending = None
