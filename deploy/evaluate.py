"""`levelray evaluate`: a policy's returns on training levels and on held-out levels.

Level sets (`--levels`, comma-separated):

- `train`: the config's training levels `[start_level, start_level + num_levels)`, in a random order
  drawn from `--seed` (cycled when there are more episodes than levels).
- `test`: held-out levels, the "full distribution" of the PLR paper: distinct random seeds from
  `[0, 2**31 - 1)` outside the training range (procgen levels; gymnasium and MiniGrid `reset(seed=...)`
  seeds).
  With an unbounded training set (`num_levels == 0`) nothing is held out; the result says so
  (`held_out: false`).
- `A-B`: the explicit seeds A to B, both included, in order.

Each episode plays the next seed of its set. Exactly `episodes` episodes are started and every one
of them is played to its end (an env that has no episode left to start idles), so short episodes are
not over-represented. Every returned seed is the level the env reported playing.

Atari (`atari:<game>`, `ALE/<Game>-v5`): returns are the game's score (unclipped), and every result has
`human_normalized_score`, `(return_mean - random) / (human - random)` with the reference scores of
`contracts.atari_scores` (None for games outside Atari-57 and for every other env). Levels do not change an
Atari game (the seed drives sticky actions and no-op starts), so the `atari` preset trains on an unbounded
set and `test` is not held out.

Success rate: procgen's `prev_level_complete` (every procgen game sets it on its win condition: the
quota of fish in BigFish, the coin in CoinRun, ...); gymnasium: `info["is_success"]` at the episode's
last step where the env defines it, else None; MiniGrid: the agent reached the goal (terminated with a
positive reward, which `actors.minigrid_env` reports as `is_success`).

`PeriodicEvaluator` runs the same evaluation on held-out levels during training, every
`cfg.eval.interval_updates` learner versions (on Ray as remote tasks, inline synchronously).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from levelray.contracts.atari_scores import human_normalized_score
from levelray.contracts.config import ConfigError, RunConfig, from_dict, is_atari, to_dict
from levelray.contracts.levels import MAX_SEED, training_range

log = logging.getLogger(__name__)

LEVEL_SET_RE = re.compile(r"^(\d+)-(\d+)$")


# ------------------------------------------------------------------------------------ level sets
def parse_level_sets(text: str) -> list[str]:
    """`"train,test"` -> `["train", "test"]`; each item is train, test or A-B (A <= B)."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise ConfigError("--levels: expected train, test or A-B (comma-separated), got nothing")
    for item in items:
        if item in ("train", "test"):
            continue
        m = LEVEL_SET_RE.match(item)
        if m is None:
            raise ConfigError(f"--levels: expected train, test or A-B (e.g. 1000-1999), got {item!r}")
        if int(m.group(1)) > int(m.group(2)):
            raise ConfigError(f"--levels: range {item!r} is empty (A must be <= B)")
        if int(m.group(2)) >= MAX_SEED:
            raise ConfigError(f"--levels: seeds must be < {MAX_SEED}, got {item!r}")
    if len(set(items)) != len(items):
        raise ConfigError(f"--levels: {text!r} names a level set twice")
    return items


def _distinct_random(rng: np.random.Generator, n: int, low: int, high: int) -> np.ndarray:
    """`n` distinct integers from `[low, high)` in random order (collisions are re-drawn)."""
    n = min(n, high - low)
    out: list[int] = []
    seen: set[int] = set()
    while len(out) < n:
        for x in rng.integers(low, high, size=n - len(out)).tolist():
            if x not in seen:
                seen.add(x)
                out.append(x)
    return np.asarray(out, dtype=np.int64)


def level_set_seeds(cfg: RunConfig, which: str, episodes: int, seed: int = 0) -> np.ndarray:
    """The seeds an evaluation of `episodes` episodes on level set `which` plays (see the module doc)."""
    rng = np.random.default_rng([seed, 0x1E7E1])
    rng_test = np.random.default_rng([seed, 0x7E57])
    train = training_range(cfg.env)
    if which == "train":
        if train is None:
            return _distinct_random(rng, episodes, cfg.env.start_level, MAX_SEED)
        return rng.permutation(np.arange(*train, dtype=np.int64))
    if which == "test":
        if train is None:
            return _distinct_random(rng_test, episodes, 0, MAX_SEED)
        lo, hi = train
        # draw from [0, MAX_SEED - n_train) and shift the draws at or above `lo` past the training range
        draws = _distinct_random(rng_test, episodes, 0, MAX_SEED - (hi - lo))
        return np.where(draws >= lo, draws + (hi - lo), draws)
    m = LEVEL_SET_RE.match(which)
    if m is None:
        raise ConfigError(f"--levels: expected train, test or A-B, got {which!r}")
    return np.arange(int(m.group(1)), int(m.group(2)) + 1, dtype=np.int64)


