"""Held-out evaluation during training: the same evaluation as `levelray evaluate --levels test`, every
`cfg.eval.interval_updates` learner versions (on Ray as remote tasks, inline synchronously), and with
`cfg.eval.video_interval` N a video of one held-out episode with every Nth of them, in `RUN_DIR/videos/`
(`deploy.evaluation.video`)."""

from __future__ import annotations

import logging
from collections import deque
from pathlib import Path
from typing import Any

from levelray.contracts.atari_scores import human_normalized_score
from levelray.contracts.config import RunConfig
from levelray.deploy.errors import error_summary
from levelray.deploy.evaluation.episodes import atari_game, play_episodes, summarize
from levelray.deploy.evaluation.level_sets import level_set_seeds
from levelray.deploy.evaluation.video import VIDEOS_DIR, check_renders, record_to_bytes, save_video, video_name

log = logging.getLogger(__name__)


class PeriodicEvaluator:
    """Held-out evaluation every `cfg.eval.interval_updates` learner versions (off when 0).

    `maybe_start(version, weights_or_ref, env_steps=None, trained_steps=None)` starts one when `version` crossed a
    multiple of the interval and none is running (on Ray: remote tasks, non-blocking; inline: runs synchronously).
    `poll()` returns `{test_return_mean, test_return_median, test_success_rate, test_episodes, test_version}`
    (+ `test_env_steps` and `test_samples_trained` when given, + `test_human_normalized_score` for Atari)
    once, when a started evaluation has finished, else None. Every
    evaluation plays the same held-out seeds, so successive points compare the policy, not the levels.

    Videos (`cfg.eval.video_interval` N > 0): the k-th evaluation (version // interval) records one more episode,
    on the first held-out seed (the same level each time), when k crossed a multiple of N; its result then has
    `test_video` (the path in the run directory, `videos/v...mp4`) or, where recording failed, `test_video_error`
    (logged; the evaluation's numbers and training go on). Off, with a warning, where the env cannot draw frames
    or `cfg.run_dir` is not set.
    """

    def __init__(self, cfg: RunConfig, use_ray: bool, *, num_cpus: float = 1.0):
        self.cfg = cfg
        self.use_ray = use_ray
        self.num_cpus = num_cpus  # per Ray task; eval_workers(cfg) tasks run at once
        self.interval = int(cfg.eval.interval_updates)
        self.episodes = int(cfg.eval.episodes)
        self.seeds = level_set_seeds(cfg, "test", self.episodes, cfg.seed) if self.interval > 0 else None
        self._last_started = 0
        # (version, env steps, the evaluation's Ray refs, the video's Ray ref or None)
        self._pending: tuple[int, int | None, list, Any] | None = None
        self._finished: deque[dict] = deque()
        self.failures = 0
        self.game = atari_game(cfg.env.id) if self.interval > 0 else None
        self.video_interval = int(cfg.eval.video_interval) if self.enabled else 0
        self.videos_dir = Path(cfg.run_dir) / VIDEOS_DIR if cfg.run_dir else None
        self._last_video = 0  # the evaluation (version // interval) of the last video
        if self.video_interval > 0:
            self._check_video()
        self._ray = None
        if use_ray and self.enabled:
            from levelray.deploy.evaluation import remote  # Ray is imported only by a job that runs on it

            self._ray = remote

    def _check_video(self) -> None:
        problem = "cfg.run_dir is not set" if self.videos_dir is None else None
        if problem is None:
            try:
                check_renders(self.cfg.env, "--video-interval")
            except Exception as exc:  # noqa: BLE001 - videos are an extra: the run goes on without them
                problem = error_summary(exc)
        if problem is not None:
            log.warning("no evaluation videos: %s; training goes on without them", problem)
            self.video_interval = 0

    def _video_due(self, version: int) -> bool:
        n = self.video_interval
        return n > 0 and (version // self.interval) // n > self._last_video // n

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    @property
    def running(self) -> bool:
        return self._pending is not None

    def due(self, version: int) -> bool:
        return (self.enabled and self._pending is None
                and version // self.interval > self._last_started // self.interval)

    def maybe_start(self, version: int, weights_or_ref: Any, *, env_steps: int | None = None,
                    trained_steps: int | None = None) -> None:
        """`weights_or_ref`: NumPy weights of `version` (inline), or on Ray an ObjectRef to them. `env_steps` and
        `trained_steps` (optional): the env steps and the steps trained on at that version, returned as
        `test_env_steps` and `test_samples_trained` (the x of the point against either budget)."""
        steps = (env_steps, trained_steps)
        if not self.due(version):
            return
        self._last_started = int(version)
        e = self.cfg.eval
        seed = self.cfg.seed + int(version)
        video = self._video_due(int(version))
        if video:
            self._last_video = int(version) // self.interval
        try:
            if self._ray is not None:
                refs = self._ray.start_on_ray(self.cfg, weights_or_ref, self.seeds, self.episodes, greedy=e.greedy,
                                              num_envs=e.num_envs, seed=seed, num_workers=None,
                                              num_cpus=self.num_cpus)
                video_ref = (self._ray.start_video(self.cfg, weights_or_ref, int(self.seeds[0]), greedy=e.greedy,
                                                   seed=seed, num_cpus=self.num_cpus) if video else None)
                self._pending = (int(version), steps, refs, video_ref)
            else:
                raw = play_episodes(self.cfg, weights_or_ref, self.seeds, self.episodes, greedy=e.greedy,
                                    num_envs=e.num_envs, seed=seed)
                result = self._result(int(version), steps, raw)
                if video:
                    result.update(self._video(int(version), lambda: record_to_bytes(
                        self.cfg, weights_or_ref, int(self.seeds[0]), greedy=e.greedy, seed=seed)))
                self._finished.append(result)
        except Exception as exc:  # noqa: BLE001 - whatever broke, training goes on (see _failed)
            self._failed(int(version), exc)

    def _video(self, version: int, recorded) -> dict:
        """`{test_video: path in the run dir}` once `recorded()` (-> (info, MP4 bytes)) is written into
        RUN_DIR/videos/, or `{test_video_error}` where it failed (logged; training goes on)."""
        try:
            info, data = recorded()
            path = save_video(self.videos_dir, video_name("test", info["seed"], info["return"], version), data)
        except Exception as exc:  # noqa: BLE001 - a video is an extra: training goes on without it
            message = error_summary(exc)
            log.warning("evaluation video at version %d failed (%s); training goes on", version, message)
            return {"test_video_error": message}
        return {"test_video": str(path.relative_to(self.videos_dir.parent))}

    def _failed(self, version: int, exc: BaseException) -> None:
        """A held-out evaluation that failed (a crashed task, a broken env) is reported, not raised: it
        measures training, it must not end it. The next one starts at the next interval as usual."""
        self.failures += 1
        message = error_summary(exc)
        log.warning("held-out evaluation at version %d failed (%s); training goes on", version, message)
        self._finished.append({"test_error": message, "test_version": version, "eval_failures": self.failures})

    def _result(self, version: int, steps: tuple[int | None, int | None], raw: dict) -> dict:
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
        for key, value in zip(("test_env_steps", "test_samples_trained"), steps, strict=True):
            if value is not None:
                out[key] = int(value)
        return out

    def _collect(self) -> None:
        if self._pending is None:
            return
        version, steps, refs, video_ref = self._pending
        try:
            if video_ref is not None and not self._ray.ready(video_ref):
                return
            raw = self._ray.finished(refs)
            if raw is None:
                return
            self._pending = None
            result = self._result(version, steps, raw)
        except Exception as exc:  # noqa: BLE001 - a task crashed or was cancelled
            self._pending = None
            if video_ref is not None:
                self._ray.cancel([video_ref])
            self._failed(version, exc)
            return
        if video_ref is not None:
            result.update(self._video(version, lambda: self._ray.video_result(video_ref)))
        self._finished.append(result)

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
            refs, video_ref = self._pending[2], self._pending[3]
            self._ray.cancel(refs + ([video_ref] if video_ref is not None else []))
            self._pending = None
