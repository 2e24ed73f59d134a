"""Learner: losses against a float64 reference, weights/masks, truncation, versions, state."""

import numpy as np
import pytest
import torch

from levelray.contracts.config import LearnerConfig
from levelray.contracts.spec import EnvSpec
from levelray.learner.learner import Learner
from levelray.learner.losses import impala_losses
from levelray.policy import distributions
from levelray.policy.models import build_model

VEC = EnvSpec(obs_shape=(4,), obs_dtype="float32", discrete=True, num_actions=3)


def make_batch(rng, T=6, B=4, spec=VEC, truncate_at=None):
    obs = rng.normal(size=(T + 1, B, *spec.obs_shape)).astype(np.float32)
    batch = {
        "obs": obs,
        "actions": rng.integers(0, spec.num_actions, size=(T, B)),
        "rewards": rng.normal(size=(T, B)).astype(np.float32),
        "terminated": rng.random((T, B)) < 0.1,
        "truncated": np.zeros((T, B), dtype=bool),
        "behaviour_params": rng.normal(size=(T, B, spec.num_actions)).astype(np.float32),
        "level_seeds": np.zeros((T, B), dtype=np.int64),
        "level_replayed": np.zeros((T, B), dtype=bool),
        "env_ids": np.arange(B),
    }
    if truncate_at is not None:
        t, k = truncate_at
        batch["terminated"][t, k] = False
        batch["truncated"][t, k] = True
        batch["final_obs"] = rng.normal(size=(1, *spec.obs_shape)).astype(np.float32)
        batch["final_obs_index"] = np.array([[t, k]])
    return batch


def test_losses_match_float64_reference():
    rng = np.random.default_rng(0)
    T, B = 5, 3
    logp, adv, vs, values, ent, w = (rng.normal(size=(T, B)) for _ in range(6))
    w = np.abs(w)
    w[0, 0] = 0.0  # masked step: excluded from the denominator too
    out = impala_losses(
        *(torch.from_numpy(x) for x in (logp, adv, vs, values, ent)),
        value_weight=0.5,
        entropy_weight=0.01,
        weights=torch.from_numpy(w),
    )
    n = (w > 0).sum()
    pol = -(w * logp * adv).sum() / n
    val = 0.5 * (w * (vs - values) ** 2).sum() / n
    entropy = (w * ent).sum() / n
    assert out.policy.item() == pytest.approx(pol, rel=1e-12)
    assert out.value.item() == pytest.approx(val, rel=1e-12)
    assert out.entropy.item() == pytest.approx(entropy, rel=1e-12)
    assert out.total.item() == pytest.approx(pol + 0.5 * val - 0.01 * entropy, rel=1e-12)


def test_distributions_against_closed_forms():
    from scipy import stats

    rng = np.random.default_rng(1)
    logits = torch.from_numpy(rng.normal(size=(7, 5)))
    actions = torch.from_numpy(rng.integers(0, 5, size=7))
    p = np.exp(logits.numpy()) / np.exp(logits.numpy()).sum(-1, keepdims=True)
    np.testing.assert_allclose(
        distributions.log_prob(logits, actions, True).numpy(), np.log(p[np.arange(7), actions.numpy()]), rtol=1e-10
    )
    np.testing.assert_allclose(distributions.entropy(logits, True).numpy(), -(p * np.log(p)).sum(-1), rtol=1e-10)
    params = torch.from_numpy(rng.normal(scale=0.5, size=(7, 4)))
    acts = torch.from_numpy(rng.normal(size=(7, 2)))
    mean, log_std = params[:, :2].numpy(), params[:, 2:].numpy()
    ref = stats.norm.logpdf(acts.numpy(), mean, np.exp(log_std)).sum(-1)
    np.testing.assert_allclose(distributions.log_prob(params, acts, False).numpy(), ref, rtol=1e-10)
    np.testing.assert_allclose(
        distributions.entropy(params, False).numpy(), stats.norm.entropy(mean, np.exp(log_std)).sum(-1), rtol=1e-10
    )


