"""The config tree: YAML fills it, flags override, bad values are named by their dotted path."""

import pytest
import yaml

from levelray.contracts.config import ConfigError, RunConfig, from_dict, leaves, replace_path, to_dict
from levelray.deploy.cli import build_config, build_parser


def parse(argv, tmp_path=None, yaml_text=None):
    parser, dests = build_parser()
    if yaml_text is not None:
        path = tmp_path / "run.yaml"
        path.write_text(yaml_text)
        argv = [*argv, "--config", str(path)]
    args = parser.parse_args(["train", *argv])
    return build_config(args, dests)


def test_yaml_then_flags_override(tmp_path):
    text = "env: {id: CartPole-v1, num_levels: 10}\nactors: {num_actors: 3}\nlearner: {learning_rate: 0.002}\n"
    cfg = parse(["--num-actors", "5", "--level-strategy", "gae"], tmp_path, text)
    assert cfg.env.id == "CartPole-v1" and cfg.env.num_levels == 10
    assert cfg.actors.num_actors == 5  # flag wins over YAML
    assert cfg.learner.learning_rate == 0.002
    assert cfg.levels.strategy == "gae"


def test_every_leaf_has_a_distinct_flag():
    from levelray.contracts.config import flag_name

    names = [flag_name(p, f) for p, f, _ in leaves()]
    assert len(names) == len(set(names))
    for required in ("--env", "--num-actors", "--envs-per-actor", "--address", "--backend", "--run-dir",
                     "--total-steps", "--metrics-port", "--level-strategy", "--replay-ratio"):
        assert required in names


def test_round_trip_through_yaml():
    cfg = replace_path(RunConfig(), "learner.clip_rho", None)
    assert from_dict(yaml.safe_load(yaml.safe_dump(to_dict(cfg)))) == cfg


@pytest.mark.parametrize(
    "argv, yaml_text, match",
    [
        (["--num-actors", "two"], None, "actors.num_actors: expected int"),
        (["--level-strategy", "best"], None, "levels.strategy: expected one of"),
        (["--learning-rate", "-1"], None, "learner.learning_rate: must be >= 0"),
        (["--keep-checkpoints", "1"], None, "keep_checkpoints: must be >= 2"),
        (["--learning-rate", "nan"], None, "learner.learning_rate: expected float"),
        ([], "learner: {learning_rat: 1}\n", "unknown config key learner.learning_rat"),
        ([], "actors: 3\n", "actors: expected a mapping"),
        ([], "env: [\n", "not valid YAML"),
    ],
)
def test_bad_values_name_the_field(tmp_path, argv, yaml_text, match):
    with pytest.raises(ConfigError, match=match):
        parse(argv, tmp_path, yaml_text)


def test_optional_fields_accept_none():
    cfg = parse(["--clip-rho", "none", "--replay-max-use", "null"])
    assert cfg.learner.clip_rho is None and cfg.replay.max_use is None


def test_unknown_env_is_a_clean_cli_error(capsys, tmp_path):
    from levelray.deploy.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["train", "--env", "procgen:bigfsh", "--run-dir", str(tmp_path / "r")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--env: unknown procgen game 'bigfsh'" in err and "procgen:bigfish" in err
    assert not (tmp_path / "r").exists()  # nothing was started or written


def test_a_resume_may_change_the_leaves_marked_resumable_and_no_other():
    from levelray.contracts.config import RESUMABLE_KEYS, replace_paths
    from levelray.deploy.training.driver import check_resume_overrides

    marked = {path for path, f, _tp in leaves() if f.metadata.get("resumable")}
    assert RESUMABLE_KEYS == marked and {"total_steps", "actors.num_actors", "env.native_vector"} <= marked
    assert not {"seed", "learner.batch_size", "env.num_levels", "levels.strategy"} & marked
    saved = RunConfig()
    check_resume_overrides(saved, replace_paths(saved, {"total_steps": 5, "actors.num_actors": 7, "eval.greedy": True}))
    with pytest.raises(ConfigError) as refused:
        check_resume_overrides(saved, replace_paths(saved, {"seed": 3, "learner.batch_size": 4, "total_steps": 5}))
    message = str(refused.value)
    assert message.startswith("--resume cannot change learner.batch_size (2 -> 4), seed (0 -> 3): the checkpoint")
    assert message.endswith("Keys that may change on resume: " + ", ".join(sorted(marked)))
