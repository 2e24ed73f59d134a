"""An env family of one's own (`tests/corridor.py`), named `--env-family tests.corridor:FAMILY`: it trains on both
backends with PLR over its levels and no edit of the package, is edited by its own editor, reports its own level
statistics and is evaluated on its own level set; a family that does not load, or does not take the env id, is
refused before the run starts, naming the flag, the kind and what exists."""

from __future__ import annotations

import json

import numpy as np
import pytest

from levelray.contracts.config import ConfigError, EnvConfig, RunConfig, replace_paths
from levelray.contracts.families import family_of
from levelray.deploy.cli import main
from tests.corridor import FAMILY, CorridorEditor, length
from tests.support import json_output

CORRIDOR = ["--env", "corridor:walk", "--env-family", "tests.corridor:FAMILY", "--num-levels", "20",
            "--num-actors", "1", "--envs-per-actor", "16", "--metrics-port", "0", "--report-interval", "1", "--quiet",
            "--tensorboard", "false"]


def random_return() -> float:
    """The mean return of uniformly random actions on the 20 training corridors (about 0.69)."""
    vec = FAMILY.make_vector(EnvConfig(id="corridor:walk", num_levels=20), 64, None, 0)
    vec.reset()
    rng, returns = np.random.default_rng(0), []
    for _ in range(2000):
        step = vec.step(rng.integers(0, 2, size=64))
        returns += step.rewards[step.terminated | step.truncated].tolist()
    return float(np.mean(returns))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_an_env_family_of_ones_own_trains_on_both_backends(backend, tmp_path, request, one_thread):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    run = tmp_path / "corridor"
    assert main(["train", "--backend", backend, *CORRIDOR, "--total-steps", "40000", "--run-dir", str(run)]) == 0
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["episode_return_mean"] >= 0.9 > random_return() + 0.15, last["episode_return_mean"]
    assert last["level_seen_fraction"] == 1.0  # PLR over the family's 20 levels: every corridor scored
    assert family_of(EnvConfig(id="corridor:walk", family="tests.corridor:FAMILY")) is FAMILY


def test_a_family_that_does_not_load_or_does_not_take_the_id_is_refused(tmp_path, capsys):
    for family, env, words in (
        ("corridors", "corridor:walk", "--env-family 'corridors' (env.family): no env family is called that; built "
                                       "in: atari, gymnasium, maze, minigrid, procgen"),
        ("tests.corridor:NOTHING", "corridor:walk", "'tests.corridor' has no env family 'NOTHING'"),
        ("tests.corridor:FAMILY", "CartPole-v1", "--env-family tests.corridor:FAMILY does not build env id "
                                                 "'CartPole-v1'; it takes corridor:<name>"),
        ("maze", "corridor:walk", "--env-family maze does not build env id 'corridor:walk'"),
    ):
        run = tmp_path / family.replace(":", "_")
        with pytest.raises(SystemExit) as refused:
            main(["train", "--backend", "inline", "--env", env, "--env-family", family, "--run-dir", str(run),
                  "--metrics-port", "0", "--quiet"])
        assert refused.value.code == 2
        assert words in capsys.readouterr().err
        assert not run.exists()  # refused before the run directory was claimed
    with pytest.raises(ConfigError, match="env.family"):  # neither a built-in's name nor module:attribute
        replace_paths(RunConfig(), {"env.family": "Corridor Family"})


EDITED = ["--num-levels", "0", "--level-editor", "tests.corridor:CorridorEditor", "--level-robust", "--level-strategy",
          "positive_value_loss", "--level-buffer-size", "16", "--level-rho", "0.25", "--level-replay-prob", "0.5",
          "--level-window", "40"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_its_own_editor_statistics_and_level_set_on_both_backends(backend, tmp_path, request, one_thread, capsys):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    run = tmp_path / "edited"
    args = [a for a in CORRIDOR if a not in ("--num-levels", "20")]
    assert main(["train", "--backend", backend, *args, *EDITED, "--total-steps", "12000", "--run-dir", str(run)]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = records[-1]
    assert last["levels_edited"] > 0  # the corridor's own editor made children in the level service
    assert all(2 <= r["levels_mean_length"] <= 32 for r in records if r.get("levels_mean_length") is not None)
    assert any(r.get("levels_mean_length") is not None for r in records)
    capsys.readouterr()
    assert main(["evaluate", str(run), "--levels", "corridor-5,test", "--episodes", "4", "--backend", backend,
                 "--json"]) == 0
    out = json_output(capsys.readouterr().out)
    assert set(out["results"]) == {"corridor-5", "test"}
    assert out["results"]["corridor-5"]["seeds"] == [1 << 40 | 5] * 4  # one level, the corridor of 5 cells
    assert 4 <= out["results"]["corridor-5"]["length_mean"] <= 4 * 5  # 4 moves at best, cut at 4 * length


def test_the_editor_children_are_data_and_read_back():
    editor = CorridorEditor(num_edits=3, queue_limit=32)
    rng = np.random.default_rng(0)
    children = [editor.make_child(seed, rng) for seed in range(20)]
    for seed, child in zip(range(20), children, strict=True):
        assert 1 <= abs(editor.level(child) - length(seed)) <= 3 or editor.level(child) in (2, 32)
        assert length(child, editor.encodings_of([child])) == editor.level(child)  # the env reads what it holds
    again = CorridorEditor.from_state_dict(editor.state_dict())
    assert again.encodings == editor.encodings and list(again.queue) == list(editor.queue)
    with pytest.raises(ValueError, match="one byte"):
        CorridorEditor.from_state_dict({**editor.state_dict(), "encodings": [b"\x01"] * len(editor.encodings)})
