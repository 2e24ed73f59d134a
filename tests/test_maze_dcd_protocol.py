"""The maze protocol as DCD's (`facebookresearch/dcd`): its agent's view (`--maze-view dcd`: the 5x5 cells ahead seen
through walls) against a plain slice-and-rotate of the grid written here as DCD's MultiGrid computes it, and against
MiniGrid's own env with DCD's view settings step for step; the network on it, through a short training run; and the
evaluation time limit (the suite and maze files at DCD's test limit, `--max-episode-steps` replacing every set's,
the limit in each result; the sweep spec's `max_episode_steps`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from levelray.actors.env_vector import WithEncodings
from levelray.actors.envs import env_spec, make_env_vector
from levelray.contracts.config import ConfigError, EnvConfig, RunConfig, replace_paths
from levelray.contracts.families import episode_limit
from levelray.contracts.spec import MINIGRID_OBS, EnvSpec
from levelray.deploy.cli import main
from levelray.deploy.evaluation.evaluate import format_result
from levelray.deploy.evaluation.level_sets import plan_level_sets
from levelray.deploy.sweep.spec import Evaluation, _evaluation
from levelray.families.gymnasium_env import GymnasiumVector
from levelray.families.maze.env import evaluation_max_steps
from levelray.families.maze.grid import MazeGridEnv
from levelray.families.maze.level import MazeLevel, generate, suite_level
from levelray.families.minigrid.obs import MiniGridObs
from levelray.policy.models import MiniGridNet, build_model
from tests.support import TINY_INLINE_RUN, json_output

EMPTY, WALL, GOAL = 1, 2, 8  # MiniGrid's object indices
COLOUR = {EMPTY: 0, WALL: 5, GOAL: 1}  # MiniGrid's colour indices: none, grey, green


def dcd_view(level: MazeLevel, x: int, y: int, d: int) -> np.ndarray:
    """DCD's observation of an agent at inner cell `(x, y)` facing `d`, computed as its MultiGrid does it
    (`gen_obs_grid`): the 5x5 square of `get_view_exts`, cells outside the grid walls, rotated left `d + 1` times,
    the agent's own cell emptied, every cell seen (`see_through_walls=True`); each cell `(object, colour, state)`,
    and the direction (DCD's separate input) as channel 3. Arrays are indexed `[x, y]`, as MiniGrid's."""
    width, height = level.width + 2, level.height + 2
    grid = np.full((width, height), EMPTY)
    grid[0, :] = grid[-1, :] = grid[:, 0] = grid[:, -1] = WALL
    grid[1:-1, 1:-1][level.walls.T] = WALL
    grid[level.goal[0] + 1, level.goal[1] + 1] = GOAL
    ax, ay = x + 1, y + 1
    top_x, top_y = {0: (ax, ay - 2), 1: (ax - 2, ay), 2: (ax - 4, ay - 2), 3: (ax - 2, ay - 4)}[d]
    view = np.full((5, 5), WALL)
    for i in range(5):
        for j in range(5):
            if 0 <= top_x + i < width and 0 <= top_y + j < height:
                view[i, j] = grid[top_x + i, top_y + j]
    for _ in range(d + 1):  # MiniGrid's Grid.rotate_left: new[j, height - 1 - i] = old[i, j]
        turned = np.empty_like(view)
        for i in range(5):
            for j in range(5):
                turned[j, 4 - i] = view[i, j]
        view = turned
    view[2, 4] = EMPTY
    out = np.zeros((5, 5, 4), dtype=np.uint8)
    out[..., 0] = view
    out[..., 1] = np.vectorize(COLOUR.get)(view)
    out[..., 3] = d
    return out


def _random_level(rng: np.random.Generator, width: int, height: int) -> MazeLevel:
    level = generate(int(rng.integers(1 << 30)), width, height, (0, width * height // 2))
    return MazeLevel(width, height, level.walls, level.agent, int(rng.integers(4)), level.goal)


@pytest.mark.parametrize("width, height", [(13, 13), (9, 6), (3, 3), (4, 11)])
def test_the_dcd_view_is_the_grid_seen_through_walls(width, height):
    """64 random levels (random walls, start cell and direction) per size, walked with random actions: after the
    reset and every step, each env's view is `dcd_view` of where its agent stands."""
    rng = np.random.default_rng(width * 100 + height)
    levels = {1000 + k: _random_level(rng, width, height) for k in range(64)}
    ids = list(levels)
    source = WithEncodings(lambda k: ids[k], {i: level.encode() for i, level in levels.items()})
    vec = make_env_vector(EnvConfig(id=f"maze:{width}x{height}", maze_view="dcd"), 64, source)
    obs = vec.reset()
    assert obs.shape == (64, 5, 5, 4) and obs.dtype == np.uint8
    pad = 7  # the vector's state counts the outer wall and its padding (`families.maze.step.PAD` + 1)
    for t in range(40):
        for k in range(64):
            x, y, d, _ = vec.state[k].tolist()
            assert np.array_equal(obs[k], dcd_view(vec.levels[k], x - pad, y - pad, d)), (t, k)
        obs = vec.step(rng.integers(0, 3, 64)).obs  # left, right, forward
    seen = obs[..., 0]
    assert (seen == WALL).any() and (seen == EMPTY).any()


def test_the_dcd_view_steps_exactly_as_minigrids_env_with_dcds_view_settings():
    """MiniGrid's env with `agent_view_size=5, see_through_walls=True` (what DCD's maze passes its MultiGrid base)
    beside the arrays, random actions across auto-resets: identical observations, rewards, ends and frames."""
    cfg = EnvConfig(id="maze:9x6", maze_blocks="0-20", max_episode_steps=20, maze_view="dcd")
    new = make_env_vector(cfg, 4, lambda k: None, seed=3, render=True)

    def make_env():
        return MiniGridObs(MazeGridEnv(9, 6, lambda i: generate(i, 9, 6, (0, 20)), 20, view=5,
                                       see_through_walls=True, render_mode="rgb_array"))

    old = GymnasiumVector(cfg.id, 4, cfg, lambda k: None, 3, make_env=make_env)
    assert np.array_equal(new.reset(), old.reset())
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(300):
        if t % 50 == 0:  # the frame shades DCD's view: the 5x5 square ahead, walls and all
            assert np.array_equal(new.render(t % 4), old.render(t % 4)), t
        actions = np.where(rng.random(4) < 0.6, 2, rng.integers(0, 7, 4))
        a, b = new.step(actions), old.step(actions)
        for name in ("obs", "rewards", "terminated", "truncated", "level_seeds"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (t, name)
        assert a.success == b.success, t
        ends += int(a.terminated.sum() + a.truncated.sum())
    assert ends >= 20


def test_the_view_is_a_config_key_and_the_network_takes_it():
    assert env_spec(EnvConfig(id="maze:13x13", maze_view="dcd")) == EnvSpec((5, 5, 4), "uint8", True, num_actions=7,
                                                                            obs_encoding=MINIGRID_OBS)
    assert env_spec(EnvConfig(id="maze:13x13")).obs_shape == (7, 7, 4)
    with pytest.raises(ConfigError, match="env.maze_view: expected one of minigrid, dcd, got 'jaxued'"):
        replace_paths(RunConfig(), {"env.maze_view": "jaxued"})
    with pytest.raises(ValueError, match="--maze-view must be one of minigrid, dcd"):
        make_env_vector(EnvConfig(id="maze:5x5", maze_view="wide"), 1, lambda k: 3)
    spec = env_spec(EnvConfig(id="maze:13x13", maze_view="dcd"))
    for lstm_size in (0, 16):
        model = build_model(spec, "auto", lstm_size=lstm_size)
        assert isinstance(model, MiniGridNet)
        assert model.latent_dim == 3 * 3 * 16 + 8  # DCD's 3x3 convolution of 16 channels, and the direction
    obs = torch.as_tensor(make_env_vector(EnvConfig(id="maze:13x13", maze_view="dcd"), 3, lambda k: k).reset())
    logits, value = build_model(spec).forward(obs)
    assert logits.shape == (3, 7) and value.shape == (3,)
    with pytest.raises(ValueError, match="at least 3×3 cells, got 2×2"):
        MiniGridNet(EnvSpec((2, 2, 4), "uint8", True, num_actions=7, obs_encoding=MINIGRID_OBS))


def test_the_suite_and_maze_files_are_played_with_dcds_test_limit(tmp_path):
    assert evaluation_max_steps(13, 13) == 450 and evaluation_max_steps(9, 5) == 2 * 11 * 7
    cfg = replace_paths(RunConfig(), {"env.id": "maze:13x13", "env.num_levels": 100})
    (tmp_path / "mine.txt").write_text(suite_level("spiral").to_text())
    plan = plan_level_sets(cfg, ["train", "maze-suite:spiral", "maze-25", f"maze-file:{tmp_path}"], episodes=2)
    limits = {s.name: s.env.max_episode_steps for s in plan}
    assert limits == {"train": None, "spiral": 450, "maze-25": None, "mine": 450}
    assert {s.name: episode_limit(s.env) for s in plan} == {"train": 250, "spiral": 450, "maze-25": 250, "mine": 450}
    trained_long = replace_paths(cfg, {"env.max_episode_steps": 300})  # the run's limit is not the suite's
    assert [episode_limit(s.env) for s in plan_level_sets(trained_long, ["train", "maze-suite:spiral"], 2)] == [300,
                                                                                                             450]
    assert episode_limit(EnvConfig(id="CartPole-v1")) is None  # the env's own: gymnasium's, not reported
    assert episode_limit(EnvConfig(id="CartPole-v1", max_episode_steps=40)) == 40


def test_the_sweep_spec_takes_the_evaluation_limit():
    e = _evaluation({"levels": "maze-suite", "episodes": 5, "max_episode_steps": 250}, "evaluate")
    assert e == Evaluation(levels=("maze-suite",), episodes=5, max_episode_steps=250)
    assert e.to_dict()["max_episode_steps"] == 250
    assert "max_episode_steps" not in _evaluation({"levels": "test", "episodes": 5}, "evaluate").to_dict()
    for bad in (0, "450", True):
        with pytest.raises(ConfigError, match=r"evaluate\[1\].max_episode_steps must be an integer >= 1"):
            _evaluation({"levels": "test", "episodes": 5, "max_episode_steps": bad}, "evaluate[1]")


def test_train_on_dcds_view_and_evaluate_at_each_limit(tmp_path, capsys, one_thread):
    """A short run on DCD's view (feed-forward, and the checkpoint's network is the 5x5 one) evaluated by default
    (the suite's maze at 450 steps, maze-25 at the run's 250) and with `--max-episode-steps 30` for every set."""
    run = tmp_path / "run"
    assert main(["train", *TINY_INLINE_RUN, "--env", "maze:13x13", "--maze-view", "dcd", "--total-steps", "300",
                 "--tensorboard", "false", "--run-dir", str(run)]) == 0
    capsys.readouterr()
    levels = ["--levels", "maze-suite:spiral,maze-25", "--episodes", "2", "--num-envs", "2", "--json"]
    assert main(["evaluate", str(run), *levels]) == 0
    out = json_output(capsys.readouterr().out)
    assert {n: r["max_episode_steps"] for n, r in out["results"].items()} == {"spiral": 450, "maze-25": 250}
    assert "time limit: 450 steps (maze suite), 250 steps (maze-25)" in format_result(out)
    assert main(["evaluate", str(run), *levels, "--max-episode-steps", "30"]) == 0
    out = json_output(capsys.readouterr().out)
    for r in out["results"].values():
        assert r["max_episode_steps"] == 30 and r["length_mean"] <= 30
    with pytest.raises(SystemExit):
        main(["evaluate", str(run), "--levels", "test", "--max-episode-steps", "0"])
    assert "--max-episode-steps: must be an integer >= 1" in capsys.readouterr().err
