"""The inline backend's fast path (`actors.device_policy.DevicePolicy`) against the present path (`HostPolicy`, the
actor's own copy of the network, weights loaded by version), on the CPU: the same unrolls and the same updates for a
fixed seed. `tests/test_gpu.py` holds the same checks on a CUDA device (run on a lent GPU machine)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.bench_fast_path import as_present_path
from levelray.actors.acting import HostPolicy
from levelray.actors.device_policy import DevicePolicy
from levelray.actors.envs import env_spec, make_env_vector
from levelray.actors.episode_scorer import EpisodeScorer
from levelray.actors.rollout import RolloutWorker
from levelray.contracts.config import ConfigError, RunConfig, replace_paths
from levelray.contracts.validate import validate
from levelray.deploy.training.inline import InlineBackend
from levelray.learner.value_normalization import weights_in_reward_units
from levelray.policy.models import build_model
from levelray.policy.weights import weights_to_numpy


def _worker(cfg: RunConfig, K: int, T: int, policy_of) -> RolloutWorker:
    spec = env_spec(cfg.env)
    return RolloutWorker(make_env_vector(cfg.env, K, None, seed=7), T, learner=cfg.learner, seed=3,
                         scorer=EpisodeScorer("value_l1", K, discount=0.99, gae_lambda=0.95),
                         policy=policy_of(spec, K))


def assert_same_unrolls(got: dict, expected: dict, values_got: np.ndarray, values_expected: np.ndarray,
                        atol: float = 0.0) -> None:
    """Every field of `got` equals `expected`'s exactly (the values within `atol`)."""
    assert set(got) == set(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(value), err_msg=key)
    np.testing.assert_allclose(values_got, values_expected, rtol=1e-6, atol=atol)


def compare_unrolls(env_id: str, lstm: int, K: int, T: int) -> tuple[RolloutWorker, int]:
    """A `HostPolicy` worker and a `DevicePolicy` (CPU) worker from the same weights and env seeds, three unrolls
    each, every field compared (`assert_same_unrolls`); returns the device worker and the episode ends seen inside
    the unrolls. The device policy's network is the learner's, its value head in PopArt's units (sigma 3, mu 0.5
    here); the host policy's weights are published in reward units."""
    cfg = replace_paths(RunConfig(), {"env.id": env_id, "env.max_episode_steps": 7, "learner.lstm_size": lstm})
    spec = env_spec(cfg.env)
    torch.manual_seed(0)
    model = build_model(spec, cfg.learner.model, tuple(cfg.learner.hidden_sizes), lstm)
    sigma, mu = 3.0, 0.5
    published = weights_to_numpy(model)
    weights_in_reward_units(model, published, mu, sigma)

    def host(spec, K):
        policy = HostPolicy(spec, cfg.learner, K, seed=3)
        policy.set_weights(0, published)
        return policy

    host_worker = _worker(cfg, K, T, host)
    device_worker = _worker(cfg, K, T, lambda spec, K: DevicePolicy(model, spec, cfg.learner, K, 3, torch.device("cpu"),
                                                                    value_scale=lambda: (sigma, mu)))
    ends = 0
    for _ in range(3):
        expected, got = host_worker.unroll(), device_worker.unroll()
        assert_same_unrolls(got, expected, device_worker.last_values, host_worker.last_values, atol=1e-5)
        ends += int((expected["terminated"] | expected["truncated"])[:-1].sum())
    return device_worker, ends


@pytest.mark.parametrize("env_id, lstm, K, T", [
    ("maze:13x13", 256, 16, 12),
    ("maze:13x13", 256, 4096, 4),
    ("maze:13x13", 0, 16, 12),
    ("CartPole-v1", 0, 16, 12),  # the NumPy MLP on both paths
    ("CartPole-v1", 8, 16, 12),
])
def test_device_policy_on_the_cpu_makes_the_host_policys_unrolls(env_id, lstm, K, T, one_thread):
    """Three unrolls with episode ends inside them (a recurrent core reset there): observations, actions, behaviour
    parameters, core state, rewards, every field equal, and the values the level scores read within float error."""
    worker, ends = compare_unrolls(env_id, lstm, K, T)
    assert worker.policy._views is not None  # noqa: SLF001  (the CPU's NumPy views were the path taken)
    assert ends > 0, "no episode ended inside an unroll: the core's resets went unchecked"