def test_update_increments_version_and_changes_weights():
    learner = Learner(VEC, LearnerConfig(learning_rate=1e-2), seed=0)
    v0, w0 = learner.get_weights()
    result = learner.update(make_batch(np.random.default_rng(2)))
    metrics = result.metrics
    v1, w1 = learner.get_weights()
    assert (v0, v1) == (0, 1) and metrics["version"] == 1
    assert any(not np.array_equal(w0[k], w1[k]) for k in w0)
    for key in ("loss_total", "loss_policy", "loss_value", "entropy", "grad_norm", "rho_mean",
                "rho_clipped_fraction", "explained_variance"):
        assert np.isfinite(metrics[key]), key
    assert 0.0 <= metrics["rho_clipped_fraction"] <= 1.0
    assert result.outputs.advantages.shape == (6, 4)
    assert result.outputs.values.shape == (7, 4)


def _grads(learner, batch):
    learner.model.zero_grad()
    # Use the learner's own loss path with a zero learning rate so parameters stay put.
    for group in learner.optimizer.param_groups:
        group["lr"] = 0.0
    learner.update(batch)
    return torch.cat([p.grad.flatten() for p in learner.model.parameters() if p.grad is not None])


def test_zero_sample_weight_removes_a_column_from_the_gradient():
    rng = np.random.default_rng(3)
    batch = make_batch(rng, B=4)
    weighted = dict(batch, sample_weights=np.array([1.0, 1.0, 1.0, 0.0], dtype=np.float32))
    cropped = {k: (v[:, :3] if k not in ("env_ids",) and v.ndim >= 2 else v[:3]) for k, v in batch.items()}
    cfg = LearnerConfig(grad_clip_type="none")
    g_weighted = _grads(Learner(VEC, cfg, seed=5), weighted)
    g_cropped = _grads(Learner(VEC, cfg, seed=5), cropped)
    torch.testing.assert_close(g_weighted, g_cropped, rtol=1e-5, atol=1e-7)
    g_full = _grads(Learner(VEC, cfg, seed=5), batch)
    assert not torch.allclose(g_full, g_cropped)


def test_truncated_step_bootstraps_from_final_observation_value():
    rng = np.random.default_rng(4)
    batch = make_batch(rng, truncate_at=(2, 1))
    batch["terminated"][:] = False
    batch["behaviour_params"][:] = 0.0
    learner = Learner(VEC, LearnerConfig(learning_rate=0.0), seed=0)
    # On-policy check: make behaviour = target so rho = 1 and v_t = r_t + gamma * V(final) exactly at t=2.
    with torch.no_grad():
        params, _ = learner.model(torch.from_numpy(batch["obs"][:6].reshape(-1, 4)))
        batch["behaviour_params"] = params.view(6, 4, 3).numpy()
        v_final = learner.model(torch.from_numpy(batch["final_obs"]))[1].item()
    outputs = learner.update(batch).outputs
    values = outputs.values
    vs = outputs.advantages + values[:6]
    expected = batch["rewards"][2, 1] + 0.99 * v_final
    assert vs[2, 1] == pytest.approx(expected, rel=1e-5)
    # and not from the next episode's first observation
    assert vs[2, 1] != pytest.approx(batch["rewards"][2, 1] + 0.99 * values[3, 1], rel=1e-3)


