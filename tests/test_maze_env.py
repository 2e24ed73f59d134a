"""The maze family (`--env maze:<W>x<H>`): the MiniGrid-built env's grid built from a level, its moves and the goal's
reward (the arrays match it step for step: `tests/test_maze_vector.py`), level ids (seeds, suite mazes, unknown
reserved ids), bad names and bad `--maze-blocks`, the maze level sets of `levelray evaluate`, and a short inline
training run evaluated on the suite and on held-out generated levels."""

from __future__ import annotations

import numpy as np
import pytest
from minigrid.core.world_object import Goal, Wall

from levelray.actors.envs import env_spec, level_frame, make_env_vector
from levelray.contracts.config import ConfigError, EnvConfig, RunConfig, from_dict, replace_paths
from levelray.contracts.families import family_of
from levelray.contracts.presets import apply_preset
from levelray.contracts.spec import MINIGRID_OBS, EnvSpec
from levelray.contracts.validate import validate
from levelray.deploy.cli import main
from levelray.deploy.evaluation.evaluate import format_result, maze_suite_summary
from levelray.deploy.evaluation.level_sets import parse_level_sets, plan_level_sets
from levelray.families.maze.env import default_max_steps
from levelray.families.maze.grid import MazeGridEnv
from levelray.families.maze.level import (
    EDITED_ID_BASE,
    SUITE_ID_BASE,
    MazeLevel,
    generate,
    suite_level,
    suite_level_id,
    suite_names,
)
from levelray.families.minigrid.obs import MiniGridObs
from levelray.policy.models import MiniGridNet, build_model
from tests.support import TINY_INLINE_RUN, json_output

LEFT, RIGHT, FORWARD = 0, 1, 2
# 6 wide, 4 high (not square, so a swapped x and y shows): the agent at (0, 0) facing right into a wall.
LEVEL_TEXT = """\
>#....
.#.##.
.#..#.
G...#.
"""


def _vector(env_id: str = "maze:13x13", level_ids=(7,), **env):
    return make_env_vector(EnvConfig(id=env_id, **env), len(level_ids), lambda k: int(level_ids[k]))


def _env_with(level: MazeLevel):
    """One MiniGrid-built maze env (`MiniGridObs` around `MazeGridEnv`, the reference the vector is tested
    against) reset on `level`, and its first observation."""
    env = MiniGridObs(MazeGridEnv(level.width, level.height, None, default_max_steps(level.width, level.height)))
    obs, _ = env.reset(options={"level": level})
    return env, obs


def test_the_grid_is_the_level_with_an_outer_wall():
    level = MazeLevel.from_text(LEVEL_TEXT)
    env, obs = _env_with(level)
    grid = env.unwrapped.grid
    assert (grid.width, grid.height) == (8, 6)
    for x in range(8):
        for y in range(6):
            cell = grid.get(x, y)
            if x in (0, 7) or y in (0, 5) or level.walls[y - 1, x - 1]:  # the outer wall, then the level's
                assert isinstance(cell, Wall), (x, y)
            elif (x - 1, y - 1) == level.goal:
                assert isinstance(cell, Goal), (x, y)
            else:
                assert cell is None, (x, y)
    assert tuple(int(v) for v in env.unwrapped.agent_pos) == (1, 1) and env.unwrapped.agent_dir == 0
    assert level.goal == (0, 3) and isinstance(grid.get(1, 4), Goal)
    assert obs.shape == (7, 7, 4) and obs.dtype == np.uint8 and (obs[..., 3] == 0).all()


def test_a_wall_stops_the_agent_and_the_goal_gives_minigrids_reward_and_success():
    env, _ = _env_with(MazeLevel.from_text(LEVEL_TEXT))
    _, reward, terminated, truncated, _ = env.step(FORWARD)  # into the wall at (1, 0)
    assert tuple(int(v) for v in env.unwrapped.agent_pos) == (1, 1) and reward == 0 and not terminated
    env.step(RIGHT)  # now facing down
    for expected_y in (2, 3):
        env.step(FORWARD)
        assert tuple(int(v) for v in env.unwrapped.agent_pos) == (1, expected_y)
    _, reward, terminated, truncated, info = env.step(FORWARD)  # onto the goal at inner (0, 3): the 5th step
    max_steps = env.unwrapped.max_steps
    assert max_steps == default_max_steps(6, 4)
    assert terminated and not truncated and info["is_success"]
    assert reward == pytest.approx(1 - 0.9 * 5 / max_steps)


