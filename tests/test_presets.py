"""Presets: `preset: auto` fills every key the user did not set from the env family's measured defaults."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest

from levelray.contracts.config import ConfigError, RunConfig, leaves, replace_paths
from levelray.contracts.presets import (
    MODEL_REPLAY_WINDOW_UPDATES,
    PRESET_NAMES,
    PRESETS,
    UNBOUNDED_DEFAULTS,
    apply_preset,
    changed_paths,
    family,
)
from levelray.deploy.cli import build_config, build_parser

DOCS_HOOKS = Path(__file__).resolve().parents[1] / "docs" / "hooks.py"


def cli_config(*argv: str, base: dict | None = None) -> RunConfig:
    parser, dests = build_parser()
    return build_config(parser.parse_args(["train", *argv]), dests, base)


def test_family_by_env_id():
    assert family("procgen:bigfish") == "procgen"
    assert [family(e) for e in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0")] == ["classic_control"] * 3
    assert family("minigrid:DoorKey-8x8") == "minigrid"
    assert family("LunarLander-v3") == "none" and family("FrozenLake-v1") == "none"
    continuous = ("Pendulum-v1", "MountainCarContinuous-v0", "LunarLanderContinuous-v3", "BipedalWalker-v3",
                  "HalfCheetah-v5", "Humanoid-v5", "InvertedPendulum-v5")
    assert [family(e) for e in continuous] == ["continuous_control"] * len(continuous)
    assert [family(e) for e in ("atari:breakout", "ALE/Breakout-v5", "PongNoFrameskip-v4")] == ["atari"] * 3


def test_the_config_field_offers_every_preset():
    (field,) = [f for p, f, _ in leaves() if p == "preset"]
    assert tuple(field.metadata["choices"]) == PRESET_NAMES


def test_cli_fills_only_what_the_user_left_alone(tmp_path):
    cfg = cli_config("--env", "CartPole-v1", "--batch-size", "2")
    assert cfg.preset == "classic_control"
    assert cfg.learner.batch_size == 2  # the flag wins
    assert (cfg.learner.learning_rate, cfg.actors.unrolls_per_submit, cfg.actors.envs_per_actor) == (1e-3, 4, 8)
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("env: {id: CartPole-v1}\nlearner: {learning_rate: 0.0005}\n")
    cfg = cli_config("--config", str(yaml_file))
    assert cfg.learner.learning_rate == 5e-4 and cfg.learner.batch_size == 8  # YAML wins where it says
    cfg = cli_config("--env", "CartPole-v1", "--learning-rate", "0.001", "--preset", "none")
    assert cfg.preset == "none" and cfg.learner.batch_size == RunConfig().learner.batch_size
    cfg = cli_config("--env", "procgen:coinrun")
    assert cfg.preset == "procgen" and cfg.learner.model == "impala_cnn" and cfg.actors.envs_per_actor == 16
    cfg = cli_config("--env", "Pendulum-v1", "--learning-rate", "0.0003")
    assert cfg.preset == "continuous_control" and cfg.learner.learning_rate == 3e-4
    learner = cfg.learner
    assert (learner.batch_size, learner.entropy_weight, learner.lambda_, learner.queue_size) == (1, 0, 0.95, 2)
    assert cfg.actors.num_actors == 1 and learner.lr_schedule == "linear"
    cfg = cli_config("--env", "minigrid:DoorKey-6x6", "--unroll-length", "32")
    assert cfg.preset == "minigrid" and cfg.learner.model == "minigrid_cnn" and cfg.actors.envs_per_actor == 16
    assert cfg.actors.unroll_length == 32 and cfg.env.num_levels == RunConfig().env.num_levels


def test_a_maze_runs_on_the_minigrid_preset_with_dcds_discount():
    cfg = cli_config("--env", "maze:13x13")
    assert cfg.preset == "minigrid" and cfg.learner.discount == 0.995 and cfg.learner.model == "minigrid_cnn"
    assert cli_config("--env", "maze:13x13", "--discount", "0.9").learner.discount == 0.9  # the flag wins
    assert cli_config("--env", "minigrid:DoorKey-6x6").learner.discount == RunConfig().learner.discount
    assert cli_config("--env", "maze:13x13", "--preset", "none").learner.discount == RunConfig().learner.discount


def test_a_fixed_set_of_mazes_is_sampled_uniformly_unless_a_strategy_is_asked_for():
    """The maze family's FIXED_SET_DEFAULTS (PLR's defaults lost to uniform sampling on fixed maze sets): a fixed set
    draws uniformly, the unbounded space keeps PLR's level buffer, a strategy given by flag wins, and MiniGrid's
    fixed sets keep PLR."""
    assert cli_config("--env", "maze:13x13").levels.strategy == "random"  # 200 levels, the config's default
    assert cli_config("--env", "maze:13x13", "--num-levels", "0").levels.strategy == "value_l1"
    assert cli_config("--env", "maze:13x13", "--level-strategy", "value_l1").levels.strategy == "value_l1"
    assert cli_config("--env", "maze:13x13", "--preset", "none").levels.strategy == "value_l1"
    assert cli_config("--env", "minigrid:DoorKey-8x8").levels.strategy == "value_l1"
    assert cli_config("--env", "CartPole-v1").learner.advantage_scale == "rms"  # the classic-control preset's
    assert cli_config("--env", "minigrid:DoorKey-8x8").learner.advantage_scale == "sigma"


def test_the_model_loss_replays_a_window_of_the_newest_updates_unless_a_capacity_is_given(tmp_path):
    """With the model loss, replay (first in, first out) holds the fresh unrolls of MODEL_REPLAY_WINDOW_UPDATES
    updates; a capacity from a flag or the YAML file is kept, and without the model loss replay keeps its own."""
    minigrid = ("--env", "minigrid:DoorKey-5x5", "--model-loss", "muzero")
    assert cli_config(*minigrid).replay.capacity == MODEL_REPLAY_WINDOW_UPDATES * 2  # batches of 2 fresh unrolls
    assert cli_config(*minigrid, "--batch-size", "4", "--replay-ratio", "0.5").replay.capacity == (
        MODEL_REPLAY_WINDOW_UPDATES * 2)  # 2 of the 4 unrolls are replayed
    assert cli_config(*minigrid, "--replay-capacity", "2000").replay.capacity == 2000
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("replay: {capacity: 300}\n")
    assert cli_config(*minigrid, "--config", str(yaml_file)).replay.capacity == 300
    assert cli_config("--env", "minigrid:DoorKey-5x5").replay.capacity == RunConfig().replay.capacity
    cartpole = ("--env", "CartPole-v1", "--model-loss", "muzero")  # batches of 8
    assert cli_config(*cartpole).replay.capacity == MODEL_REPLAY_WINDOW_UPDATES * 8
    assert cli_config(*cartpole, "--replay-min-size", "1000").replay.capacity == 1000  # never below what replay
    # waits for before it serves


def test_a_resumed_run_keeps_its_resolved_config():
    base = {"env": {"id": "CartPole-v1"}, "preset": "classic_control", "learner": {"batch_size": 3}}
    cfg = cli_config(base=base)
    assert cfg.learner.batch_size == 3 and cfg.learner.learning_rate == RunConfig().learner.learning_rate


def test_python_configs_keep_the_fields_they_changed():
    cfg = replace_paths(RunConfig(), {"env.id": "CartPole-v1", "learner.learning_rate": 3e-4})
    assert changed_paths(cfg) == {"env.id", "learner.learning_rate"}
    cfg = apply_preset(cfg, changed_paths(cfg))
    assert cfg.preset == "classic_control"
    assert cfg.learner.learning_rate == 3e-4 and cfg.learner.batch_size == 8
    cfg = dataclasses.replace(cfg, preset="mujoco")  # past replace_path's own check of the choices
    with pytest.raises(ConfigError, match="preset must be one of"):
        apply_preset(cfg, set())


def _cell(value) -> str:
    """A preset's value as the command line writes it (lists comma-separated, None as none)."""
    if callable(value):
        return "one per CPU core"
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return "none" if value is None else str(value)


