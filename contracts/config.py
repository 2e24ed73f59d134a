"""One typed config tree for a whole run.

A YAML file and CLI flags fill it (flags override the file); the resolved tree is written into the
run directory. Every leaf has a CLI flag: the name in its metadata, or `--<section>-<field>`.
Unknown keys, wrong types and out-of-range values are rejected with the dotted path of the field; what needs
several fields (or the machine) is checked once the tree is filled, by `contracts.validate`.

The `env` section (`EnvConfig`, with `is_atari`) lives in `contracts.config_env`, the `actors` section
(`ActorConfig`) in `contracts.config_actors`, the `learner` section (`LearnerConfig`, with APPO's `AppoConfig`) in
`contracts.config_learner`, the `model_loss` section (`ModelLossConfig`) in
`contracts.config_model`, the `wandb` section (`WandbConfig`) in `contracts.config_wandb`, SFL's `levels.sfl`
(`SflConfig`) in `contracts.config_sfl`, and a leaf's conversion and the sections' base (`Section`, `flag`) in
`contracts.config_values`, so that this module stays readable; everything is imported from here.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass, field
from typing import Any

from levelray.contracts.config_actors import ActorConfig  # noqa: F401  (imported from here everywhere)
from levelray.contracts.config_env import EnvConfig, is_atari  # noqa: F401  (imported from here everywhere)
from levelray.contracts.config_learner import (  # noqa: F401  (imported from here everywhere)
    AppoConfig,
    LearnerConfig,
)
from levelray.contracts.config_model import (  # noqa: F401  (imported from here everywhere)
    MODEL_LOSS_TERMS,
    MODEL_LOSSES,
    ModelLossConfig,
)
from levelray.contracts.config_sfl import SflConfig  # noqa: F401  (imported from here everywhere)
from levelray.contracts.config_values import ConfigError, coerce_value, field_types
from levelray.contracts.config_values import Section as _Section
from levelray.contracts.config_values import flag as _flag
from levelray.contracts.config_wandb import WandbConfig  # noqa: F401  (imported from here everywhere)
from levelray.contracts.levels import SCHEDULES, STRATEGIES, TRANSFORMS, UNSCORED_STRATEGIES, check_strategy
from levelray.contracts.plugins import check_plugin_name


def _check_editor_name(name: str) -> None:
    """`levels.editor`: none or a plug-in's name (`contracts.plugins`); whether it loads is checked before a run."""
    if name != "none":
        check_plugin_name(name)