def test_state_dict_round_trip_gives_identical_updates():
    rng = np.random.default_rng(6)
    a = Learner(VEC, LearnerConfig(), seed=0)
    a.update(make_batch(rng))
    b = Learner(VEC, LearnerConfig(), seed=99)
    b.load_state_dict(a.state_dict())
    assert b.version == 1
    batch = make_batch(rng)
    ma, mb = a.update(batch).metrics, b.update(batch).metrics
    assert ma["loss_total"] == pytest.approx(mb["loss_total"], rel=1e-6)
    wa, wb = a.get_weights()[1], b.get_weights()[1]
    for k in wa:
        np.testing.assert_allclose(wa[k], wb[k], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("value_normalization", [False, True])
def test_gradient_clipping_by_norm_and_value(value_normalization):
    """The clipped gradient against the unclipped one of the same update (compared in float64): by norm it is
    scaled by min(1, max_norm / (norm + 1e-6)) (torch's clip_grad_norm_ rule), by value clamped elementwise,
    and `grad_norm` reports the norm before clipping (after PopArt's rescaling of the value layer)."""
    rng = np.random.default_rng(7)
    batch = make_batch(rng)
    batch["rewards"] *= 1000.0

    def grads(clip_type: str, clip: float = 0.0) -> tuple[torch.Tensor, float]:
        cfg = LearnerConfig(grad_clip_type=clip_type, grad_clip=clip, value_normalization=value_normalization)
        learner = Learner(VEC, cfg, seed=0)
        metrics = learner.update(batch).metrics
        return torch.cat([p.grad.flatten() for p in learner.model.parameters()]).double(), metrics["grad_norm"]

    raw, raw_norm = grads("none")
    assert raw_norm == pytest.approx(raw.norm().item(), rel=1e-5)
    assert raw_norm > 0.5  # the rewards make sure clipping by norm acts
    by_norm, norm = grads("norm", 0.5)
    assert norm == pytest.approx(raw_norm, rel=1e-6)
    torch.testing.assert_close(by_norm, raw * (0.5 / (raw_norm + 1e-6)), rtol=1e-5, atol=1e-9)
    by_value, norm = grads("value", 0.01)
    assert norm == pytest.approx(raw_norm, rel=1e-6)
    torch.testing.assert_close(by_value, raw.clamp(-0.01, 0.01), rtol=1e-5, atol=1e-9)
    assert (raw.abs() > 0.01).any() and (raw.abs() < 0.01).any()  # both sides of the clamp are exercised
    unclipped, norm = grads("norm", 10 * raw_norm)  # below the threshold: the gradient is left as it is
    torch.testing.assert_close(unclipped, raw, rtol=0, atol=0)


def test_rmsprop_and_continuous_actions():
    spec = EnvSpec((3,), "float32", False, action_dim=2, action_low=(-1, -1), action_high=(1, 1))
    rng = np.random.default_rng(8)
    T, B = 5, 2
    batch = {
        "obs": rng.normal(size=(T + 1, B, 3)).astype(np.float32),
        "actions": rng.normal(size=(T, B, 2)).astype(np.float32),
        "rewards": rng.normal(size=(T, B)).astype(np.float32),
        "terminated": np.zeros((T, B), bool),
        "truncated": np.zeros((T, B), bool),
        "behaviour_params": rng.normal(scale=0.3, size=(T, B, 4)).astype(np.float32),
    }
    learner = Learner(spec, LearnerConfig(optimizer="rmsprop"), seed=0)
    result = learner.update(batch)
    m = result.metrics
    assert np.isfinite(m["loss_total"]) and learner.version == 1
    assert result.outputs.dist_params.shape == (T, B, 4)


def test_impala_cnn_scales_uint8_inside():
    spec = EnvSpec((64, 64, 3), "uint8", True, num_actions=15)
    model = build_model(spec)
    assert sum(p.numel() for p in model.parameters()) == 626_256
    obs = torch.full((2, 64, 64, 3), 255, dtype=torch.uint8)
    params, value = model(obs)
    assert params.shape == (2, 15) and value.shape == (2,)
    with pytest.raises(ValueError, match="impala_cnn"):
        build_model(VEC, "impala_cnn")


def test_mean_bound_excess_matches_float64_reference():
    rng = np.random.default_rng(11)
    low = np.array([-2.0, -1.0, 0.0, -np.inf])
    high = np.array([2.0, 1.0, 3.0, np.inf])
    mean = rng.normal(scale=1.2, size=(6, 5, 4)) * np.array([2.0, 1.0, 1.0, 50.0])
    ref = np.zeros((6, 5))
    for idx in np.ndindex(6, 5):
        for d in range(3):  # the unbounded dimension adds nothing
            c, h = (high[d] + low[d]) / 2, (high[d] - low[d]) / 2
            ref[idx] += max(0.0, (abs(mean[idx][d] - c) - h) / h) ** 2
    got = distributions.mean_bound_excess(*(torch.from_numpy(x) for x in (mean, low, high)))
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-12)
    assert ref.min() == 0.0 and ref.max() > 1.0  # both sides of the bound are exercised


