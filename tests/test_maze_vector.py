"""The maze family's arrays (`families.maze.env.MazeVector`, stepped by `families.maze.step`) against the MiniGrid-built
env they replace (`MiniGridObs` around `families.maze.grid.MazeGridEnv`, stepped one env at a time as every gymnasium
env is): the same observations, rewards, ends, levels and frames at every step, over generated, edited and suite
levels and across auto-resets; and the refusals (malformed levels naming the field, actions outside 0..6)."""

from __future__ import annotations

import numpy as np
import pytest

from levelray.actors.env_vector import LevelDraws
from levelray.actors.envs import make_env_vector
from levelray.contracts.config import EnvConfig
from levelray.families.gymnasium_env import GymnasiumVector
from levelray.families.maze.editor import edit_maze
from levelray.families.maze.env import default_max_steps
from levelray.families.maze.grid import MazeGridEnv
from levelray.families.maze.level import (
    EDITED_ID_BASE,
    MazeLevel,
    level_for_id,
    parse_blocks,
    suite_level_id,
    suite_names,
)
from levelray.families.minigrid.obs import MiniGridObs

LEFT, RIGHT, FORWARD = 0, 1, 2


def reference_vector(cfg: EnvConfig, num_envs: int, source, seed: int = 0, render: bool = False) -> GymnasiumVector:
    """The MiniGrid-built maze family: each env a `MiniGridObs(MazeGridEnv)` that resolves its level id as the
    family does (the source's encodings first, else `level_for_id`)."""
    width, height = (int(n) for n in cfg.id.split(":")[1].split("x"))
    blocks = parse_blocks(cfg.maze_blocks)
    max_steps = cfg.max_episode_steps or default_max_steps(width, height)

    def resolve(level_id: int) -> MazeLevel:
        data = getattr(source, "encodings", {}).get(level_id)
        return level_for_id(level_id, width, height, blocks) if data is None else MazeLevel.decode(data)

    def make_env():
        return MiniGridObs(MazeGridEnv(width, height, resolve, max_steps, render_mode="rgb_array" if render else None))

    return GymnasiumVector(cfg.id, num_envs, cfg, source, seed, make_env=make_env)


class MixedLevels(LevelDraws):
    """Generated seeds, suite mazes (at 13x13) and edited levels (ACCEL's edits of those, held only as data, under
    fresh ids), in an order drawn from `seed`: two sources of the same seed hand out the same levels."""

    def __init__(self, num_envs: int, cfg: EnvConfig, seed: int):
        super().__init__(num_envs)
        self.rng = np.random.default_rng(seed)
        self.width, self.height = (int(n) for n in cfg.id.split(":")[1].split("x"))
        self.blocks = parse_blocks(cfg.maze_blocks)
        self.suite = [suite_level_id(n) for n in suite_names()] if (self.width, self.height) == (13, 13) else []
        self.edited = 0
        self.kinds = {"generated": 0, "suite": 0, "edited": 0}

    def next_level(self) -> tuple[int, bool]:
        draw = self.rng.random()
        seed = int(self.rng.integers(1000))
        if draw < 0.4 or (draw < 0.6 and not self.suite):
            self.kinds["generated"] += 1
            return seed, False
        if draw < 0.6:
            self.kinds["suite"] += 1
            return self.suite[seed % len(self.suite)], True
        parent_id = self.suite[seed % len(self.suite)] if self.suite and draw < 0.75 else seed
        parent = level_for_id(parent_id, self.width, self.height, self.blocks)
        child = edit_maze(parent, int(self.rng.integers(1, 20)), self.rng)
        level_id = EDITED_ID_BASE + self.edited
        self.edited += 1
        self.remember({level_id: child.encode()}, ())
        self.kinds["edited"] += 1
        return level_id, True