@dataclass(frozen=True)
class LevelConfig(_Section):
    source: str = field(
        default="plr",
        metadata=_flag("--level-source", "where the levels come from (a level_service.curriculum.LevelSource): plr "
                       "(PLR over the fixed set, or its level buffer on an unbounded space), or module:attribute of "
                       "your own", check=check_plugin_name),
    )
    strategy: str = field(
        default="value_l1", metadata=_flag("--level-strategy", f"PLR score strategy ({'|'.join(STRATEGIES)}), or "
                                           "module:attribute of a level score of your own", check=check_strategy)
    )
    replay_schedule: str = field(
        default="proportionate",
        metadata=_flag("--level-replay-schedule", "PLR replay schedule: proportionate replays with P = the seen "
                                                  "fraction (a buffer: min(fill, levels.replay_prob)), fixed with "
                                                  "P = 1 - nu (a buffer: levels.replay_prob)", choices=SCHEDULES),
    )
    score_transform: str = field(
        default="rank", metadata=_flag("--level-score-transform", "PLR score transform", choices=TRANSFORMS)
    )
    temperature: float = field(default=0.1, metadata=_flag("--level-temperature", "PLR beta", above=0.0))
    eps: float = field(default=0.05, metadata=_flag("--level-eps", "eps for eps_greedy", min=0.0, max=1.0))
    rho: float = field(default=0.2, metadata=_flag("--level-rho", "fraction of the levels seen (a fixed set) or of the "
                                                   "level buffer filled (unbounded) before any replay",
                                                   min=0.0, max=1.0))
    nu: float = field(default=0.5, metadata=_flag("--level-nu", "fixed schedule on a fixed set: P(new level) (a level "
                                                 "buffer uses levels.replay_prob)", min=0.0, max=1.0))
    alpha: float = field(default=1.0, metadata=_flag("--level-alpha", "score EWA weight", above=0.0, max=1.0))
    staleness_coef: float = field(
        default=0.1, metadata=_flag("--level-staleness-coef", "staleness mix (paper's rho)", min=0.0, max=1.0)
    )
    staleness_transform: str = field(
        default="power", metadata=_flag("--level-staleness-transform", "staleness transform", choices=TRANSFORMS)
    )
    staleness_temperature: float = field(
        default=1.0, metadata=_flag("--level-staleness-temperature", "staleness temperature", above=0.0)
    )
    snapshot_interval_s: float = field(
        default=60.0, metadata=_flag("--level-snapshot-interval", "level service snapshot period (s)", min=0.0,
                                     resumable=True)
    )
    # An unbounded level space (--num-levels 0) with a scored strategy: DCD's level buffer (Jiang et al. 2021b).
    buffer_size: int = field(
        default=4000,
        metadata=_flag("--level-buffer-size", "unbounded levels (--num-levels 0): the most levels PLR keeps, the "
                                              "highest-scoring ones (DCD's level_replay_seed_buffer_size)", min=0),
    )
    replay_prob: float = field(
        default=0.5,
        metadata=_flag("--level-replay-prob", "unbounded levels: P(an episode replays a buffered level) once "
                                              "rho x buffer size levels are buffered, else a new level (DCD's "
                                              "level_replay_prob)", min=0.0, max=1.0),
    )
    robust: bool = field(
        default=False,
        metadata=_flag("--level-robust", "Robust PLR (PLR-perp): steps on new levels are scored but not trained "
                                         "on; only replayed levels carry gradient"),
    )
    editor: str = field(
        default="none",
        metadata=_flag("--level-editor", "a level editor: none, accel (after a replayed level's episode is scored, "
                                         "queue a child of it with levels.num_edits random edits, played as a new "
                                         "level: ACCEL, maze runs on unbounded levels with Robust PLR), or "
                                         "module:attribute of your own", check=_check_editor_name),
    )
    num_edits: int = field(
        default=5, metadata=_flag("--level-num-edits", "edits per child of levels.editor (DCD's num_edits)", min=1)
    )
    drop_unsolvable: bool = field(
        default=False,
        metadata=_flag("--level-drop-unsolvable", "drop the children of levels.editor whose goal cannot be reached "
                                                  "(kept by default, as DCD and JaxUED keep them)"),
    )
    gae_lambda: float = field(
        default=0.95,
        metadata=_flag("--level-gae-lambda", "GAE lambda of the level scores the actors compute (gae, value_l1, "
                                             "positive_value_loss)", min=0.0, max=1.0),
    )
    window: int = field(
        default=256,
        metadata=_flag("--level-window", "a level buffer only (--num-levels 0): env steps per env for which replay "
                                         "or explore is decided at once (DCD's rollout), rounded up to whole unrolls; "
                                         "an explore window plays one new level (or ACCEL child) per env, its unrolls "
                                         "kept on the actor under Robust PLR (levels.robust); 0: per episode", min=0),
    )
    sfl: SflConfig = field(default_factory=SflConfig)  # `--level-source sfl`'s settings (contracts.config_sfl)


@dataclass(frozen=True)
class ReplayConfig(_Section):
    replay_ratio: float = field(
        default=0.0, metadata=_flag("--replay-ratio", "fraction of each batch drawn from replay", min=0.0, max=0.95)
    )
    capacity: int = field(
        default=2000, metadata=_flag("--replay-capacity", "replay capacity (unrolls, first in first out); with the "
                                     "model loss and no capacity given: 50 updates' fresh unrolls, so the model "
                                     "trains on recent data (contracts.presets.model_replay_capacity)", min=1)
    )
    alpha: float = field(default=0.6, metadata=_flag("--replay-alpha", "priority exponent", min=0.0))
    beta: float = field(default=0.4, metadata=_flag("--replay-beta", "initial IS exponent (annealed to 1)", min=0.0))
    beta_anneal_updates: int = field(
        default=10000, metadata=_flag("--replay-beta-anneal", "updates to anneal beta to 1", min=1)
    )
    max_use: int | None = field(
        default=16, metadata=_flag("--replay-max-use", "times an unroll may be replayed", min=1)
    )
    eta: float = field(default=0.9, metadata=_flag("--replay-eta", "priority = eta*max + (1-eta)*mean |td|"))
    min_size: int = field(default=8, metadata=_flag("--replay-min-size", "unrolls before replay starts", min=1))
    snapshot_max_item_bytes: int = field(
        default=64 << 20,
        metadata=_flag("--replay-snapshot-bytes", "trajectory data kept in replay snapshots/checkpoints", min=0,
                       resumable=True),
    )
    snapshot_interval_s: float = field(
        default=300.0, metadata=_flag("--replay-snapshot-interval", "replay service snapshot period (s)", min=0.0,
                                      resumable=True)
    )