@pytest.mark.parametrize("env_id, lstm", [("maze:13x13", 256), ("maze:13x13", 0)])
def test_device_policys_torch_path_makes_the_same_unrolls(env_id, lstm, one_thread, monkeypatch):
    """The path a GPU takes (buffers read and written as tensors, the actions chosen by torch in float64, a recurrent
    core's next input built from the chosen actions on the device), run on the CPU: the same unrolls again."""
    monkeypatch.setattr(DevicePolicy, "_host_views", lambda self: False)
    worker, ends = compare_unrolls(env_id, lstm, 16, 12)
    assert worker.policy._views is None  # noqa: SLF001  (the tensor path was the one taken)
    assert ends > 0, "no episode ended inside an unroll: the core's resets went unchecked"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("K, T, updates", [(16, 10, 4), (4096, 3, 2)])
def test_inline_fast_path_trains_as_the_present_path(K, T, updates, one_thread):
    """Maze, LSTM-256, PLR over 50 levels, two actors: each update's metrics and the weights after it are the same
    on the fast path (the workers act with the learner's own network) as on the present path."""
    cfg = replace_paths(RunConfig(), {
        "env.id": "maze:13x13", "env.num_levels": 50, "env.max_episode_steps": 9, "learner.lstm_size": 256,
        "actors.num_actors": 2, "actors.envs_per_actor": K, "actors.unroll_length": T, "learner.batch_size": 2,
        "learner.value_normalization": False, "seed": 5})
    fast, present = InlineBackend(cfg), as_present_path(InlineBackend(cfg))
    for _ in range(updates):
        got, expected = fast.train_step(), present.train_step()
        assert got == pytest.approx(expected, rel=1e-6, abs=1e-7)
    for name, value in present.core.learner.model.state_dict().items():
        torch.testing.assert_close(fast.core.learner.model.state_dict()[name], value, rtol=1e-6, atol=1e-7,
                                   msg=name)
    got, expected = fast.levels.stats(), present.levels.stats()
    assert set(got) == set(expected)
    for key, value in expected.items():  # the level scores the actors sent: the same levels replayed next
        np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(value), err_msg=key)
    fast.close()
    present.close()


def test_actor_device_is_checked_before_a_run():
    """A malformed `actors.device`, and a GPU where there is none or on the Ray backend, are refused naming it."""
    with pytest.raises(ConfigError, match=r"actors.device: expected auto, cpu, cuda or cuda:N, got 'gpu'"):
        validate(replace_paths(RunConfig(), {"actors.device": "gpu"}))
    with pytest.raises(ConfigError, match="the Ray backend's env actors act on CPU"):
        validate(replace_paths(RunConfig(), {"actors.device": "cuda", "backend": "ray"}))
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match=r"actors.device = 'cuda', but this machine has 0 CUDA device"):
            validate(replace_paths(RunConfig(), {"actors.device": "cuda", "backend": "inline"}))
    validate(replace_paths(RunConfig(), {"actors.device": "cpu", "backend": "inline"}))


def test_the_fast_path_shares_the_learners_network(one_thread):
    """On the learner's device the workers act with the learner's module itself: no weights are copied after an
    update, and the next unroll is acted with the updated weights (its behaviour parameters are the learner's
    recomputation at policy lag 0)."""
    cfg = replace_paths(RunConfig(), {"env.id": "CartPole-v1", "actors.num_actors": 1, "actors.envs_per_actor": 4,
                                      "learner.batch_size": 1, "learner.value_normalization": False})
    backend = InlineBackend(cfg)
    worker, learner = backend.workers[0], backend.core.learner
    assert worker.model is learner.model and backend.acting_device == learner.device
    backend.train_step()
    unroll = worker.unroll()
    assert unroll["policy_version"] == learner.version == 1
    with torch.no_grad():
        expected = learner.model.dist_params(torch.from_numpy(unroll["obs"][:-1].reshape(-1, 4))).numpy()
    np.testing.assert_allclose(unroll["behaviour_params"].reshape(-1, 2), expected, rtol=1e-5, atol=1e-6)
    backend.close()


def test_a_host_policys_first_weights_follow_its_seed_not_the_global_rng():
    """Before its first `set_weights` an actor acts with the weights its seed gives, whatever ran before it;
    building one leaves the global RNG where it was."""
    cfg = replace_paths(RunConfig(), {"env.id": "CartPole-v1"})
    spec = env_spec(cfg.env)

    def first_weights(global_seed: int, seed: int) -> list[np.ndarray]:
        torch.manual_seed(global_seed)
        policy = HostPolicy(spec, cfg.learner, 2, seed=seed)
        after = torch.rand(1)
        torch.manual_seed(global_seed)
        assert torch.equal(after, torch.rand(1))  # the global RNG did not move
        return [p.detach().numpy().copy() for p in policy.model.parameters()]

    same = first_weights(0, seed=4), first_weights(1, seed=4)
    other = first_weights(0, seed=5)
    for a, b in zip(*same, strict=True):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, b) for a, b in zip(same[0], other, strict=True))
