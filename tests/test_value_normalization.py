"""PopArt value normalisation: statistics against a float64 reference, output preservation, exact gradients
of the rescaled head, state round trips, and the learner's wiring (outputs preserved across an update)."""

import copy

import numpy as np
import pytest
import torch

from levelray.contracts.config import LearnerConfig
from levelray.learner import vtrace
from levelray.learner.learner import Learner
from levelray.learner.value_normalization import PopArt, preserve_outputs_, value_output_layer
from tests.test_learner import VEC, make_batch


def reference_moments(batches, masks, beta):
    """mu_t, nu_t as explicit weighted averages of the batch moments, weights (1 - beta)^(t - i), i = 1..t
    (what the bias-corrected recursion must equal). sigma = sqrt(nu - mu^2) clamped to [1e-4, 1e6]."""
    means, squares = [], []
    for x, m in zip(batches, masks, strict=True):
        x = np.asarray(x, dtype=np.float64)[np.asarray(m, dtype=bool)]
        means.append(x.mean())
        squares.append((x**2).mean())
    t = len(means)
    w = (1.0 - beta) ** np.arange(t - 1, -1, -1, dtype=np.float64)
    mu = float((w * means).sum() / w.sum())
    nu = float((w * squares).sum() / w.sum())
    return mu, nu, min(max(np.sqrt(max(nu - mu * mu, 0.0)), 1e-4), 1e6)


@pytest.mark.parametrize("beta", [1.0, 0.3, 3e-3, 1e-5])
def test_statistics_match_float64_reference(beta):
    rng = np.random.default_rng(0)
    pop = PopArt(beta)
    assert (pop.mu, pop.sigma) == (0.0, 1.0)
    batches, masks = [], []
    for i in range(40):  # targets whose scale and offset drift, as returns do while a policy improves
        x = rng.normal(loc=3.0 * i, scale=1.0 + i, size=(20, 8)).astype(np.float32)
        m = rng.random((20, 8)) > 0.2
        batches.append(x)
        masks.append(m)
        old = pop.update(torch.from_numpy(x), torch.from_numpy(m))
        mu, nu, sigma = reference_moments(batches, masks, beta)
        assert pop.mu == pytest.approx(mu, rel=1e-12, abs=1e-12)
        assert pop.nu == pytest.approx(nu, rel=1e-12)
        assert pop.sigma == pytest.approx(sigma, rel=1e-9)
        if i:
            assert old == pytest.approx(reference_moments(batches[:-1], masks[:-1], beta)[::2], rel=1e-9)


def test_sigma_is_clamped():
    pop = PopArt(1.0)
    pop.update(torch.full((5,), 7.0))
    assert pop.sigma == 1e-4 and pop.mu == 7.0  # constant targets: no spread
    pop.update(torch.tensor([-3e7, 3e7]))
    assert pop.sigma == 1e6
    empty = PopArt(0.1)
    assert empty.update(torch.ones(3), torch.zeros(3, dtype=torch.bool)) == (0.0, 1.0) and empty.count == 0
    with pytest.raises(ValueError, match="beta"):
        PopArt(0.0)


def test_rescaled_layer_preserves_unnormalised_outputs_float64():
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 1).double()
    h = torch.randn(256, 16, dtype=torch.float64)
    pop = PopArt(0.05)
    rng = np.random.default_rng(1)
    worst = 0.0
    for i in range(50):
        with torch.no_grad():
            before = pop.unnormalize(layer(h))
        old = pop.update(torch.from_numpy(rng.normal(loc=10.0 * i, scale=5.0 + i, size=64)))
        preserve_outputs_(layer, old, (pop.mu, pop.sigma))
        with torch.no_grad():
            after = pop.unnormalize(layer(h))
        worst = max(worst, ((after - before).abs() / before.abs().clamp(min=1.0)).max().item())
    assert pop.mu > 100 and pop.sigma > 10  # the statistics really moved
    assert worst < 1e-12


def test_rescaled_float32_layer_preserves_outputs_to_float32_rounding():
    torch.manual_seed(1)
    layer = torch.nn.Linear(64, 1)
    h = torch.tanh(torch.randn(512, 64))
    pop = PopArt(1.0)
    pop.update(torch.randn(100) * 30 + 80)
    with torch.no_grad():
        before = pop.unnormalize(layer(h))
    old = pop.update(torch.randn(100) * 3 + 95)
    preserve_outputs_(layer, old, (pop.mu, pop.sigma))
    with torch.no_grad():
        after = pop.unnormalize(layer(h))
    assert ((after - before).abs() / before.abs()).max().item() < 1e-5