def atari_game(env_id: str) -> str | None:
    """ALE's name of the game an Atari env id plays (`atari:breakout` -> `breakout`); None for other envs."""
    if not is_atari(env_id):
        return None
    from levelray.actors.atari_env import game_name

    return game_name(env_id)


def add_human_normalized(result: dict[str, Any], game: str | None) -> dict[str, Any]:
    """`result["human_normalized_score"]`: of its `return_mean`, None without reference scores."""
    result["human_normalized_score"] = (human_normalized_score(game, result["return_mean"])
                                        if game is not None else None)
    return result


# ------------------------------------------------------------------------------------- the core
def play_episodes(
    cfg: RunConfig, weights: dict[str, np.ndarray], seeds: np.ndarray, episodes: int, *, greedy: bool,
    num_envs: int, seed: int,
) -> dict[str, list]:
    """Per-episode results, in the order of `seeds`: returns, lengths, seeds played, successes."""
    from levelray.actors.envs import make_env_vector
    from levelray.actors.rollout import RolloutWorker

    seeds = np.asarray(seeds, dtype=np.int64).reshape(-1)
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    if seeds.size == 0:
        raise ValueError("no seeds to evaluate on")
    K = max(1, min(int(num_envs), episodes))
    env_episode = np.full(K, -1, dtype=np.int64)  # the episode index each env is playing (-1: idle)
    started = 0

    def level_source(k: int) -> int:
        nonlocal started
        if started < episodes:
            env_episode[k] = started
            started += 1
            return int(seeds[(started - 1) % seeds.size])
        env_episode[k] = -1  # nothing left to start: an idle episode whose result is ignored
        return int(seeds[0])

    vec = make_env_vector(cfg.env, K, level_source, seed=int(seed))
    try:
        # The actors' own policy code (NumPy or torch inference, the same sampling).
        worker = RolloutWorker(vec, 1, model_kind=cfg.learner.model, hidden_sizes=tuple(cfg.learner.hidden_sizes),
                               seed=int(seed))
        worker.set_weights(0, weights)
        returns = np.zeros(episodes)
        lengths = np.zeros(episodes, dtype=np.int64)
        played = np.zeros(episodes, dtype=np.int64)
        success: list[bool | None] = [None] * episodes
        ep_return = np.zeros(K)
        ep_length = np.zeros(K, dtype=np.int64)
        finished = 0
        obs = worker.observation
        while finished < episodes:
            playing = env_episode.copy()  # the env vector re-assigns envs whose episode ends in this step
            step = vec.step(worker.act(obs, greedy=greedy)[0])
            ep_return += step.episode_rewards  # unclipped (Atari trains on clipped rewards)
            ep_length += 1
            for k in np.flatnonzero(step.terminated | step.truncated).tolist():
                e = int(playing[k])
                if e >= 0:
                    returns[e], lengths[e], played[e] = ep_return[k], ep_length[k], step.level_seeds[k]
                    success[e] = step.success.get(k)
                    finished += 1
                ep_return[k], ep_length[k] = 0.0, 0
            obs = step.obs
    finally:
        vec.close()
    return {
        "returns": returns.tolist(),
        "lengths": lengths.tolist(),
        "seeds": played.tolist(),
        "successes": success,
    }


def summarize(raw: dict[str, list]) -> dict[str, Any]:
    """Aggregate per-episode results (from `play_episodes`, possibly merged) into the result dict."""
    returns = np.asarray(raw["returns"], dtype=np.float64)
    known = [s for s in raw["successes"] if s is not None]
    return {
        "episodes": int(returns.size),
        "return_mean": float(returns.mean()),
        "return_median": float(np.median(returns)),
        "return_std": float(returns.std()),
        "return_min": float(returns.min()),
        "return_max": float(returns.max()),
        "length_mean": float(np.mean(raw["lengths"])),
        "success_rate": float(np.mean(known)) if known and len(known) == len(raw["successes"]) else None,
        "seeds": [int(s) for s in raw["seeds"]],
        "returns": [float(r) for r in returns],
    }


def evaluate_policy(
    cfg: RunConfig, weights: dict[str, np.ndarray], seeds: np.ndarray, episodes: int, *, greedy: bool,
    num_envs: int, seed: int,
) -> dict[str, Any]:
    """Play `episodes` episodes, each on the next seed of `seeds` (cycled), with `num_envs` envs in this
    process; returns {episodes, return_mean, return_median, return_std, return_min, return_max,
    length_mean, success_rate (None where the env defines no success), seeds (played), returns}."""
    raw = play_episodes(cfg, weights, seeds, episodes, greedy=greedy, num_envs=num_envs, seed=seed)
    return summarize(raw)