def test_the_time_limit_is_dcds_at_13x13_and_max_episode_steps_replaces_it():
    assert default_max_steps(13, 13) == 250
    assert _vector().max_steps == 250
    vec = _vector(max_episode_steps=3)
    vec.reset()
    for _ in range(2):
        step = vec.step(np.array([LEFT]))
        assert not step.truncated[0]
    step = vec.step(np.array([LEFT]))
    assert step.truncated[0] and not step.terminated[0] and step.success == {0: False}


def test_the_same_seed_is_the_same_level_and_blocks_set_its_walls():
    a, b = _vector(level_ids=(7, 8)), _vector(level_ids=(7, 7))
    obs_a, obs_b = a.reset(), b.reset()
    level = a.levels[0]
    assert level == b.levels[0] == b.levels[1] == generate(7, 13, 13, (25, 25))
    assert level.num_walls == 25 and a.levels[1] != level
    np.testing.assert_array_equal(obs_a[0], obs_b[0])
    assert a.current_levels().tolist() == [7, 8]
    wide = _vector(level_ids=(3,), maze_blocks="0-60")
    wide.reset()
    assert wide.levels[0] == generate(3, 13, 13, (0, 60))


def test_a_suite_id_plays_the_suite_maze_and_renders():
    name = suite_names()[0]
    vec = _vector(level_ids=(suite_level_id(name),))
    vec.reset()
    assert vec.levels[0] == suite_level(name)
    assert vec.current_levels().tolist() == [suite_level_id(name)]
    frame = level_frame(EnvConfig(id="maze:13x13"), suite_level_id(name))
    assert frame.shape == (15 * 32, 15 * 32, 3) and frame.dtype == np.uint8


@pytest.mark.parametrize("level_id", [EDITED_ID_BASE, SUITE_ID_BASE + 10_000])
def test_an_unknown_reserved_id_is_refused_naming_it(level_id):
    with pytest.raises(ValueError, match=f"unknown level id {level_id}"):
        _vector(level_ids=(level_id,)).reset()


@pytest.mark.parametrize("env_id", ["maze:13", "maze:0x5", "maze:axb", "maze:13x13x2", "maze:2x13", "maze:13x64"])
def test_bad_maze_names_say_the_form(env_id):
    assert family_of(EnvConfig(id=env_id)).__name__ == "levelray.families.maze"
    with pytest.raises(ValueError, match=r"maze:<W>x<H>"):
        env_spec(EnvConfig(id=env_id))


def test_the_spec_preset_and_network_are_minigrids():
    spec = env_spec(EnvConfig(id="maze:9x11"))
    assert spec == EnvSpec((7, 7, 4), "uint8", True, num_actions=7, obs_encoding=MINIGRID_OBS)
    cfg = apply_preset(replace_paths(RunConfig(), {"env.id": "maze:13x13"}), {"env.id"})
    assert cfg.preset == "minigrid" and cfg.learner.model == "minigrid_cnn"
    assert isinstance(build_model(spec, "auto"), MiniGridNet)


def test_maze_blocks_is_checked_with_the_config():
    assert from_dict({"env": {"maze_blocks": 25}}).env.maze_blocks == "25"  # a YAML number is its text
    assert replace_paths(RunConfig(), {"env.maze_blocks": "0-60"}).env.maze_blocks == "0-60"
    for bad in ("lots", "60-0", "-3", "1-2-3"):
        with pytest.raises(ConfigError, match="env.maze_blocks: --maze-blocks"):
            replace_paths(RunConfig(), {"env.maze_blocks": bad})
        with pytest.raises(ConfigError, match="--maze-blocks"):
            validate(RunConfig(env=EnvConfig(maze_blocks=bad)))  # built in Python: refused by the check


def test_bad_names_and_blocks_stop_train_before_anything_runs(tmp_path, capsys):
    for flags, says in ((["--env", "maze:13"], "maze:<W>x<H>"),
                        (["--env", "maze:13x13", "--maze-blocks", "9-3"], "--maze-blocks")):
        with pytest.raises(SystemExit):
            main(["train", *TINY_INLINE_RUN, *flags, "--run-dir", str(tmp_path / "run")])
        assert says in capsys.readouterr().err
        assert not (tmp_path / "run").exists()