def test_gradients_become_those_of_the_rescaled_layer():
    """The learner backpropagates through (old_sigma * v + old_mu - new_mu) / new_sigma with the old layer, then
    rescales: the resulting gradients must be the gradients of the same loss taken at the rescaled layer."""
    torch.manual_seed(2)
    layer = torch.nn.Linear(8, 1).double()
    h = torch.randn(32, 8, dtype=torch.float64, requires_grad=True)
    targets = torch.randn(32, dtype=torch.float64) * 20 + 50
    pop = PopArt(0.5)
    pop.update(torch.randn(32, dtype=torch.float64) * 5 + 10)
    rescaled = copy.deepcopy(layer)

    values = pop.unnormalize(layer(h).squeeze(-1))  # reward units, old statistics
    old = pop.update(targets)
    loss = 0.5 * (pop.normalize(targets) - pop.normalize(values)).square().mean()
    loss.backward()
    preserve_outputs_(layer, old, (pop.mu, pop.sigma))

    preserve_outputs_(rescaled, old, (pop.mu, pop.sigma), grads=False)
    h2 = h.detach().clone().requires_grad_(True)
    loss2 = 0.5 * (pop.normalize(targets) - rescaled(h2).squeeze(-1)).square().mean()
    loss2.backward()
    assert loss.item() == pytest.approx(loss2.item(), rel=1e-12)
    for a, b in ((layer.weight, rescaled.weight), (layer.bias, rescaled.bias)):
        torch.testing.assert_close(a, b, rtol=1e-14, atol=1e-14)
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(h.grad, h2.grad, rtol=1e-12, atol=1e-14)


def test_state_dict_round_trip():
    pop = PopArt(0.01)
    for i in range(5):
        pop.update(torch.randn(10) + i)
    other = PopArt(0.01)
    other.load_state_dict(pop.state_dict())
    assert (other.mu, other.nu, other.count, other.sigma) == (pop.mu, pop.nu, pop.count, pop.sigma)
    x = torch.randn(7)
    other.update(x)
    pop.update(x)
    assert (other.mu, other.nu) == (pop.mu, pop.nu)


def normalised_learner(**kw):
    return Learner(VEC, LearnerConfig(value_normalization=True, popart_beta=kw.pop("beta", 0.1), **kw), seed=0)


def unnormalised_values(learner, obs):
    with torch.no_grad():
        _, v = learner.model(torch.from_numpy(obs))
    return learner.value_norm.unnormalize(v.double()).numpy()


def test_learner_update_with_zero_lr_keeps_unnormalised_values_while_statistics_change():
    rng = np.random.default_rng(3)
    learner = normalised_learner(learning_rate=0.0, beta=0.5)
    probe = rng.normal(size=(64, 4)).astype(np.float32)
    for i in range(4):
        batch = make_batch(rng)
        batch["rewards"] = batch["rewards"] * 10 + 20 * (i + 1)  # targets far from the identity statistics
        before = unnormalised_values(learner, probe)
        stats_before = (learner.value_norm.mu, learner.value_norm.sigma)
        metrics = learner.update(batch).metrics
        after = unnormalised_values(learner, probe)
        assert (learner.value_norm.mu, learner.value_norm.sigma) != stats_before
        assert metrics["value_norm_mu"] == learner.value_norm.mu
        np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-5 * learner.value_norm.sigma)
    assert learner.value_norm.mu > 100 and learner.value_norm.sigma > 5