def test_losses_add_the_weighted_action_bound_term():
    rng = np.random.default_rng(12)
    T, B = 4, 3
    logp, adv, vs, values, ent, w, excess = (rng.normal(size=(T, B)) for _ in range(7))
    w, excess = np.abs(w), np.abs(excess)
    w[1, 2] = 0.0
    tensors = [torch.from_numpy(x) for x in (logp, adv, vs, values, ent)]
    base = impala_losses(*tensors, value_weight=0.5, entropy_weight=0.01, weights=torch.from_numpy(w))
    out = impala_losses(*tensors, value_weight=0.5, entropy_weight=0.01, weights=torch.from_numpy(w),
                        action_bound_excess=torch.from_numpy(excess), action_bound_weight=3.0)
    bound = (w * excess).sum() / (w > 0).sum()
    assert base.action_bound is None
    assert out.action_bound.item() == pytest.approx(bound, rel=1e-12)
    assert out.total.item() == pytest.approx(base.total.item() + 3.0 * bound, rel=1e-12)


def _continuous_batch(rng, T=5, B=2):
    return {
        "obs": rng.normal(size=(T + 1, B, 3)).astype(np.float32),
        "actions": rng.normal(size=(T, B, 1)).astype(np.float32),
        "rewards": np.zeros((T, B), np.float32),
        "terminated": np.zeros((T, B), bool),
        "truncated": np.zeros((T, B), bool),
        "behaviour_params": np.zeros((T, B, 2), np.float32),
    }


def test_action_bound_term_pulls_an_escaped_mean_back_and_leaves_one_inside_alone():
    """With zero rewards the policy gradient is small next to the bound term: from 5 (bound 2) the mean comes
    down with the term on and barely moves with it off; inside the box the term is 0."""
    spec = EnvSpec((3,), "float32", False, action_dim=1, action_low=(-2.0,), action_high=(2.0,))
    rng = np.random.default_rng(13)
    batch = _continuous_batch(rng)
    obs = torch.from_numpy(batch["obs"][:-1].reshape(-1, 3))

    def mean_after(weight: float, bias: float, updates: int = 20) -> tuple[float, float, float]:
        cfg = LearnerConfig(action_bound_weight=weight, value_normalization=False, learning_rate=1e-2)
        learner = Learner(spec, cfg, seed=0)
        with torch.no_grad():
            learner.model.policy[-1].bias.fill_(bias)
        before = learner.model.dist_params(obs)[:, 0].mean().item()
        metrics = [learner.update(batch).metrics for _ in range(updates)]
        return before, learner.model.dist_params(obs)[:, 0].mean().item(), metrics[0]["loss_action_bound"]

    before, on, first = mean_after(1.0, 5.0)
    assert first == pytest.approx(np.mean(((np.abs(before) - 2.0) / 2.0) ** 2), rel=0.05)
    assert on < before - 1.0
    _, off, first_off = mean_after(0.0, 5.0)
    assert abs(off - before) < abs(on - before) / 5
    assert first_off == pytest.approx(first, rel=1e-6)  # reported even when it does not train
    _, _, inside = mean_after(1.0, 0.5, updates=1)
    assert inside == 0.0
