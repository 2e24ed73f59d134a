"""levelray: distributed actor-learner RL (IMPALA/V-trace) with Prioritized Level Replay on Ray.

The parts are sub-packages, each a folder at the repository root mapped into this namespace by
`pyproject.toml` (`package-dir`), imported in this order (each only the ones before it):
`levelray.contracts` → `levelray.policy` → `levelray.actors`, `levelray.learner`,
`levelray.level_service`, `levelray.replay_service` → `levelray.deploy`.

For scripts, the same two things the command line does:

    import levelray
    cfg = levelray.RunConfig()
    cfg.env.id, cfg.total_steps, cfg.backend = "CartPole-v1", 200_000, "inline"
    result = levelray.train(cfg)                  # the last metrics.jsonl record
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
    checkpoint) as on the command line. With `resume`, `config.run_dir` names the run to continue; a run
    directory that holds another run is refused unless `overwrite`. Keys left at their defaults (fields of a
    `RunConfig` equal to `RunConfig()`'s, keys absent from a dict) take the env family's preset
    (`contracts/presets.py`); `config` itself is not changed. The config is checked first
    (`contracts.validate`): a problem raises `ConfigError` naming its fields, before anything is written.
    """
    import copy
    import threading

    from levelray.contracts.config import from_dict
    from levelray.deploy.driver import prepare_run_dir
    from levelray.deploy.driver import train as run_training

    cfg = config if isinstance(config, RunConfig) else from_dict(config)
    if not resume:  # the env family's defaults for every key the caller left alone
        from levelray.contracts.presets import apply_preset, changed_paths, dict_paths

        cfg = copy.deepcopy(cfg)
        apply_preset(cfg, changed_paths(cfg) if isinstance(config, RunConfig) else dict_paths(config))
    saved = None
    if resume:
        from pathlib import Path

        import yaml

        if not cfg.run_dir or not (Path(cfg.run_dir) / "config.yaml").exists():
            raise ConfigError("resume: config.run_dir must name the run directory to continue (with its config.yaml)")
        saved = from_dict(yaml.safe_load((Path(cfg.run_dir) / "config.yaml").read_text()))
    run_dir = prepare_run_dir(cfg, resume=resume, overwrite=overwrite, saved=saved)
    stop = threading.Event()
    try:
        record = run_training(cfg, run_dir, resume=resume, stop=stop, quiet=quiet)
    except KeyboardInterrupt:
        stop.set()
        raise
    return {**record, "run_dir": str(run_dir.path)}


def evaluate(
    checkpoint: str,
    *,
    levels: str = "train,test",
    episodes: int | None = None,
    greedy: bool = False,
    seed: int = 0,
    backend: str = "inline",
) -> dict[str, Any]:
    """`levelray evaluate` from Python: returns on each level set of a checkpoint or run directory
    (`levels`: `train`, `test`, `A-B` ranges, comma separated), the dict `--json` prints."""
    from levelray.deploy.evaluate import evaluate_checkpoint, parse_level_sets

    return evaluate_checkpoint(checkpoint, parse_level_sets(levels), episodes=episodes, greedy=greedy, seed=seed,
                               backend=backend)
