"""README stays a short, true front page: its first two commands are the Makefile targets CI runs, it stays
under 10,000 characters, its links resolve, and its example command lines parse with the real command-line
parser (a renamed or removed flag fails here). Flags, config keys and metrics are documented in the built site's
generated reference, checked by tests/test_docs.py."""

import argparse
import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from levelray.actors.envs import env_spec
from levelray.contracts.validate import validate
from levelray.deploy.cli import build_config, build_parser, main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_first_two_commands_are_train_and_test_and_ci_runs_the_test_command():
    commands = re.findall(r"^make (\w+)", README, flags=re.M)
    assert commands[:2] == ["train", "test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^train: ", makefile, flags=re.M) and re.search(r"^test: ", makefile, flags=re.M)


def test_readme_is_a_short_front_page():
    assert len(README) < 10_000, len(README)


def test_every_relative_link_points_to_an_existing_file():
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    relative = [link.split("#")[0] for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")]
    assert relative, "README links to no file"
    missing = [link for link in relative if not (ROOT / link).exists()]
    assert not missing, missing


def _code_lines() -> list[str]:
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", README, flags=re.M | re.S)
    return [line.split(" #")[0].strip() for block in blocks for line in block.splitlines()]


def _command_lines() -> list[list[str]]:
    """Every `levelray ...` line of README's code blocks as levelray's argv, and `make train TRAIN_ARGS=...` as
    the `levelray train ...` it runs."""
    argvs = []
    for line in _code_lines():
        words = shlex.split(line) if line.startswith(("levelray ", "make ")) else []
        if words[:1] == ["levelray"]:
            argvs.append(words[1:])
        elif words[:2] == ["make", "train"]:
            passed = [w.split("=", 1)[1] for w in words[2:] if w.startswith("TRAIN_ARGS=")]
            argvs.append(["train", *(shlex.split(passed[0]) if passed else [])])
    return argvs


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action.choices[command]


def test_readme_examples_cover_the_three_jobs():
    argvs = _command_lines()
    commands = {argv[0] for argv in argvs}
    assert {"train", "evaluate", "report", "scale"} <= commands, commands
    trains = [argv for argv in argvs if argv[0] == "train"]
    assert any("CartPole-v1" in argv for argv in trains)  # CartPole in seconds
    assert any("--eval-interval" in argv and any(w.startswith("minigrid:") for w in argv) for argv in trains)
    assert any("--address" in argv for argv in trains)  # joining a cluster


@pytest.mark.parametrize("argv", _command_lines(), ids=" ".join)
def test_readme_command_line_parses_with_the_real_parser(argv):
    parser, dests = build_parser()
    known = set(_subparser(parser, argv[0])._option_string_actions)
    # argparse accepts unambiguous abbreviations: a flag README names must be spelled exactly as defined
    unknown = [w for w in argv[1:] if w.startswith("--") and w.split("=")[0] not in known]
    assert not unknown, f"not flags of `levelray {argv[0]}`: {unknown}"
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"`levelray {' '.join(argv)}` does not parse (exit {exc.code})")
    if argv[0] == "train":
        cfg = build_config(args, dests)
        validate(cfg)  # a value the CLI would refuse before starting
        env_spec(cfg.env)  # the env id is one levelray knows


@pytest.mark.timeout(240)
def test_readme_cartpole_example_runs(tmp_path):
    """README's first example, run here for 60,000 env steps in one process (without Ray; ~5 s): the same
    config, preset and learner as `make train TRAIN_ARGS="--env CartPole-v1"`. It learns: a random policy's
    mean return is ~22, this run's ~80 (seed 0, deterministic inline)."""
    (argv,) = [a for a in _command_lines() if a[0] == "train" and "CartPole-v1" in a]
    run = tmp_path / "run"
    assert main([*argv, "--backend", "inline", "--total-steps", "60000", "--run-dir", str(run),
                 "--metrics-port", "0", "--quiet"]) == 0
    assert yaml.safe_load((run / "config.yaml").read_text())["preset"] == "classic_control"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["env_steps"] >= 60_000
    assert records[-1]["episode_return_mean"] > 40, records[-1]
    assert list((run / "checkpoints").iterdir())
