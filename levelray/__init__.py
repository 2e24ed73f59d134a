"""levelray: distributed actor-learner RL (IMPALA/V-trace) with Prioritized Level Replay on Ray.

The parts are sub-packages, each a folder at the repository root mapped into this namespace by
`pyproject.toml` (`package-dir`), imported in this order (each only the ones before it):
`levelray.contracts` → `levelray.policy` → `levelray.actors`, `levelray.learner`,
`levelray.level_service`, `levelray.replay_service` → `levelray.families` (the env families, each
owning its envs and levels, found by name: nothing below imports them) → `levelray.deploy`.

For scripts, the same two things the command line does:

    import levelray
    result = levelray.train({"env": {"id": "CartPole-v1"}, "total_steps": 200_000, "backend": "inline"})
    # `result` is the last metrics.jsonl record; a RunConfig works too (frozen: build it with
    # `levelray.contracts.config.replace_paths(levelray.RunConfig(), {"env.id": ...})`)
    levelray.evaluate(result["run_dir"], levels="train,test")
"""

from __future__ import annotations

from typing import Any

from levelray.contracts.config import ConfigError, RunConfig

__version__ = "0.1.0"
__all__ = ["ConfigError", "RunConfig", "evaluate", "train"]


def train(
    config: RunConfig | dict | None = None, *, resume: bool = False, overwrite: bool = False, quiet: bool = True
) -> dict[str, Any]:
    """Run `levelray train` from Python: `config` is a `RunConfig` or a dict shaped like its YAML file.

    Returns the run's last `metrics.jsonl` record plus `run_dir`. Ctrl-C stops the run cleanly (final
    checkpoint) as on the command line. A run directory that holds another run is refused unless `overwrite`.
    The keys the caller set (fields of a `RunConfig` that differ from `RunConfig()`'s, keys present in a dict)
    play the part of the command line's flags:
    - a new run: every other key takes the env family's preset (`contracts/presets.py`);
    - `resume`: `run_dir` names the run to continue; every other key comes from its saved `config.yaml`, so
      `levelray.train({"run_dir": DIR}, resume=True)` continues it exactly as `levelray train --resume DIR`,
      and a key that may not change on resume is refused as there.
    The config is checked first (`contracts.validate`): a problem raises `ConfigError` naming its fields,
    before anything is written. This process's torch threads are sized by the run's `num_threads`
    (`levelray.policy.threads.use_threads`), as on the command line.
    """
    import threading

    from levelray.contracts.config import from_dict, get_path, replace_path, replace_paths
    from levelray.contracts.presets import apply_preset, changed_paths, dict_paths
    from levelray.deploy.cli import wandb_extras
    from levelray.deploy.training.driver import prepare_run_dir
    from levelray.deploy.training.driver import train as run_training

    cfg = config if isinstance(config, RunConfig) else from_dict(config)
    explicit = changed_paths(cfg) if isinstance(config, RunConfig) else dict_paths(config)
    saved = None
    if resume:
        saved = replace_path(_saved_config(cfg.run_dir), "run_dir", cfg.run_dir)
        cfg = replace_paths(saved, {path: get_path(cfg, path) for path in sorted(explicit)})
    else:
        cfg = apply_preset(cfg, explicit)
    run_dir = prepare_run_dir(cfg, resume=resume, overwrite=overwrite, saved=saved)
    stop = threading.Event()
    try:
        record = run_training(cfg, run_dir, resume=resume, stop=stop, quiet=quiet, wandb=wandb_extras(cfg))
    except KeyboardInterrupt:
        stop.set()
        raise
    return {**record, "run_dir": str(run_dir.path)}


def _saved_config(run_dir: str | None) -> RunConfig:
    """The config a run directory was started with (its `config.yaml`)."""
    from pathlib import Path

    import yaml

    from levelray.contracts.config import from_dict

    if not run_dir or not (Path(run_dir) / "config.yaml").exists():
        raise ConfigError("resume: config.run_dir must name the run directory to continue (with its config.yaml)")
    return from_dict(yaml.safe_load((Path(run_dir) / "config.yaml").read_text()))


def evaluate(
    checkpoint: str,
    *,
    levels: str = "train,test",
    episodes: int | None = None,
    greedy: bool = False,
    seed: int = 0,
    backend: str = "inline",
    video_dir: str | None = None,
    video_episodes: int = 1,
    max_episode_steps: int | None = None,
) -> dict[str, Any]:
    """`levelray evaluate` from Python: returns on each level set of a checkpoint or run directory
    (`levels`: `train`, `test`, `A-B` ranges, and for a maze run `maze-suite`, `maze-suite:<name>`,
    `maze-<N>`; comma separated), the dict `--json` prints. With `video_dir`,
    `video_episodes` MP4 files per level set are written there too (`--video DIR --video-episodes N`).
    `max_episode_steps`: every level set's time limit (`--max-episode-steps N`; default: the run's, and DCD's
    limit for test mazes on the maze suite and maze files). Sizes this
    process's torch threads as the command does (`levelray.policy.threads.use_threads`)."""
    from levelray.deploy.evaluation.evaluate import evaluate_checkpoint
    from levelray.policy.threads import use_threads

    use_threads()
    return evaluate_checkpoint(checkpoint, levels, episodes=episodes, greedy=greedy, seed=seed,
                               backend=backend, video_dir=video_dir, video_episodes=video_episodes,
                               max_episode_steps=max_episode_steps)
