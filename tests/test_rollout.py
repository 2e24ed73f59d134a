"""Rollouts and the unroll contract: shapes, continuity, episode stats, and rejection of bad unrolls."""

import numpy as np
import pytest

from levelray.actors.envs import make_env_vector
from levelray.actors.rollout import RolloutWorker
from levelray.contracts.config import EnvConfig, LearnerConfig
from levelray.contracts.trajectory import TrajectoryError, stack_unrolls, validate_unroll


@pytest.fixture(scope="module")
def cartpole_unrolls():
    cfg = EnvConfig(id="CartPole-v1", num_levels=50, max_episode_steps=12)  # random play often lasts longer
    worker = RolloutWorker(make_env_vector(cfg, 3, None, seed=0), 25, actor_id=2, env_id_offset=6, seed=0)
    return worker, [worker.unroll() for _ in range(3)]


def test_unroll_shapes_continuity_and_validation(cartpole_unrolls):
    worker, unrolls = cartpole_unrolls
    u0, u1 = unrolls[0], unrolls[1]
    assert u0["obs"].shape == (26, 3, 4) and u0["actions"].shape == (25, 3)
    np.testing.assert_array_equal(u0["obs"][-1], u1["obs"][0])
    assert u0["env_ids"].tolist() == [6, 7, 8] and u0["actor_id"] == 2
    for u in unrolls:
        validate_unroll(u, worker.spec, unroll_length=25, level_range=(0, 50), current_version=0)
    # time limit 12 within 75 steps: truncations carry final observations
    total_trunc = sum(int(u["truncated"].sum()) for u in unrolls)
    assert total_trunc > 0 and sum(len(u["final_obs"]) for u in unrolls) == total_trunc
    # episode statistics add up to the per-step rewards of finished episodes
    lengths = np.concatenate([u["episode_lengths"] for u in unrolls])
    returns = np.concatenate([u["episode_returns"] for u in unrolls])
    np.testing.assert_allclose(returns, lengths)  # CartPole pays 1 per step


def test_stack_unrolls_offsets_final_obs_index(cartpole_unrolls):
    _, unrolls = cartpole_unrolls
    batch = stack_unrolls(unrolls)
    assert batch["obs"].shape == (26, 9, 4)
    t, b = batch["final_obs_index"].T
    assert batch["truncated"][t, b].all()
    assert batch["policy_version"].shape == (9,)


BAD = [
    ("rewards", lambda u: u.__setitem__("rewards", u["rewards"].astype(np.float32) * np.nan), "rewards"),
    ("actions", lambda u: u["actions"].__setitem__((0, 0), 7), "actions"),
    ("obs", lambda u: u.__setitem__("obs", u["obs"].astype(np.float64)), "obs"),
    ("obs_shape", lambda u: u.__setitem__("obs", u["obs"][..., :3]), "obs"),
    ("seeds", lambda u: u["level_seeds"].__setitem__((0, 0), 999), "level_seeds"),
    ("missing", lambda u: u.pop("terminated"), "terminated"),
    ("version", lambda u: u.__setitem__("policy_version", 5), "policy_version"),
    ("dtype", lambda u: u.__setitem__("terminated", u["terminated"].astype(np.float32)), "terminated"),
    ("final", lambda u: u.__setitem__("final_obs_index", u["final_obs_index"][:0]), "final_obs"),
]


@pytest.mark.parametrize("name, corrupt, field", BAD, ids=[b[0] for b in BAD])
def test_validator_names_the_bad_field(cartpole_unrolls, name, corrupt, field):
    worker, unrolls = cartpole_unrolls
    u = next(x for x in unrolls if x["truncated"].any())
    u = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in u.items()}
    corrupt(u)
    with pytest.raises(TrajectoryError, match=field):
        validate_unroll(u, worker.spec, unroll_length=25, level_range=(0, 50), current_version=0)


def test_categorical_sampler_matches_softmax_probabilities():
    from scipy import stats

    from levelray.actors.acting import sample_categorical

    rng = np.random.default_rng(0)
    logits = np.array([[2.0, 0.0, -1.0, 0.5], [-50.0, 0.0, 0.0, 50.0]])
    draws = np.stack([sample_categorical(logits, rng) for _ in range(20000)])
    p = np.exp(logits[0] - logits[0].max())
    p /= p.sum()
    counts = np.bincount(draws[:, 0], minlength=4)
    assert stats.chisquare(counts, p * len(draws)).pvalue > 1e-3
    assert set(draws[:, 1].tolist()) == {3}  # a dominant logit is always drawn, never out of range


def test_policy_head_alone_matches_the_full_forward():
    import torch

    from levelray.contracts.spec import EnvSpec
    from levelray.policy.models import build_model

    for spec in (EnvSpec((4,), "float32", True, num_actions=3), EnvSpec((3,), "float32", False, action_dim=2),
                 EnvSpec((64, 64, 3), "uint8", True, num_actions=15)):
        model = build_model(spec)
        obs = torch.zeros((2, *spec.obs_shape), dtype=torch.uint8 if spec.is_image else torch.float32)
        torch.testing.assert_close(model.dist_params(obs), model(obs)[0])


def _float64_policy_reference(weights: dict[str, np.ndarray], obs: np.ndarray, discrete: bool) -> np.ndarray:
    """The MLP's policy tower written out in float64 from the raw state dict: Linear, tanh, ..., Linear."""
    n_linear = len([k for k in weights if k.startswith("policy.") and k.endswith(".weight")])
    x = obs.reshape(len(obs), -1).astype(np.float64)
    for i in range(n_linear):
        x = x @ weights[f"policy.{2 * i}.weight"].astype(np.float64).T + weights[f"policy.{2 * i}.bias"]
        if i < n_linear - 1:
            x = np.tanh(x)
    if not discrete:
        x = np.concatenate([x, np.broadcast_to(weights["log_std"].astype(np.float64), x.shape)], axis=1)
    return x


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_numpy_policy_matches_a_float64_reference_before_and_after_new_weights(env_id):
    from levelray.policy.weights import weights_to_numpy

    worker = RolloutWorker(make_env_vector(EnvConfig(id=env_id, num_levels=0), 4, None, seed=0), 5,
                           learner=LearnerConfig(hidden_sizes=[32, 16]), seed=0)
    assert worker.policy.numpy_policy is not None  # the MLP takes the NumPy path on actors
    rng = np.random.default_rng(1)
    obs = rng.standard_normal((16, *worker.spec.obs_shape)).astype(np.float32) * 3
    weights = weights_to_numpy(worker.model)
    np.testing.assert_allclose(worker.policy.numpy_policy.dist_params(obs),
                               _float64_policy_reference(weights, obs, worker.spec.discrete), rtol=1e-5, atol=1e-5)
    # New weights (as an actor receives them from the learner) change what the policy computes.
    new = {k: (v + rng.standard_normal(v.shape).astype(np.float32) * 0.5) for k, v in weights.items()}
    worker.set_weights(7, new)
    got = worker.policy.numpy_policy.dist_params(obs)
    np.testing.assert_allclose(got, _float64_policy_reference(new, obs, worker.spec.discrete), rtol=1e-5, atol=1e-5)
    assert not np.allclose(got, _float64_policy_reference(weights, obs, worker.spec.discrete), atol=1e-3)
    assert worker.policy_version == 7
    # act() samples from exactly these parameters
    actions, params = worker.act(obs)
    np.testing.assert_array_equal(params, got)
    assert actions.shape[0] == len(obs)
