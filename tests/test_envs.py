"""Env vectors: procgen level control by state injection, gymnasium seeds and truncation."""

import itertools

import numpy as np
import pytest

from levelray.actors.envs import make_env_vector
from levelray.contracts.config import EnvConfig


def test_procgen_plays_the_chosen_levels_and_reports_them():
    from procgen import ProcgenGym3Env

    chosen = itertools.cycle([17, 3, 150, 3, 42, 99])
    asked: dict[int, list[int]] = {k: [] for k in range(4)}

    def source(k):
        seed = next(chosen)
        asked[k].append(seed)
        return seed

    cfg = EnvConfig(id="procgen:coinrun", num_levels=200, start_level=0)
    vec = make_env_vector(cfg, 4, source, seed=1)
    obs = vec.reset()
    assert obs.shape == (4, 64, 64, 3) and obs.dtype == np.uint8
    assert vec.current_levels().tolist() == [a[-1] for a in asked.values()]
    # Slot 0 shows exactly what a fresh env built on that level shows.
    fresh = ProcgenGym3Env(num=1, env_name="coinrun", num_levels=1, start_level=asked[0][-1], distribution_mode="easy")
    np.testing.assert_array_equal(obs[0], fresh.observe()[1]["rgb"][0])
    rng = np.random.default_rng(0)
    episodes_ended = 0
    for _ in range(600):
        levels_before = vec.current_levels()
        step = vec.step(rng.integers(0, 15, size=4))
        assert step.level_seeds.tolist() == levels_before.tolist()
        ended = np.flatnonzero(step.terminated)
        episodes_ended += len(ended)
        for k in ended:
            assert vec.current_levels()[k] == asked[k][-1]
    assert episodes_ended > 0
    played = set(itertools.chain.from_iterable(asked.values()))
    assert played <= {17, 3, 150, 42, 99}
    assert vec.fresh_level_builds <= 5  # start states are cached by seed


def test_procgen_same_level_same_trajectory():
    cfg = EnvConfig(id="procgen:bigfish", num_levels=10)
    a = make_env_vector(cfg, 2, lambda k: 7, seed=1)
    b = make_env_vector(cfg, 3, lambda k: 7, seed=2)
    oa, ob = a.reset(), b.reset()
    np.testing.assert_array_equal(oa[1], ob[2])
    for t in range(30):
        sa = a.step(np.full(2, t % 15))
        sb = b.step(np.full(3, t % 15))
        np.testing.assert_array_equal(sa.obs[1], sb.obs[2])


def test_gymnasium_level_is_the_reset_seed():
    cfg = EnvConfig(id="CartPole-v1", num_levels=0)
    a = make_env_vector(cfg, 2, lambda k: 123)
    b = make_env_vector(cfg, 1, lambda k: 123)
    np.testing.assert_array_equal(a.reset()[0], b.reset()[0])
    assert a.current_levels().tolist() == [123, 123]
    c = make_env_vector(cfg, 1, lambda k: 124)
    assert not np.array_equal(c.reset()[0], b.reset()[0])


def test_gymnasium_truncation_keeps_the_final_observation():
    cfg = EnvConfig(id="CartPole-v1", num_levels=5, start_level=10, max_episode_steps=4)
    vec = make_env_vector(cfg, 2, None, seed=0)
    vec.reset()
    assert set(vec.current_levels().tolist()) <= set(range(10, 15))
    steps = [vec.step(np.zeros(2, dtype=np.int64)) for _ in range(4)]
    # Pushing left 4 times cannot end CartPole early: the time limit truncates at step 4.
    assert not any(s.terminated.any() for s in steps)
    assert steps[-1].truncated.all() and not any(s.truncated.any() for s in steps[:-1])
    assert set(steps[-1].final_obs) == {0, 1}
    assert not np.array_equal(steps[-1].final_obs[0], steps[-1].obs[0])  # obs is already the new episode


def test_continuous_gymnasium_env():
    vec = make_env_vector(EnvConfig(id="Pendulum-v1", num_levels=0), 2)
    assert not vec.spec.discrete and vec.spec.action_dim == 1
    vec.reset()
    step = vec.step(np.array([[5.0], [-5.0]], dtype=np.float32))  # clipped to [-2, 2] inside
    assert step.obs.shape == (2, 3) and step.obs.dtype == np.float32