def test_the_documented_presets_table_is_the_code():
    """The presets table of the config reference (docs/reference/config.md, generated by docs/hooks.py when the
    site is built) has one column per preset in the code's order and, for every key a preset sets, its values."""
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS_HOOKS)
    hooks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hooks)
    section = hooks.config_page().split("## Presets", 1)[1]
    header = re.search(r"^\| key \|(.+)\|$", section, re.M).group(1)
    assert [cell.strip().strip("`") for cell in header.split("|")] == list(PRESETS)
    rows = {}
    for line in re.findall(r"^\| `[a-z_.]+` \|.+\|$", section, re.M):
        key, *cells = (cell.strip().strip("`") for cell in line.strip("|").split("|"))
        rows[key] = tuple(cells)
    keys = {key for preset in PRESETS.values() for key in preset} | {"levels.strategy"}
    expected = {key: tuple(_cell(p[key]) if key in p else "" for p in PRESETS.values()) for key in keys}
    expected["levels.strategy"] = tuple("random` when `env.num_levels` is 0" if name in UNBOUNDED_DEFAULTS else ""
                                        for name in PRESETS)
    assert rows == expected


def test_levels_do_not_matter_presets_keep_domain_randomisation_on_unbounded_levels():
    """CartPole, Pendulum and Atari run on fresh seeds with no level service; a fixed set or an explicit scored
    strategy keeps PLR (a level buffer on the unbounded space)."""
    assert cli_config("--env", "CartPole-v1").levels.strategy == "random"
    assert cli_config("--env", "Pendulum-v1").levels.strategy == "random"
    assert cli_config("--env", "atari:breakout").levels.strategy == "random"
    assert cli_config("--env", "CartPole-v1", "--num-levels", "20").levels.strategy == "value_l1"
    assert cli_config("--env", "CartPole-v1", "--level-strategy", "gae").levels.strategy == "gae"
    assert cli_config("--env", "minigrid:DoorKey-5x5", "--num-levels", "0").levels.strategy == "value_l1"


def test_atari_preset_trains_on_fresh_seeds_with_the_impala_cnn():
    cfg = cli_config("--env", "atari:breakout")
    assert cfg.preset == "atari" and cfg.env.num_levels == 0 and cfg.learner.model == "impala_cnn"
    assert (cfg.actors.unroll_length, cfg.learner.entropy_weight) == (20, 0.01)
    assert cli_config("--env", "ALE/Pong-v5", "--num-levels", "50").env.num_levels == 50  # the flag wins