def _random_actions(obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Any of the 7 actions, uniformly, for half the envs; forward for the others where the cell ahead (view cell
    (3, 5)) is not a wall, else a turn: a walk that reaches goals within a time limit now and then."""
    num_envs = obs.shape[0]
    free_ahead = obs[:, 3, 5, 0] != 2
    walk = np.where(free_ahead, FORWARD, rng.integers(0, 2, num_envs))
    return np.where(rng.random(num_envs) < 0.5, rng.integers(0, 7, num_envs), walk)


def _same_step(new, old, t: int) -> None:
    for name in ("obs", "rewards", "terminated", "truncated", "level_seeds"):
        a, b = getattr(new, name), getattr(old, name)
        assert a.dtype == b.dtype and a.shape == b.shape, (t, name, a.dtype, b.dtype)
        assert np.array_equal(a, b), (t, name, np.argwhere(a != b)[:5].tolist())
    assert new.success == old.success, (t, new.success, old.success)
    assert new.final_obs.keys() == old.final_obs.keys(), t
    for k, o in new.final_obs.items():
        assert np.array_equal(o, old.final_obs[k]), (t, k)


@pytest.mark.parametrize("env_id, blocks, max_steps, num_envs, steps", [
    ("maze:13x13", "0-60", None, 8, 1300),  # DCD's size and limit, 10,400 env steps: generated, suite, edited
    ("maze:9x6", "0-20", 24, 6, 500),  # not square (a swapped x and y shows), short episodes: many resets
    ("maze:3x3", "0-7", 12, 4, 400),  # the smallest maze: the view reaches far past the grid
])
def test_the_arrays_step_exactly_as_minigrid_across_auto_resets(env_id, blocks, max_steps, num_envs, steps):
    """Random actions (`_random_actions`) on both vectors, `num_envs x steps` env steps (15,400 in all): every
    step is identical."""
    cfg = EnvConfig(id=env_id, maze_blocks=blocks, max_episode_steps=max_steps)
    new_source, old_source = MixedLevels(num_envs, cfg, 5), MixedLevels(num_envs, cfg, 5)
    new = make_env_vector(cfg, num_envs, new_source, seed=3)
    old = reference_vector(cfg, num_envs, old_source, seed=3)
    obs = new.reset()
    assert np.array_equal(obs, old.reset())
    rng = np.random.default_rng(11)
    ends = {"terminated": 0, "truncated": 0}
    for t in range(steps):
        actions = _random_actions(obs, rng)
        new_step, old_step = new.step(actions), old.step(actions)
        obs = new_step.obs
        _same_step(new_step, old_step, t)
        assert np.array_equal(new.current_levels(), old.current_levels())
        ends["terminated"] += int(new_step.terminated.sum())
        ends["truncated"] += int(new_step.truncated.sum())
    assert ends["terminated"] >= 5 and ends["truncated"] >= 5, ends
    assert all(n >= 3 for kind, n in new_source.kinds.items() if kind != "suite" or new_source.suite), new_source.kinds


def test_a_level_drawn_from_the_training_set_is_the_same_without_a_source():
    """Without a level source both draw uniformly from the training levels with the vector's seed."""
    cfg = EnvConfig(id="maze:13x13", num_levels=20)
    new, old = make_env_vector(cfg, 5, None, seed=9), reference_vector(cfg, 5, None, seed=9)
    assert np.array_equal(new.reset(), old.reset())
    rng = np.random.default_rng(2)
    for t in range(600):
        actions = np.where(rng.random(5) < 0.5, FORWARD, rng.integers(0, 7, 5))
        _same_step(new.step(actions), old.step(actions), t)


def test_frames_are_minigrids():
    """A rendering vector draws every step's frame exactly as the MiniGrid-built env draws it."""
    cfg = EnvConfig(id="maze:13x13", maze_blocks="20", max_episode_steps=15)
    new = make_env_vector(cfg, 1, MixedLevels(1, cfg, 1), render=True)
    old = reference_vector(cfg, 1, MixedLevels(1, cfg, 1), render=True)
    new.reset(), old.reset()
    assert new.render_fps == old.envs[0].metadata["render_fps"] == 10  # MiniGrid's pace
    rng = np.random.default_rng(0)
    for t in range(40):  # past two time limits: the frames of later levels too
        assert np.array_equal(new.render(0), old.render(0)), t
        actions = rng.integers(0, 3, 1)
        _same_step(new.step(actions), old.step(actions), t)


def test_walking_to_the_goal_in_the_vector():
    """The agent at (0, 0) faces a wall: forward does nothing, then down three cells and left onto the goal."""
    level = MazeLevel.from_text(">#....\n.#.##.\n.#..#.\nG...#.\n")

    class Once(LevelDraws):
        def next_level(self):
            self.remember({EDITED_ID_BASE: level.encode()})
            return EDITED_ID_BASE, False

    vec = make_env_vector(EnvConfig(id="maze:6x4"), 1, Once(1))
    vec.reset()
    for action, cell in ((FORWARD, (0, 0)), (RIGHT, (0, 0)), (FORWARD, (0, 1)), (FORWARD, (0, 2))):
        step = vec.step(np.array([action]))
        assert tuple(vec.state[0, :2] - 7) == cell and not step.terminated[0] and step.rewards[0] == 0
    step = vec.step(np.array([FORWARD]))
    assert step.terminated[0] and not step.truncated[0] and step.success == {0: True}
    assert step.rewards[0] == np.float32(1 - 0.9 * (5 / default_max_steps(6, 4)))
    assert tuple(vec.state[0, :2] - 7) == level.agent and vec.state[0, 3] == 0  # started again


class Cycle(LevelDraws):
    """Hands out `levels` in turn (held as data under edited ids), whichever env asks."""

    def __init__(self, num_envs: int, levels: list[MazeLevel]):
        super().__init__(num_envs)
        self.levels, self.drawn = levels, 0

    def next_level(self) -> tuple[int, bool]:
        level_id = EDITED_ID_BASE + self.drawn % len(self.levels)
        self.remember({level_id: self.levels[self.drawn % len(self.levels)].encode()})
        self.drawn += 1
        return level_id, True


def test_a_mirrored_maze_steps_as_the_mirror_image_of_the_original():
    """`MazeLevel.mirrored` makes a maze exactly as hard: with left and right turns swapped, every view is the
    original's flipped left to right (the direction channel right <-> left), and rewards and ends are the same, over
    generated and suite mazes and across resets. So a policy's gap between a maze and its mirror is its own
    handedness, not the maze's."""
    cfg = EnvConfig(id="maze:13x13")
    levels = [level_for_id(seed, 13, 13, (0, 60)) for seed in range(6)] + [
        level_for_id(suite_level_id(name), 13, 13, (0, 60)) for name in suite_names()]
    num_envs, rng = 8, np.random.default_rng(5)
    original = make_env_vector(cfg, num_envs, Cycle(num_envs, levels))
    mirror = make_env_vector(cfg, num_envs, Cycle(num_envs, [level.mirrored() for level in levels]))
    obs, obs_m = original.reset(), mirror.reset()
    flip_dir = np.array([2, 1, 0, 3], dtype=np.uint8)
    goals = 0
    for t in range(1500):
        assert np.array_equal(obs_m[:, ::-1, :, :3], obs[:, :, :, :3]), t
        assert np.array_equal(obs_m[:, ::-1, :, 3], flip_dir[obs[:, :, :, 3]]), t
        actions = _random_actions(obs, rng)
        step, step_m = original.step(actions), mirror.step(np.where(actions < 2, 1 - actions, actions))
        for name in ("rewards", "terminated", "truncated"):
            assert np.array_equal(getattr(step, name), getattr(step_m, name)), (t, name)
        goals += int(step.terminated.sum())
        obs, obs_m = step.obs, step_m.obs
    assert goals >= 5  # goals were reached: the check covered ends and resets, not only walls


@pytest.mark.parametrize("make_data, field", [
    (lambda lv: bytes((1, 5, 5, 0, 0, 0, 4, 4)) + np.packbits(np.ones(25, bool)).tobytes(), "MazeLevel.walls must "
     "leave at least 2 free cells"),
    (lambda lv: bytes((1, 5, 5, 1, 1, 0, 4, 4)) + np.packbits(np.eye(5, dtype=bool).reshape(-1)).tobytes(),
     "MazeLevel.agent \\(1, 1\\) is on a wall"),
    (lambda lv: lv.encode()[:6] + bytes((5, 2)) + lv.encode()[8:], "MazeLevel.goal must be inside the 5x5 inner grid"),
])
def test_a_malformed_level_is_refused_naming_the_field(make_data, field):
    empty = MazeLevel(5, 5, np.zeros((5, 5), bool), (0, 0), 0, (4, 4))

    class Bad(LevelDraws):
        def next_level(self):
            self.remember({EDITED_ID_BASE: make_data(empty)})
            return EDITED_ID_BASE, False

    with pytest.raises(ValueError, match=field):
        make_env_vector(EnvConfig(id="maze:5x5"), 1, Bad(1)).reset()
    with pytest.raises(ValueError, match="MazeLevel.walls must leave at least 2 free cells.*got 1"):
        MazeLevel(5, 5, ~np.eye(1, 25, 3, dtype=bool).reshape(5, 5), (3, 0), 0, (3, 0))


def test_a_level_of_another_size_and_bad_actions_are_refused():
    class Small(LevelDraws):
        def next_level(self):
            self.remember({EDITED_ID_BASE: MazeLevel(5, 5, np.zeros((5, 5), bool), (0, 0), 0, (4, 4)).encode()})
            return EDITED_ID_BASE, False

    with pytest.raises(ValueError, match="is 5x5, this maze env is maze:13x13"):
        make_env_vector(EnvConfig(id="maze:13x13"), 1, Small(1)).reset()
    vec = make_env_vector(EnvConfig(id="maze:13x13"), 3, lambda k: k)
    vec.reset()
    before = vec.state.copy()
    with pytest.raises(ValueError, match="env 1's action 7 is not one of MiniGrid's 7 actions"):
        vec.step(np.array([2, 7, 2]))
    assert np.array_equal(vec.state, before)  # nothing stepped
    with pytest.raises(ValueError, match=r"actions must be \[3\] whole numbers in 0..6, got float64"):
        vec.step(np.array([2.0, 1.5, 0.0]))
    with pytest.raises(ValueError, match=r"actions must be \[3\] whole numbers"):
        vec.step(np.array([1, 2]))
    vec.step(np.array([2.0, 1.0, 0.0]))  # whole numbers of any dtype: MiniGrid compares actions by value
    vec.step(np.array([2, 1, 0], dtype=np.uint8))