# ------------------------------------------------------------------------------------------ Ray
def _split(episodes: int, parts: int) -> list[tuple[int, int]]:
    """(first episode, count) of each part: episodes split as evenly as possible."""
    parts = max(1, min(parts, episodes))
    base, extra = divmod(episodes, parts)
    out, start = [], 0
    for i in range(parts):
        n = base + (1 if i < extra else 0)
        out.append((start, n))
        start += n
    return out


_remote_play = None


def _remote_play_fn():
    global _remote_play
    if _remote_play is None:
        import ray

        @ray.remote(num_cpus=1)
        def eval_episodes(cfg_dict, weights, seeds, episodes, greedy, num_envs, seed):
            import torch

            torch.set_num_threads(1)
            return play_episodes(from_dict(cfg_dict), weights, seeds, episodes, greedy=greedy,
                                 num_envs=num_envs, seed=seed)

        _remote_play = eval_episodes
    return _remote_play


def eval_workers(cfg: RunConfig) -> int:
    """Ray tasks (one CPU each) a periodic evaluation of `cfg` runs at once; 0 when it is off. A local Ray
    sized for the actors and the learner only has no CPU left for them: add these when sizing it."""
    if cfg.eval.interval_updates <= 0:
        return 0
    return max(1, math.ceil(cfg.eval.episodes / max(1, cfg.eval.num_envs)))


def _start_on_ray(cfg: RunConfig, weights_or_ref, seeds: np.ndarray, episodes: int, *, greedy: bool,
                  num_envs: int, seed: int, num_workers: int | None, num_cpus: float = 1.0) -> list:
    import ray

    seeds = np.asarray(seeds, dtype=np.int64)
    if seeds.size == 0:
        raise ValueError("no seeds to evaluate on")
    ref = weights_or_ref if isinstance(weights_or_ref, ray.ObjectRef) else ray.put(weights_or_ref)
    workers = num_workers or math.ceil(episodes / max(1, num_envs))
    fn = _remote_play_fn().options(num_cpus=num_cpus)
    cfg_dict = to_dict(cfg)
    refs = []
    for i, (first, n) in enumerate(_split(episodes, workers)):
        part = seeds[(first + np.arange(n)) % seeds.size]  # this worker's episodes keep their seeds
        refs.append(fn.remote(cfg_dict, ref, part, n, greedy, num_envs, seed * 1009 + i))
    return refs


def _merge(parts: list[dict[str, list]]) -> dict[str, list]:
    return {key: [x for p in parts for x in p[key]] for key in ("returns", "lengths", "seeds", "successes")}


def evaluate_on_ray(
    cfg: RunConfig, weights_or_ref, seeds: np.ndarray, episodes: int, *, greedy: bool, num_envs: int, seed: int,
    num_workers: int | None = None, num_cpus: float = 1.0,
) -> dict[str, Any]:
    """`evaluate_policy` split over Ray tasks (`num_cpus` each; default ceil(episodes / num_envs) of them).
    `weights_or_ref`: NumPy weights or an ObjectRef to them (put once, shared by every task)."""
    import ray

    refs = _start_on_ray(cfg, weights_or_ref, seeds, episodes, greedy=greedy, num_envs=num_envs, seed=seed,
                         num_workers=num_workers, num_cpus=num_cpus)
    return summarize(_merge(ray.get(refs)))