@pytest.mark.parametrize(
    "env_id, match",
    [("CartPol-v1", "Did you mean CartPole-v1"), ("procgen:bigfsh", "procgen:bigfish"), ("nope", "Available: procgen")],
)
def test_unknown_env_id_lists_what_exists(env_id, match):
    with pytest.raises(ValueError, match=match):
        make_env_vector(EnvConfig(id=env_id), 1)


@pytest.mark.parametrize("max_episode_steps", [None, 30])
def test_native_cartpole_vector_plays_exactly_the_looped_envs_episodes(max_episode_steps):
    """CartPoleVector (one NumPy array for K envs) against GymnasiumVector (K gymnasium envs in a loop), the
    same levels and actions: every observation, reward, end flag, level and final observation is equal, over
    hundreds of episode ends (with a short time limit, truncations too)."""
    from levelray.contracts.config import EnvConfig
    from levelray.families.gymnasium_env import CartPoleVector, GymnasiumVector

    cfg = dict(id="CartPole-v1", num_levels=50, max_episode_steps=max_episode_steps)
    native = make_env_vector(EnvConfig(**cfg), 6, seed=3)
    looped = make_env_vector(EnvConfig(**cfg, native_vector=False), 6, seed=3)
    assert isinstance(native, CartPoleVector) and isinstance(looped, GymnasiumVector)
    assert native.spec == looped.spec
    np.testing.assert_array_equal(native.reset(), looped.reset())
    rng = np.random.default_rng(0)
    ends = truncations = 0
    for _ in range(2000):
        actions = rng.integers(0, 2, 6)
        a, b = native.step(actions), looped.step(actions)
        for name in ("obs", "rewards", "terminated", "truncated", "level_seeds"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        assert a.obs.dtype == b.obs.dtype == np.float32 and a.rewards.dtype == np.float32
        assert a.final_obs.keys() == b.final_obs.keys()
        for k in a.final_obs:
            np.testing.assert_array_equal(a.final_obs[k], b.final_obs[k])
        ends += int(a.terminated.sum() + a.truncated.sum())
        truncations += int(a.truncated.sum())
    assert ends > 300 and (truncations > 50 if max_episode_steps else True)
    np.testing.assert_array_equal(native.current_levels(), looped.current_levels())


def test_procgen_vector_close_frees_the_c_env_itself():
    """`close()` closes procgen's C env at once, so the garbage collector's `CEnv.__del__` (which can deadlock
    on cffi's library lock) finds nothing left to do."""
    vec = make_env_vector(EnvConfig(id="procgen:coinrun", num_levels=10, start_level=0), 2, seed=0)
    vec.reset()
    assert not any(part.closed for part in vec.parts)
    vec.close()
    assert all(part.closed for part in vec.parts)


def test_a_procgen_vector_of_several_parts_plays_each_env_as_alone():
    """42 envs are procgen parts of `PART_SIZE`, the last one smaller: an env in the first, a middle and the last part,
    levels injected as its episodes end, steps exactly as a 1-env vector given the same levels and actions (what a
    part's state swap touches is its own)."""
    from levelray.families.procgen_env import PART_SIZE

    K = 42
    assert PART_SIZE < K and K % PART_SIZE
    levels = {k: itertools.cycle([(7 * k) % 50, (7 * k + 3) % 50]) for k in range(K)}
    cfg = EnvConfig(id="procgen:bigfish", num_levels=50)
    vec = make_env_vector(cfg, K, lambda k: next(levels[k]), seed=1)
    levels_alone = {k: itertools.cycle([(7 * k) % 50, (7 * k + 3) % 50]) for k in (0, 17, 41)}
    alone = {k: make_env_vector(cfg, 1, lambda _, k=k: next(levels_alone[k]), seed=2) for k in (0, 17, 41)}
    obs = vec.reset()
    for k, one in alone.items():
        np.testing.assert_array_equal(obs[k], one.reset()[0])
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(300):
        actions = rng.integers(0, 15, size=K)
        step = vec.step(actions)
        ends += int(step.terminated.sum())
        for k, one in alone.items():
            own = one.step(actions[k:k + 1])
            np.testing.assert_array_equal(step.obs[k], own.obs[0])
            assert step.rewards[k] == own.rewards[0] and step.terminated[k] == own.terminated[0]
            assert step.level_seeds[k] == own.level_seeds[0]
    assert ends > 0 and vec.injections >= K + ends
    vec.close()
    assert all(part.closed for part in vec.parts)
