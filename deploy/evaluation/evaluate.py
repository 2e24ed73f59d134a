"""`levelray evaluate`: a policy's returns on training levels and on held-out levels.

The command's arguments, the checkpoint-wide result (`levelray evaluate --json`, `levelray.evaluate`) and
its table. The parts it is made of each live apart: which seeds a level set plays (`level_sets`), playing
episodes in this process (`episodes`), the same split over Ray tasks (`remote`), and the checkpoint it loads
(`deploy.rundir.resolve_checkpoint`). The training-time held-out evaluation is
`deploy.training.periodic_eval.PeriodicEvaluator`. `--video DIR` adds episode videos (`video`), played in this
process apart from the statistics' episodes, so the results are the same with or without them.

A maze run's level sets (`maze-suite`, `maze-<N>`, `maze-file:PATH`) are each played with their own env config
(`deploy.evaluation.level_sets.plan_level_sets`: `maze-25` generates its levels with 25 walls), the suite's mazes
add their mean (`maze_suite`), and the mazes of files are played from their encodings (`maze_files` names each
set's file). The suite's mazes and the mazes of files are played with DCD's time limit for test mazes (450 steps at
13x13, where training has 250); `--max-episode-steps N` sets every set's limit, and each result says which limit it
had (`results.<level set>.max_episode_steps`; None where the env's own, which its family does not report).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from levelray.contracts.config import ConfigError, RunConfig
from levelray.contracts.families import LevelSet, episode_limit
from levelray.contracts.levels import training_range
from levelray.deploy.evaluation.episodes import add_human_normalized, atari_game, evaluate_policy
from levelray.deploy.evaluation.level_sets import parse_level_sets, plan_level_sets
from levelray.deploy.rundir import checkpoint_weights, resolve_checkpoint


def _evaluate_sets(
    cfg_by_set: dict[str, RunConfig], weights: dict[str, np.ndarray], seeds_by_set: dict[str, np.ndarray], *,
    episodes: int, greedy: bool, num_envs: int, seed: int, backend: str, address: str | None,
    num_workers: int | None, encodings: dict[int, bytes],
) -> dict[str, dict[str, Any]]:
    """The `evaluate_policy` result of each level set, each played with its own config, in this process or
    over Ray tasks; `encodings`: of the levels that exist only as data (maze files)."""
    if backend == "ray":
        from levelray.deploy.evaluation.remote import evaluate_sets_on_ray

        return evaluate_sets_on_ray(cfg_by_set, weights, seeds_by_set, episodes, greedy=greedy, num_envs=num_envs,
                                    seed=seed, address=address, num_workers=num_workers, encodings=encodings)
    return {which: evaluate_policy(cfg_by_set[which], weights, seeds, episodes, greedy=greedy, num_envs=num_envs,
                                   seed=seed, encodings=encodings)
            for which, seeds in seeds_by_set.items()}


def maze_suite_summary(results: dict[str, dict[str, Any]], mazes: list[str]) -> dict[str, Any]:
    """The mean over the suite's mazes `mazes` (each weighted alike, whatever its episodes): `{success_rate,
    return_mean, mazes}`."""
    return {
        "success_rate": float(np.mean([results[name]["success_rate"] for name in mazes])),
        "return_mean": float(np.mean([results[name]["return_mean"] for name in mazes])),
        "mazes": list(mazes),
    }


def check_max_episode_steps(value: Any) -> int | None:
    """`--max-episode-steps` as an int >= 1, or None; ConfigError naming the flag for anything else."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"--max-episode-steps: must be an integer >= 1 (steps per episode), got {value!r}")
    return value


def _with_limit(plan: list[LevelSet], max_episode_steps: int | None) -> list[LevelSet]:
    """The level sets of `plan`, each played with `max_episode_steps` where given (else as planned)."""
    if max_episode_steps is None:
        return plan
    return [dataclasses.replace(s, env=dataclasses.replace(s.env, max_episode_steps=max_episode_steps))
            for s in plan]


def evaluate_checkpoint(
    checkpoint: str | os.PathLike, level_sets: str | list[str], *, episodes: int | None = None, greedy: bool = False,
    num_envs: int | None = None, seed: int = 0, backend: str = "inline", address: str | None = None,
    num_workers: int | None = None, video_dir: str | os.PathLike | None = None, video_episodes: int = 1,
    max_episode_steps: int | None = None,
) -> dict[str, Any]:
    """Evaluate CHECKPOINT on each level set; the result of `levelray evaluate --json`. With `video_dir`,
    also `video_episodes` videos per level set there (`deploy.evaluation.video`), listed under `videos`. Suite mazes
    (`--levels maze-suite`) add `maze_suite`, the mean over those played (`maze_suite_summary`).
    `max_episode_steps`: every level set's time limit (None: each set's own, see the module doc)."""
    max_episode_steps = check_max_episode_steps(max_episode_steps)
    ckpt = resolve_checkpoint(checkpoint)
    cfg: RunConfig = ckpt["cfg"]
    # read again with the run's family, which may have level sets of its own (a family written outside the package)
    level_sets = parse_level_sets(level_sets if isinstance(level_sets, str) else ",".join(level_sets), cfg.env)
    if video_dir is not None:
        from levelray.deploy.evaluation.video import check_renders

        check_renders(cfg.env, "--video")  # an env that cannot draw frames is refused before anything runs
    episodes = episodes or cfg.eval.episodes
    num_envs = num_envs or cfg.eval.num_envs
    game = atari_game(cfg.env.id)
    plan = plan_level_sets(cfg, level_sets, episodes, seed)  # maze sets of another env are refused here
    plan = _with_limit(plan, max_episode_steps)
    weights = checkpoint_weights(ckpt)
    seeds_by_set = {s.name: s.seeds for s in plan}
    cfg_by_set = {s.name: cfg if s.env == cfg.env else dataclasses.replace(cfg, env=s.env) for s in plan}
    encodings = {level_id: data for s in plan for level_id, data in s.encodings.items()}  # maze files' levels
    results = _evaluate_sets(cfg_by_set, weights, seeds_by_set, episodes=episodes, greedy=greedy,
                             num_envs=num_envs, seed=seed, backend=backend, address=address,
                             num_workers=num_workers, encodings=encodings)
    results = {which: add_human_normalized(res, game) for which, res in results.items()}
    for s in plan:
        results[s.name]["max_episode_steps"] = episode_limit(s.env)
    train = training_range(cfg.env)
    out = {
        "checkpoint": ckpt["path"],
        "version": int(ckpt["learner"]["version"]),
        "env_steps": int(ckpt.get("counters", {}).get("env_steps", 0)),
        "samples_trained": int(ckpt.get("counters", {}).get("samples_trained", 0)),
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
    suite = [s.name for s in plan if s.suite]
    if suite:
        out["maze_suite"] = maze_suite_summary(results, suite)
    if any(s.file for s in plan):
        out["maze_files"] = {s.name: s.file for s in plan if s.file}
    if video_dir is not None:
        from levelray.deploy.evaluation.video import write_level_set_videos

        out["videos"] = [video for which, seeds in seeds_by_set.items()
                         for video in write_level_set_videos(cfg_by_set[which], weights, {which: seeds}, video_dir,
                                                             video_episodes, greedy=greedy, seed=seed,
                                                             encodings=encodings)]
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
        succ = f"{r['success_rate']:.2f}" if r["success_rate"] is not None else "n/a"
        lines.append(f"{_row_name(which, out):>22}  {r['episodes']:>8d}  {r['return_mean']:>9.3f}  "
                     f"{r['return_median']:>9.3f}  {r['return_std']:>8.3f}  {succ:>7}")
    if "maze_suite" in out:
        suite = out["maze_suite"]
        episodes = sum(out["results"][name]["episodes"] for name in suite["mazes"])
        lines.append(f"{'suite mean, ' + str(len(suite['mazes'])) + ' mazes':>22}  {episodes:>8d}  "
                     f"{suite['return_mean']:>9.3f}  {'':>9}  {'':>8}  {suite['success_rate']:>7.2f}")
    for which, r in out["results"].items():
        if r.get("human_normalized_score") is not None:
            lines.append(f"human-normalised score ({out.get('atari_game')}, {which} mean): "
                         f"{r['human_normalized_score']:.3f}")
    if out["generalization_gap"] is not None:
        lines.append(f"generalisation gap (train mean - test mean): {out['generalization_gap']:.3f}")
    limits = _limits_line(out)
    if limits:
        lines.append(limits)
    for video in out.get("videos", []):
        lines.append(f"video ({video['level_set']}, seed {video['seed']}, return {video['return']:.2f}, "
                     f"{video['frames']} frames): {video['path']}")
    return "\n".join(lines)


def _limits_line(out: dict[str, Any]) -> str | None:
    """`time limit: 450 steps (maze suite, spiral_mirror), 250 steps (train, test)`: each limit and the level sets
    played with it (the suite's mazes as one); None where no set reports one (the env's own limits)."""
    suite = set(out.get("maze_suite", {}).get("mazes", ()))
    by_limit: dict[int, list[str]] = {}
    for which, r in out["results"].items():
        if r.get("max_episode_steps") is not None:
            names = by_limit.setdefault(r["max_episode_steps"], [])
            name = "maze suite" if which in suite else which
            if name not in names:
                names.append(name)
    parts = [f"{limit} steps ({', '.join(names)})" for limit, names in by_limit.items()]
    return "time limit: " + ", ".join(parts) if parts else None


MAZE_WALLS_SET = re.compile(r"^maze-(\d+)$")  # the maze family's held-out sets of N walls (`families.maze.level_sets`)


def _row_name(which: str, out: dict[str, Any]) -> str:
    """A level set's name in the table: whether `test` and `maze-<N>` are held out, suite mazes marked."""
    held = "held out" if out["held_out"] else "NOT held out"
    if which == "test":
        return f"test ({held})"
    blocks = MAZE_WALLS_SET.match(which)
    if blocks is not None:
        return f"{blocks.group(1)} blocks ({held})"
    if which in out.get("maze_suite", {}).get("mazes", ()):
        return f"maze {which}"
    if which in out.get("maze_files", {}):
        return f"maze file {which}"
    return which


def add_evaluate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="run directory (its latest checkpoint) or checkpoint dir")
    p.add_argument("--levels", default="train,test",
                   help="level sets, comma-separated: train, test (held out) or A-B (seeds A..B inclusive); a "
                        "maze:<W>x<H> run also maze-suite (each suite maze, and their mean), maze-suite:<name>, "
                        "maze-<N> (held-out levels generated with N walls, e.g. maze-25) and maze-file:PATH "
                        "(mazes you bring: a text file in the suite's format, or a folder of them; each a level "
                        "set named after its file)")
    p.add_argument("--episodes", type=int, default=None, help="episodes per level set (default: eval.episodes)")
    p.add_argument("--greedy", action="store_true", help="argmax actions (Gaussian mean) instead of sampling")
    p.add_argument("--num-envs", type=int, default=None, help="envs per evaluation worker (default: eval.num_envs)")
    p.add_argument("--seed", type=int, default=0, help="seed of the level draw and of sampled actions")
    p.add_argument("--backend", choices=("inline", "ray"), default="inline",
                   help="inline: this process; ray: episodes split over Ray tasks")
    p.add_argument("--address", default=None, help="Ray cluster (auto or HOST:PORT); default: a local Ray")
    p.add_argument("--workers", type=int, default=None,
                   help="Ray tasks per level set (default: episodes / num-envs, rounded up)")
    p.add_argument("--max-episode-steps", type=int, default=None, metavar="N",
                   help="time limit of every level set's episodes (default: the run's; the maze suite and "
                        "maze-file mazes: DCD's limit for test mazes, 2 x (W+2) x (H+2) steps, 450 at 13x13)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--video", metavar="DIR", default=None,
                   help="also write MP4 videos (H.264) of episodes into DIR, named by level set, seed and return")
    p.add_argument("--video-episodes", type=int, default=None, metavar="N",
                   help="videos per level set with --video (default 1)")


def cmd_evaluate(args: argparse.Namespace) -> int:
    parse_level_sets(args.levels, others=True)  # refused before the checkpoint is read; its family reads the rest
    level_sets = args.levels
    if args.episodes is not None and args.episodes < 1:
        raise ConfigError(f"--episodes: must be >= 1, got {args.episodes}")
    if args.num_envs is not None and args.num_envs < 1:
        raise ConfigError(f"--num-envs: must be >= 1, got {args.num_envs}")
    check_max_episode_steps(args.max_episode_steps)
    if args.video_episodes is not None and args.video is None:
        raise ConfigError("--video-episodes: needs --video DIR (where the videos go)")
    if args.video_episodes is not None and args.video_episodes < 1:
        raise ConfigError(f"--video-episodes: must be >= 1, got {args.video_episodes}")
    if args.video is not None and Path(args.video).exists() and not Path(args.video).is_dir():
        raise ConfigError(f"--video: expected a directory, {args.video} is a file")
    out = evaluate_checkpoint(
        args.checkpoint, level_sets, episodes=args.episodes, greedy=args.greedy, num_envs=args.num_envs,
        seed=args.seed, backend=args.backend, address=args.address, num_workers=args.workers,
        video_dir=args.video, video_episodes=args.video_episodes or 1, max_episode_steps=args.max_episode_steps,
    )
    print(json.dumps(out) if args.json else format_result(out), flush=True)
    return 0