def test_maze_level_sets_are_planned_and_refused_outside_a_maze_run():
    assert parse_level_sets("maze-suite,maze-25,maze-suite:spiral") == ["maze-suite", "maze-25", "maze-suite:spiral"]
    with pytest.raises(ConfigError, match="no maze 'nope'.*spiral"):
        parse_level_sets("maze-suite:nope")
    cfg = replace_paths(RunConfig(), {"env.id": "maze:13x13", "env.maze_blocks": "0-60", "env.num_levels": 100})
    plan = plan_level_sets(cfg, ["maze-suite", "maze-suite:spiral", "maze-25", "maze-50"], episodes=5)
    assert [s.name for s in plan] == [*suite_names(), "maze-25", "maze-50"]  # spiral once
    for s in plan[:-2]:  # played with DCD's time limit for test mazes (450 at 13x13)
        assert s.suite and s.seeds.tolist() == [suite_level_id(s.name)]
        assert s.env == replace_paths(cfg, {"env.max_episode_steps": 450}).env
    for s, blocks in zip(plan[-2:], ("25", "50"), strict=True):
        assert not s.suite and s.env.maze_blocks == blocks and s.env.id == "maze:13x13"
        assert len(s.seeds) == 5 and (s.seeds >= 100).all()  # outside the training levels [0, 100)
    assert plan[-2].seeds.tolist() != plan[-1].seeds.tolist()
    for env_id in ("CartPole-v1", "minigrid:DoorKey-5x5"):
        other = replace_paths(RunConfig(), {"env.id": env_id})
        with pytest.raises(ConfigError, match=f"need a maze run.*{env_id}"):
            plan_level_sets(other, ["train", "maze-25"], episodes=2)
    with pytest.raises(ConfigError, match="suite's mazes are 13x13.*maze:9x9"):
        plan_level_sets(replace_paths(cfg, {"env.id": "maze:9x9"}), ["maze-suite"], episodes=2)
    assert [s.name for s in plan_level_sets(replace_paths(cfg, {"env.id": "maze:9x9"}), ["maze-25"], 2)] == ["maze-25"]


def test_the_suite_summary_is_the_mean_over_mazes():
    results = {"a": {"success_rate": 1.0, "return_mean": 0.8}, "b": {"success_rate": 0.5, "return_mean": 0.2},
               "maze-25": {"success_rate": 0.0, "return_mean": 0.0}}
    assert maze_suite_summary(results, ["a", "b"]) == {"success_rate": 0.75, "return_mean": 0.5, "mazes": ["a", "b"]}


def test_train_a_maze_and_evaluate_on_the_suite_and_held_out_levels(tmp_path, capsys, one_thread):
    run = tmp_path / "maze"
    assert main(["train", *TINY_INLINE_RUN, "--env", "maze:13x13", "--maze-blocks", "0-60", "--total-steps", "3000",
                 "--envs-per-actor", "4", "--unroll-length", "20", "--tensorboard", "false",
                 "--run-dir", str(run)]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(run), "--levels", "maze-suite,maze-25", "--episodes", "2", "--num-envs", "2",
                 "--json"]) == 0
    out = json_output(capsys.readouterr().out)
    assert out["env"] == "maze:13x13" and out["env_steps"] >= 3000
    results = out["results"]
    assert list(results) == [*suite_names(), "maze-25"]
    for name in suite_names():
        r = results[name]
        assert r["episodes"] == 2 and r["seeds"] == [suite_level_id(name)] * 2
        assert 0.0 <= r["success_rate"] <= 1.0 and all(0.0 <= x < 1.0 for x in r["returns"])
    suite = out["maze_suite"]
    assert suite["mazes"] == suite_names()
    assert suite["success_rate"] == pytest.approx(np.mean([results[n]["success_rate"] for n in suite_names()]))
    assert suite["return_mean"] == pytest.approx(np.mean([results[n]["return_mean"] for n in suite_names()]))
    assert all(s >= 200 for s in results["maze-25"]["seeds"])  # the maze preset keeps 200 training levels
    table = format_result(out)
    assert f"maze {suite_names()[0]}" in table and "25 blocks (held out)" in table
    assert f"suite mean, {len(suite_names())} mazes" in table
    with pytest.raises(SystemExit):
        main(["evaluate", str(run), "--levels", "maze-suite:nope"])
    assert "no maze 'nope'" in capsys.readouterr().err
