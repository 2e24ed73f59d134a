"""Evaluation fanned out over Ray tasks: `levelray evaluate --backend ray` and the periodic held-out
evaluation of a Ray job. Each task plays its share of the episodes with `deploy.evaluation.episodes.play_episodes` (one
CPU, one torch thread) and the shares are merged in episode order, so the result is the one `evaluate_policy`
would give for the same seeds. A periodic evaluation's video (`--video-interval`) is one more task, which
returns the MP4's bytes for the driver to write into the run directory (on the driver's machine, which a task
on another node cannot reach)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import ray

from levelray.contracts.config import RunConfig
from levelray.deploy.cluster.ray_cluster import init_ray
from levelray.deploy.evaluation.episodes import merge_episodes, play_episodes, summarize
from levelray.policy.threads import use_threads


@ray.remote(num_cpus=1)
def _eval_episodes(cfg: RunConfig, weights, seeds, episodes, greedy, num_envs, seed, encodings=None
                   ) -> dict[str, list]:
    use_threads()  # Ray's reservation: the task's num_cpus
    return play_episodes(cfg, weights, seeds, episodes, greedy=greedy, num_envs=num_envs, seed=seed,
                         encodings=encodings)


@ray.remote(num_cpus=1)
def _record_video(cfg: RunConfig, weights, level_seed, greedy, seed) -> tuple[dict[str, Any], bytes]:
    from levelray.deploy.evaluation.video import record_to_bytes

    use_threads()
    return record_to_bytes(cfg, weights, level_seed, greedy=greedy, seed=seed)


def split_episodes(episodes: int, parts: int) -> list[tuple[int, int]]:
    """(first episode, count) of each part: episodes split as evenly as possible."""
    parts = max(1, min(parts, episodes))
    base, extra = divmod(episodes, parts)
    out, start = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        out.append((start, n))
        start += n
    return out


def eval_workers(cfg: RunConfig) -> int:
    """Ray tasks (one CPU each) a periodic evaluation of `cfg` runs at once; 0 when it is off. A local Ray
    sized for the actors and the learner only has no CPU left for them: add these when sizing it. With
    `eval.video_interval`, one more for the video's task."""
    if cfg.eval.interval_updates <= 0:
        return 0
    video = 1 if cfg.eval.video_interval > 0 else 0
    return max(1, math.ceil(cfg.eval.episodes / max(1, cfg.eval.num_envs))) + video


def start_on_ray(cfg: RunConfig, weights_or_ref, seeds: np.ndarray, episodes: int, *, greedy: bool,
                 num_envs: int, seed: int, num_workers: int | None, num_cpus: float = 1.0,
                 encodings: dict[int, bytes] | None = None) -> list[ray.ObjectRef]:
    """Start the tasks of one evaluation (non-blocking); `finished(refs)` collects them. `encodings`: as
    `play_episodes` takes them."""
    seeds = np.asarray(seeds, dtype=np.int64)
    if seeds.size == 0:
        raise ValueError("no seeds to evaluate on")
    ref = weights_or_ref if isinstance(weights_or_ref, ray.ObjectRef) else ray.put(weights_or_ref)
    workers = num_workers or math.ceil(episodes / max(1, num_envs))
    fn = _eval_episodes.options(num_cpus=num_cpus)
    refs = []
    for i, (first, n) in enumerate(split_episodes(episodes, workers)):
        part = seeds[(first + np.arange(n)) % seeds.size]  # this worker's episodes keep their seeds
        refs.append(fn.remote(cfg, ref, part, n, greedy, num_envs, seed * 1009 + i, encodings))
    return refs


def start_video(cfg: RunConfig, weights_or_ref, level_seed: int, *, greedy: bool, seed: int,
                num_cpus: float = 1.0) -> ray.ObjectRef:
    """Start the task that records one episode of `level_seed` (non-blocking); its value is
    `(deploy.evaluation.video.record_episode's result, the MP4's bytes)`."""
    return _record_video.options(num_cpus=num_cpus).remote(cfg, weights_or_ref, int(level_seed), greedy, seed)


def ready(ref: ray.ObjectRef) -> bool:
    """Whether the task of `ref` has finished (non-blocking)."""
    done, _ = ray.wait([ref], timeout=0)
    return bool(done)


def video_result(ref: ray.ObjectRef) -> tuple[dict[str, Any], bytes]:
    """The finished video task's `(record_episode's result, MP4 bytes)`; the task's error is raised."""
    return ray.get(ref)


def finished(refs: list[ray.ObjectRef]) -> dict[str, list] | None:
    """The merged per-episode results once every task has finished, else None (non-blocking); a task's
    error is raised."""
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
    if len(ready) < len(refs):
        return None
    return merge_episodes(ray.get(refs))


def cancel(refs: list[ray.ObjectRef]) -> None:
    for ref in refs:
        ray.cancel(ref, force=True)


def evaluate_on_ray(
    cfg: RunConfig, weights_or_ref, seeds: np.ndarray, episodes: int, *, greedy: bool, num_envs: int, seed: int,
    num_workers: int | None = None, num_cpus: float = 1.0, encodings: dict[int, bytes] | None = None,
) -> dict[str, Any]:
    """`evaluate_policy` split over Ray tasks (`num_cpus` each; default ceil(episodes / num_envs) of them).
    `weights_or_ref`: NumPy weights or an ObjectRef to them (put once, shared by every task)."""
    refs = start_on_ray(cfg, weights_or_ref, seeds, episodes, greedy=greedy, num_envs=num_envs, seed=seed,
                        num_workers=num_workers, num_cpus=num_cpus, encodings=encodings)
    return summarize(merge_episodes(ray.get(refs)))


def evaluate_sets_on_ray(
    cfg: RunConfig | dict[str, RunConfig], weights: dict[str, np.ndarray], seeds_by_set: dict[str, np.ndarray],
    episodes: int, *, greedy: bool, num_envs: int, seed: int, address: str | None, num_workers: int | None,
    encodings: dict[int, bytes] | None = None,
) -> dict[str, dict[str, Any]]:
    """`evaluate_on_ray` of each level set, on the cluster at `address` (or a local Ray started for it and
    shut down after); the weights are put into the object store once. `cfg`: the run's config, or one per
    level set (a maze run's `maze-<N>` sets generate their levels with N walls); `encodings`: as
    `play_episodes` takes them."""
    cfg_by_set = cfg if isinstance(cfg, dict) else dict.fromkeys(seeds_by_set, cfg)
    started_ray = init_ray(address, 1)
    try:
        ref = ray.put(weights)
        return {which: evaluate_on_ray(cfg_by_set[which], ref, seeds, episodes, greedy=greedy, num_envs=num_envs,
                                       seed=seed, num_workers=num_workers, encodings=encodings)
                for which, seeds in seeds_by_set.items()}
    finally:
        if started_ray:
            ray.shutdown()