@dataclass(frozen=True)
class EvalConfig(_Section):
    interval_updates: int = field(
        default=0, metadata=_flag("--eval-interval", "learner updates between held-out evaluations (0: off)", min=0,
                                  resumable=True)
    )
    episodes: int = field(
        default=32, metadata=_flag("--eval-episodes", "episodes per evaluation", min=1, resumable=True)
    )
    num_envs: int = field(
        default=8, metadata=_flag("--eval-envs", "environments per evaluation worker", min=1, resumable=True)
    )
    greedy: bool = field(
        default=False, metadata=_flag("--eval-greedy", "argmax actions instead of sampling", resumable=True)
    )
    video_interval: int = field(
        default=0,
        metadata=_flag("--video-interval", "record one held-out episode with every Nth periodic evaluation into "
                       "RUN_DIR/videos/ (0: off)", min=0, resumable=True),
    )


@dataclass(frozen=True)
class RunConfig(_Section):
    env: EnvConfig = field(default_factory=EnvConfig)
    actors: ActorConfig = field(default_factory=ActorConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    levels: LevelConfig = field(default_factory=LevelConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    model_loss: ModelLossConfig = field(default_factory=ModelLossConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    preset: str = field(
        default="auto",
        metadata=_flag("--preset", "defaults for the env's family (contracts/presets.py): auto picks one by the env "
                       "id, none keeps the general defaults",
                       choices=("auto", "none", "procgen", "classic_control", "continuous_control", "minigrid",
                                "atari", "dcd")),
    )
    backend: str = field(
        default="ray", metadata=_flag("--backend", "ray or single-process", choices=("ray", "inline"), resumable=True)
    )
    address: str | None = field(
        default=None, metadata=_flag("--address", "Ray cluster: auto or HOST:PORT", resumable=True)
    )
    service_resources: str = field(
        default="", metadata=_flag("--service-resources", "custom Ray resources the level and replay services ask "
                                   "for, NAME=AMOUNT[,NAME=AMOUNT]; empty: they run on the driver's node. Nodes "
                                   "with them must share the run directory (storage every node mounts at one path), "
                                   "so that a service restarted on another node reads its snapshot")
    )
    num_threads: int = field(
        default=0, metadata=_flag("--num-threads", "torch threads of the process that trains (inline: the run's "
                                  "one process; Ray: each learner); 0: auto: OMP_NUM_THREADS where set, else half "
                                  "the CPUs an inline run may use (at least 1: two runs side by side fit), a Ray "
                                  "learner its node's CPUs up to 4 (policy/threads.py)", min=0,
                                  resumable=True)
    )
    run_dir: str | None = field(
        default=None, metadata=_flag("--run-dir", "run directory (default runs/<time>)", resumable=True)
    )
    total_steps: int = field(
        default=2_000_000, metadata=_flag("--total-steps", "env steps to train for", min=1, resumable=True)
    )
    total_trained_steps: int | None = field(
        default=None,
        metadata=_flag("--total-trained-steps", "env steps to train on (samples_trained; with Robust PLR only "
                       "replayed levels' steps count), a budget at equal gradient updates as DCD compares; "
                       "this or total_steps, whichever is reached first, ends the run", min=1,
                       resumable=True),
    )
    seed: int = field(default=0, metadata=_flag("--seed", "random seed", min=0))
    metrics_host: str = field(
        default="127.0.0.1", metadata=_flag("--metrics-host", "metrics bind address", resumable=True)
    )
    metrics_port: int = field(
        default=9464, metadata=_flag("--metrics-port", "Prometheus port (0: none)", min=0, max=65535, resumable=True)
    )
    report_interval_s: float = field(
        default=5.0, metadata=_flag("--report-interval", "seconds between progress reports", min=0.0, resumable=True)
    )
    tensorboard: bool = field(
        default=True, metadata=_flag("--tensorboard", "write TensorBoard event files into the run directory",
                                     resumable=True)
    )
    checkpoint_interval_updates: int = field(
        default=500, metadata=_flag("--checkpoint-interval", "learner updates between checkpoints", min=1,
                                    resumable=True)
    )
    keep_checkpoints: int = field(
        default=3, metadata=_flag("--keep-checkpoints", "checkpoints kept (at least 2: a fallback must exist)", min=2,
                                  resumable=True)
    )
    max_learner_restarts: int = field(
        default=3, metadata=_flag("--max-learner-restarts", "restarts of a dead learner from its checkpoint", min=0,
                                  resumable=True)
    )
    stop_at_return: float | None = field(
        default=None, metadata=_flag("--stop-at-return", "stop once the mean episode return reaches this",
                                     resumable=True)
    )


def leaves(cls=RunConfig, prefix: str = "") -> list[tuple[str, dataclasses.Field, Any]]:
    """(dotted path, field, type) for every leaf of the config tree."""
    out = []
    hints = field_types(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        path = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp):
            out.extend(leaves(tp, path + "."))
        else:
            out.append((path, f, tp))
    return out


# What may differ from the saved config when a run is resumed, the leaves whose metadata says `resumable`: how long
# and how it runs, how it reports, and where. Everything else is part of the saved state (the model's shape, the
# optimiser, the level set and PLR settings, the replay buffer, the unroll format, the seed): a change there would
# silently break a service or be ignored, so it is refused (`deploy.training.driver.check_resume_overrides`).
RESUMABLE_KEYS = frozenset(path for path, f, _tp in leaves() if f.metadata.get("resumable"))


def flag_name(path: str, f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + path.replace(".", "-").replace("_", "-")


def from_dict(data: dict | None, cls=RunConfig, prefix: str = ""):
    """Build a config from nested dicts (YAML), rejecting unknown keys with their dotted path."""
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got {type(data).__name__}")
    hints = field_types(cls)
    names = {f.name: f for f in dataclasses.fields(cls)}
    if cls is RunConfig and "model" in data:
        data = _renamed_section(data, "model", "model_loss")
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(f"unknown config key {prefix}{unknown[0]}; known keys here: {', '.join(sorted(names))}")
    kwargs = {}
    for name, value in data.items():
        f, tp = names[name], hints[name]
        path = f"{prefix}{name}"
        if dataclasses.is_dataclass(tp):
            kwargs[name] = from_dict(value, tp, path + ".")
        else:
            kwargs[name] = coerce_value(path, tp, value, dict(f.metadata))
    return cls(**kwargs)


def _renamed_section(data: dict, old: str, new: str) -> dict:
    """Run directories written before a section was renamed still load: the old key is read as the new one."""
    if new in data:
        raise ConfigError(f"config has both {old} (the old name of {new}) and {new}: keep {new} only")
    warnings.warn(f"config key {old!r} is now {new!r}; the old name is read for now", DeprecationWarning,
                  stacklevel=3)
    return {(new if k == old else k): v for k, v in data.items()}


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def get_path(cfg: RunConfig, path: str) -> Any:
    """A leaf's value by dotted path."""
    for part in path.split("."):
        cfg = getattr(cfg, part)
    return cfg


def differing_paths(a: RunConfig, b: RunConfig) -> list[str]:
    """Dotted paths of the leaves whose values differ between `a` and `b`, in tree order."""
    return [path for path, _f, _tp in leaves() if get_path(a, path) != get_path(b, path)]


def replace_path(cfg: RunConfig, path: str, value: Any) -> RunConfig:
    """A copy of `cfg` with the leaf at dotted `path` set to `value` (coerced and validated); the sections
    are frozen, so the copy shares every section it does not change."""
    return replace_paths(cfg, {path: value})


def replace_paths(cfg: RunConfig, values: dict[str, Any]) -> RunConfig:
    """A copy of `cfg` with each dotted path of `values` set (coerced and validated), in order."""
    by_path = {p: (f, tp) for p, f, tp in leaves()}
    for path, value in values.items():
        if path not in by_path:
            raise ConfigError(f"unknown config key {path}")
        f, tp = by_path[path]
        cfg = _replace_leaf(cfg, path.split("."), coerce_value(path, tp, value, dict(f.metadata)))
    return cfg


def _replace_leaf(section, parts: list[str], value: Any):
    head, *rest = parts
    new = value if not rest else _replace_leaf(getattr(section, head), rest, value)
    return dataclasses.replace(section, **{head: new})


def uses_replay(cfg: RunConfig) -> bool:
    """Whether the run has a replay service: replayed unrolls in the batch, or the model loss's sequences
    (which come from replay even when `replay.replay_ratio` is 0)."""
    return cfg.replay.replay_ratio > 0 or cfg.model_loss.loss != "none"


def uses_level_service(cfg: RunConfig) -> bool:
    """Whether the run has a level service: a fixed training set (PLR over it, or its uniform and sequential
    baselines), a scored strategy on an unbounded space (PLR's level buffer), or a curriculum of one's own. Domain
    randomisation on an unbounded space (`random` with PLR) needs none: each env draws a fresh seed itself."""
    return cfg.env.num_levels > 0 or cfg.levels.strategy not in UNSCORED_STRATEGIES or cfg.levels.source != "plr"