def test_learner_losses_use_normalised_targets_and_advantages(monkeypatch):
    rng = np.random.default_rng(4)
    learner = normalised_learner(learning_rate=0.0, beta=0.3, grad_clip_type="none")
    learner.update(dict(make_batch(rng), rewards=make_batch(rng)["rewards"] * 5 + 30))  # non-identity statistics
    old_mu, old_nu, old_sigma = learner.value_norm.mu, learner.value_norm.nu, learner.value_norm.sigma
    captured = {}
    real = vtrace.from_importance_weights
    monkeypatch.setattr(vtrace, "from_importance_weights", lambda *a, **k: captured.setdefault("out", real(*a, **k)))
    batch = make_batch(rng)
    batch["rewards"] = batch["rewards"] * 5 + 40
    T = batch["rewards"].shape[0]
    probe_values = unnormalised_values(learner, batch["obs"].reshape(-1, 4)).reshape(T + 1, -1)
    result = learner.update(batch)
    metrics = result.metrics
    vs = captured["out"].vs.double().numpy()
    pg = captured["out"].pg_advantages.double().numpy()
    values = result.outputs.values.astype(np.float64)
    np.testing.assert_allclose(values, probe_values, rtol=1e-5, atol=1e-5 * old_sigma)  # reward units
    # statistics after this batch (bias-corrected step for the second update), in float64
    step = 0.3 / (1 - 0.7**2)
    mu = old_mu + step * (vs.mean() - old_mu)
    nu = old_nu + step * ((vs**2).mean() - old_nu)
    sigma = np.sqrt(nu - mu**2)
    assert learner.value_norm.mu == pytest.approx(mu, rel=1e-6) and learner.value_norm.sigma == pytest.approx(sigma)
    assert old_sigma != pytest.approx(sigma)
    value_loss = 0.5 * np.mean(((vs - mu) / sigma - (values[:T] - mu) / sigma) ** 2)
    assert metrics["loss_value"] == pytest.approx(value_loss, rel=1e-4)
    logits = result.outputs.dist_params.astype(np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    logp_a = np.take_along_axis(logp, batch["actions"][..., None], -1)[..., 0]
    assert metrics["loss_policy"] == pytest.approx(-np.mean(logp_a * pg / sigma), rel=1e-4)


def test_learner_state_dict_carries_statistics_and_resume_without_normalisation_keeps_outputs():
    rng = np.random.default_rng(5)
    a = normalised_learner(learning_rate=1e-3)
    for _ in range(3):
        a.update(dict(make_batch(rng), rewards=make_batch(rng)["rewards"] + 50))
    state = a.state_dict()
    assert state["value_normalization"]["count"] == 3
    b = normalised_learner(learning_rate=1e-3, beta=0.1)
    b.load_state_dict(state)
    assert (b.value_norm.mu, b.value_norm.sigma, b.value_norm.count) == (a.value_norm.mu, a.value_norm.sigma, 3)
    batch = make_batch(rng)
    ma, mb = a.update(batch).metrics, b.update(batch).metrics
    assert ma["loss_total"] == pytest.approx(mb["loss_total"], rel=1e-6)
    assert (a.value_norm.mu, a.value_norm.nu) == (b.value_norm.mu, b.value_norm.nu)

    probe = rng.normal(size=(16, 4)).astype(np.float32)
    plain = Learner(VEC, LearnerConfig(value_normalization=False), seed=1)
    plain.load_state_dict(a.state_dict())
    with torch.no_grad():
        folded = plain.model(torch.from_numpy(probe))[1].numpy()
    np.testing.assert_allclose(folded, unnormalised_values(a, probe), rtol=1e-5, atol=1e-4)
    # and a checkpoint from a learner without normalisation starts a normalised one at identity statistics
    c = normalised_learner()
    c.load_state_dict(Learner(VEC, LearnerConfig(value_normalization=False), seed=2).state_dict())
    assert (c.value_norm.mu, c.value_norm.sigma, c.value_norm.count) == (0.0, 1.0, 0)


def test_value_output_layer_of_both_models():
    from levelray.contracts.spec import EnvSpec
    from levelray.policy.models import build_model

    assert value_output_layer(build_model(VEC)).out_features == 1
    cnn = build_model(EnvSpec((64, 64, 3), "uint8", True, num_actions=15))
    assert value_output_layer(cnn) is cnn.value
    with pytest.raises(ValueError, match="value head"):
        value_output_layer(torch.nn.Linear(3, 2))


def test_impala_cnn_learner_with_normalisation_preserves_outputs():
    from levelray.contracts.spec import EnvSpec

    spec = EnvSpec((64, 64, 3), "uint8", True, num_actions=15)
    rng = np.random.default_rng(6)
    batch = make_batch(rng, T=3, B=2, spec=VEC)
    batch["obs"] = rng.integers(0, 256, size=(4, 2, 64, 64, 3), dtype=np.uint8)
    batch["actions"] = rng.integers(0, 15, size=(3, 2))
    batch["behaviour_params"] = rng.normal(size=(3, 2, 15)).astype(np.float32)
    batch["rewards"] = batch["rewards"] * 3 + 10
    learner = Learner(spec, LearnerConfig(value_normalization=True, popart_beta=0.5, learning_rate=0.0), seed=0)
    probe = torch.from_numpy(batch["obs"][:, 0])
    for _ in range(2):
        with torch.no_grad():
            before = learner.value_norm.unnormalize(learner.model(probe)[1].double())
        learner.update(batch)
        with torch.no_grad():
            after = learner.value_norm.unnormalize(learner.model(probe)[1].double())
        torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-5 * learner.value_norm.sigma)
    assert learner.value_norm.count == 2 and learner.value_norm.mu > 5