# --------------------------------------------------------------------------- periodic evaluation
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
        self._pending: tuple[int, int | None, list] | None = None
        self._finished: deque[dict] = deque()
        self.last_result: dict | None = None
        self.failures = 0
        self.game = atari_game(cfg.env.id) if self.interval > 0 else None

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    @property
    def running(self) -> bool:
        return self._pending is not None

    def due(self, version: int) -> bool:
        return (self.enabled and self._pending is None
                and version // self.interval > self._last_started // self.interval)

    def maybe_start(self, version: int, weights_or_ref, *, env_steps: int | None = None) -> None:
        """`weights_or_ref`: NumPy weights of `version` (inline), or on Ray an ObjectRef to them. `env_steps`
        (optional): the env step count of that version, returned as `test_env_steps` (the x of the point)."""
        if not self.due(version):
            return
        self._last_started = int(version)
        e = self.cfg.eval
        try:
            if self.use_ray:
                refs = _start_on_ray(self.cfg, weights_or_ref, self.seeds, self.episodes, greedy=e.greedy,
                                     num_envs=e.num_envs, seed=self.cfg.seed + int(version), num_workers=None,
                                     num_cpus=self.num_cpus)
                self._pending = (int(version), env_steps, refs)
            else:
                raw = play_episodes(self.cfg, weights_or_ref, self.seeds, self.episodes, greedy=e.greedy,
                                    num_envs=e.num_envs, seed=self.cfg.seed + int(version))
                self._finished.append(self._result(int(version), env_steps, raw))
        except Exception as exc:  # noqa: BLE001 - whatever broke, training goes on (see _failed)
            self._failed(int(version), exc)

    def _failed(self, version: int, exc: BaseException) -> None:
        """A held-out evaluation that failed (a crashed task, a broken env) is reported, not raised: it
        measures training, it must not end it. The next one starts at the next interval as usual."""
        from levelray.deploy.supervisor import error_summary

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
        self.last_result = out
        return out

    def _collect(self) -> None:
        if self._pending is not None:
            import ray

            version, env_steps, refs = self._pending
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            if len(ready) == len(refs):
                self._pending = None
                try:
                    self._finished.append(self._result(version, env_steps, _merge(ray.get(refs))))
                except Exception as exc:  # noqa: BLE001 - a task crashed or was cancelled
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
            import ray

            for ref in self._pending[2]:
                ray.cancel(ref, force=True)
            self._pending = None


# ------------------------------------------------------------------------------------------- CLI
def resolve_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Load CHECKPOINT: a checkpoint directory (`RUN_DIR/checkpoints/ckpt-...`) or a run directory (its
    latest valid checkpoint). Adds `cfg` (RunConfig: the checkpoint's config, else RUN_DIR/config.yaml).
    Raises ConfigError with a clear message for anything else."""
    import yaml

    from levelray.deploy.rundir import RunDir, load_checkpoint

    p = Path(path)
    if not p.exists():
        raise ConfigError(f"CHECKPOINT: {p} does not exist (give a run directory or RUN_DIR/checkpoints/ckpt-...)")
    if not p.is_dir():
        raise ConfigError(f"CHECKPOINT: {p} is not a directory (give a run directory or a checkpoint directory)")
    if (p / "meta.json").exists() or (p / "learner.pt").exists():
        try:
            ckpt = load_checkpoint(p)
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            raise ConfigError(f"CHECKPOINT: {p} is not a usable checkpoint: {exc}") from None
        run_path = p.parent.parent
    elif (p / "checkpoints").is_dir() or (p / "config.yaml").exists():
        try:
            ckpt = RunDir(p).load_latest_checkpoint()
        except ValueError as exc:
            raise ConfigError(f"CHECKPOINT: {exc}") from None
        if ckpt is None:
            raise ConfigError(f"CHECKPOINT: run directory {p} has no checkpoint in {p / 'checkpoints'}")
        run_path = p
    else:
        raise ConfigError(
            f"CHECKPOINT: {p} is neither a checkpoint directory (with meta.json) nor a run directory "
            "(with config.yaml and checkpoints/)"
        )
    cfg_data = ckpt.get("config")
    if cfg_data is None and (run_path / "config.yaml").exists():
        cfg_data = yaml.safe_load((run_path / "config.yaml").read_text())
    if cfg_data is None:
        raise ConfigError(f"CHECKPOINT: {ckpt['path']} has no config and no config.yaml beside it")
    ckpt["cfg"] = from_dict(cfg_data)
    return ckpt


def checkpoint_weights(ckpt: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy() for k, v in ckpt["learner"]["model"].items()}


def evaluate_checkpoint(
    checkpoint: str | os.PathLike, level_sets: list[str], *, episodes: int | None = None, greedy: bool = False,
    num_envs: int | None = None, seed: int = 0, backend: str = "inline", address: str | None = None,
    num_workers: int | None = None,
) -> dict[str, Any]:
    """Evaluate CHECKPOINT on each level set; the result of `levelray evaluate --json`."""
    ckpt = resolve_checkpoint(checkpoint)
    cfg: RunConfig = ckpt["cfg"]
    weights = checkpoint_weights(ckpt)
    episodes = episodes or cfg.eval.episodes
    num_envs = num_envs or cfg.eval.num_envs
    game = atari_game(cfg.env.id)
    started_ray = False
    if backend == "ray":
        from levelray.deploy.ray_cluster import init_ray

        started_ray = init_ray(address, 1)
    try:
        results: dict[str, Any] = {}
        ref = None
        for which in level_sets:
            seeds = level_set_seeds(cfg, which, episodes, seed)
            if backend == "ray":
                import ray

                ref = ref if ref is not None else ray.put(weights)
                res = evaluate_on_ray(cfg, ref, seeds, episodes, greedy=greedy, num_envs=num_envs, seed=seed,
                                      num_workers=num_workers)
            else:
                res = evaluate_policy(cfg, weights, seeds, episodes, greedy=greedy, num_envs=num_envs, seed=seed)
            results[which] = add_human_normalized(res, game)
    finally:
        if started_ray:
            import ray

            ray.shutdown()
    train = training_range(cfg.env)
    out = {
        "checkpoint": ckpt["path"],
        "version": int(ckpt["learner"]["version"]),
        "env_steps": int(ckpt.get("counters", {}).get("env_steps", 0)),
        "env": cfg.env.id,
        "atari_game": game,
        "distribution_mode": cfg.env.distribution_mode,
        "level_strategy": cfg.levels.strategy,
        "training_levels": list(train) if train is not None else None,
        "held_out": train is not None,
        "greedy": bool(greedy),
        "episodes": episodes,
        "backend": backend,
        "results": results,
        "generalization_gap": None,
    }
    if "train" in results and "test" in results and train is not None:
        out["generalization_gap"] = results["train"]["return_mean"] - results["test"]["return_mean"]
    return out


def format_result(out: dict[str, Any]) -> str:
    lines = [
        f"checkpoint {out['checkpoint']} (version {out['version']}, {out['env_steps']:,} env steps)",
        f"env {out['env']}" + (f" ({out['distribution_mode']})" if out["env"].startswith("procgen:") else "")
        + f", level strategy {out['level_strategy']}, training levels "
        + (f"[{out['training_levels'][0]}, {out['training_levels'][1]})" if out["training_levels"] else "unbounded")
        + f", {'greedy' if out['greedy'] else 'sampled'} actions",
    ]
    header = f"{'levels':>22}  {'episodes':>8}  {'mean':>9}  {'median':>9}  {'std':>8}  {'success':>7}"
    lines += [header, "-" * len(header)]
    for which, r in out["results"].items():
        name = {"train": "train", "test": "test (held out)" if out["held_out"] else "test (NOT held out)"}.get(
            which, which)
        succ = f"{r['success_rate']:.2f}" if r["success_rate"] is not None else "n/a"
        lines.append(f"{name:>22}  {r['episodes']:>8d}  {r['return_mean']:>9.3f}  {r['return_median']:>9.3f}  "
                     f"{r['return_std']:>8.3f}  {succ:>7}")
    for which, r in out["results"].items():
        if r.get("human_normalized_score") is not None:
            lines.append(f"human-normalised score ({out.get('atari_game')}, {which} mean): "
                         f"{r['human_normalized_score']:.3f}")
    if out["generalization_gap"] is not None:
        lines.append(f"generalisation gap (train mean - test mean): {out['generalization_gap']:.3f}")
    return "\n".join(lines)


def add_evaluate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="run directory (its latest checkpoint) or checkpoint dir")
    p.add_argument("--levels", default="train,test",
                   help="level sets, comma-separated: train, test (held out) or A-B (seeds A..B inclusive)")
    p.add_argument("--episodes", type=int, default=None, help="episodes per level set (default: eval.episodes)")
    p.add_argument("--greedy", action="store_true", help="argmax actions (Gaussian mean) instead of sampling")
    p.add_argument("--num-envs", type=int, default=None, help="envs per evaluation worker (default: eval.num_envs)")
    p.add_argument("--seed", type=int, default=0, help="seed of the level draw and of sampled actions")
    p.add_argument("--backend", choices=("inline", "ray"), default="inline",
                   help="inline: this process; ray: episodes split over Ray tasks")
    p.add_argument("--address", default=None, help="Ray cluster (auto or HOST:PORT); default: a local Ray")
    p.add_argument("--workers", type=int, default=None,
                   help="Ray tasks per level set (default: episodes / num-envs, rounded up)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def cmd_evaluate(args: argparse.Namespace) -> int:
    level_sets = parse_level_sets(args.levels)
    if args.episodes is not None and args.episodes < 1:
        raise ConfigError(f"--episodes: must be >= 1, got {args.episodes}")
    if args.num_envs is not None and args.num_envs < 1:
        raise ConfigError(f"--num-envs: must be >= 1, got {args.num_envs}")
    out = evaluate_checkpoint(
        args.checkpoint, level_sets, episodes=args.episodes, greedy=args.greedy, num_envs=args.num_envs,
        seed=args.seed, backend=args.backend, address=args.address, num_workers=args.workers,
    )
    print(json.dumps(out) if args.json else format_result(out), flush=True)
    return 0
