"""V-trace against an independent float64 reference written from the paper's definition.

The reference computes each v_s from the explicit sum (Espeholt et al. 2018, eq. 1) rather than the
backward recursion the implementation uses, so the two can only agree if both are right.
"""

import numpy as np
import pytest
import torch

from levelray.learner import vtrace
from levelray.policy import distributions


def reference_vtrace(log_rhos, discounts, rewards, values, bootstrap, rho_bar, c_bar, pg_bar, lam):
    """Float64 V-trace by the explicit sum  v_s = V(x_s) + sum_t gamma^{t-s} (prod c_i) delta_t."""
    log_rhos, discounts, rewards, values, bootstrap = (
        np.asarray(a, dtype=np.float64) for a in (log_rhos, discounts, rewards, values, bootstrap)
    )
    while log_rhos.ndim < values.ndim:
        log_rhos = log_rhos[..., None]
    log_rhos = np.broadcast_to(log_rhos, values.shape)
    T = values.shape[0]
    rhos = np.exp(log_rhos)
    clip = lambda x, b: x if b is None else np.minimum(x, b)  # noqa: E731
    next_values = np.concatenate([values[1:], bootstrap[None]], 0)
    deltas = clip(rhos, rho_bar) * (rewards + discounts * next_values - values)
    cs = lam * clip(rhos, c_bar)
    vs = np.zeros_like(values)
    for s in range(T):
        total = np.zeros_like(values[0])
        coef = np.ones_like(values[0])
        for t in range(s, T):
            total = total + coef * deltas[t]
            coef = coef * discounts[t] * cs[t]
        vs[s] = values[s] + total
    next_vs = np.concatenate([vs[1:], bootstrap[None]], 0)
    pg = clip(rhos, pg_bar) * (rewards + discounts * next_vs - values)
    return vs, pg


def random_inputs(rng, T, B, extra=(), zero_discount_fraction=0.2, log_rho_scale=1.0):
    shape = (T, B, *extra)
    log_rhos = rng.normal(scale=log_rho_scale, size=(T, B)).astype(np.float32)
    discounts = np.where(rng.random(shape) < zero_discount_fraction, 0.0, 0.97).astype(np.float32)
    rewards = rng.normal(size=shape).astype(np.float32)
    values = rng.normal(size=shape).astype(np.float32)
    bootstrap = rng.normal(size=shape[1:]).astype(np.float32)
    return log_rhos, discounts, rewards, values, bootstrap


def assert_rel_close(actual, expected, tol=1e-5):
    actual = actual.double().numpy()
    scale = np.maximum(np.abs(expected), 1.0)
    err = np.max(np.abs(actual - expected) / scale)
    assert err < tol, f"relative error {err:.3g} >= {tol}"


CLIP_CASES = [
    dict(clip_rho_threshold=1.0, clip_c_threshold=1.0, clip_pg_rho_threshold=1.0, lambda_=1.0),
    dict(clip_rho_threshold=None, clip_c_threshold=None, clip_pg_rho_threshold=None, lambda_=1.0),
    dict(clip_rho_threshold=3.7, clip_c_threshold=0.5, clip_pg_rho_threshold=2.2, lambda_=0.95),
    dict(clip_rho_threshold=1.0, clip_c_threshold=1.0, clip_pg_rho_threshold=1.0, lambda_=0.5),
]


@pytest.mark.parametrize("clips", CLIP_CASES)
@pytest.mark.parametrize("extra", [(), (3,)])
def test_from_importance_weights_matches_float64_reference(clips, extra):
    rng = np.random.default_rng(len(extra) * 10 + int(clips["lambda_"] * 100))
    inputs = random_inputs(rng, T=17, B=6, extra=extra)
    got = vtrace.from_importance_weights(*map(torch.from_numpy, inputs), **clips)
    ref_vs, ref_pg = reference_vtrace(
        *inputs,
        clips["clip_rho_threshold"],
        clips["clip_c_threshold"],
        clips["clip_pg_rho_threshold"],
        clips["lambda_"],
    )
    assert got.vs.shape == (17, 6, *extra)
    assert_rel_close(got.vs, ref_vs)
    assert_rel_close(got.pg_advantages, ref_pg)


def test_clipping_is_active_in_the_random_cases():
    """Guards the test above: with log_rho scale 1, both clipped and unclipped ratios occur."""
    rng = np.random.default_rng(0)
    log_rhos = random_inputs(rng, 17, 6)[0]
    assert (np.exp(log_rhos) > 1).mean() > 0.2 and (np.exp(log_rhos) < 1).mean() > 0.2
    inputs = random_inputs(np.random.default_rng(1), 17, 6)
    clipped = vtrace.from_importance_weights(*map(torch.from_numpy, inputs))
    unclipped = vtrace.from_importance_weights(
        *map(torch.from_numpy, inputs), clip_rho_threshold=None, clip_c_threshold=None, clip_pg_rho_threshold=None
    )
    assert not torch.allclose(clipped.vs, unclipped.vs)


def test_on_policy_with_lambda_one_gives_discounted_returns():
    """rho = 1 everywhere: v_s is the n-step bootstrapped discounted return."""
    rng = np.random.default_rng(3)
    T, B = 9, 4
    rewards = rng.normal(size=(T, B))
    values = rng.normal(size=(T, B))
    bootstrap = rng.normal(size=B)
    discounts = np.full((T, B), 0.9)
    discounts[4, 1] = 0.0
    expected = np.zeros((T, B))
    acc = bootstrap.copy()
    for t in range(T - 1, -1, -1):
        acc = rewards[t] + discounts[t] * acc
        expected[t] = acc
    got = vtrace.from_importance_weights(
        torch.zeros(T, B, dtype=torch.float64),
        torch.from_numpy(discounts),
        torch.from_numpy(rewards),
        torch.from_numpy(values),
        torch.from_numpy(bootstrap),
    )
    np.testing.assert_allclose(got.vs.numpy(), expected, rtol=1e-12)


def test_zero_discount_cuts_the_trace():
    """With gamma_t = 0, v_t = V(x_t) + rho_t (r_t - V(x_t)): nothing after t leaks in."""
    rng = np.random.default_rng(4)
    inputs = list(random_inputs(rng, 10, 3, zero_discount_fraction=0.0))
    inputs[1][5] = 0.0
    base = vtrace.from_importance_weights(*map(torch.from_numpy, inputs))
    perturbed = [a.copy() for a in inputs]
    perturbed[2][6:] += 100.0  # rewards after the terminal step
    perturbed[4] += 100.0  # bootstrap
    after = vtrace.from_importance_weights(*map(torch.from_numpy, perturbed))
    torch.testing.assert_close(base.vs[:6], after.vs[:6])
    assert not torch.allclose(base.vs[6:], after.vs[6:])


def test_categorical_log_rhos_match_reference_and_keep_policy_gradient():
    """The learner's path: log-probabilities from policy.distributions, then V-trace on their difference."""
    rng = np.random.default_rng(5)
    T, B, A = 12, 5, 4
    behaviour = torch.from_numpy(rng.normal(size=(T, B, A)).astype(np.float32))
    target = torch.from_numpy(rng.normal(size=(T, B, A)).astype(np.float32)).requires_grad_()
    actions = torch.from_numpy(rng.integers(0, A, size=(T, B)))
    _, discounts, rewards, values, bootstrap = random_inputs(rng, T, B)
    behaviour_lp = distributions.log_prob(behaviour, actions, discrete=True)
    target_lp = distributions.log_prob(target, actions, discrete=True)
    log_rhos = target_lp.detach() - behaviour_lp
    out = vtrace.from_importance_weights(log_rhos, *map(torch.from_numpy, (discounts, rewards, values, bootstrap)))

    def log_softmax64(x):
        x = x.astype(np.float64)
        m = x.max(-1, keepdims=True)
        return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))

    a = actions.numpy()
    b_lp = np.take_along_axis(log_softmax64(behaviour.numpy()), a[..., None], -1)[..., 0]
    t_lp = np.take_along_axis(log_softmax64(target.detach().numpy()), a[..., None], -1)[..., 0]
    np.testing.assert_allclose(behaviour_lp.numpy(), b_lp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(log_rhos.numpy(), t_lp - b_lp, rtol=1e-5, atol=1e-5)
    ref_vs, ref_pg = reference_vtrace(t_lp - b_lp, discounts, rewards, values, bootstrap, 1.0, 1.0, 1.0, 1.0)
    assert_rel_close(out.vs, ref_vs)
    assert_rel_close(out.pg_advantages, ref_pg)
    assert not out.vs.requires_grad and not out.pg_advantages.requires_grad
    target_lp.sum().backward()
    assert target.grad is not None and target.grad.abs().sum() > 0


def test_gaussian_log_rhos_match_reference():
    rng = np.random.default_rng(6)
    T, B, D = 8, 3, 2
    bm, bs, tm, ts, acts = (torch.from_numpy(rng.normal(scale=0.5, size=(T, B, D))) for _ in range(5))
    _, discounts, rewards, values, bootstrap = (
        torch.from_numpy(x.astype(np.float64)) for x in random_inputs(rng, T, B)
    )
    log_rhos = distributions.log_prob(torch.cat([tm, ts], -1), acts, discrete=False) - distributions.log_prob(
        torch.cat([bm, bs], -1), acts, discrete=False
    )
    out = vtrace.from_importance_weights(log_rhos, discounts, rewards, values, bootstrap, lambda_=0.9)

    def logpdf(mean, log_std, x):
        mean, log_std, x = (v.numpy() for v in (mean, log_std, x))
        var = np.exp(2 * log_std)
        return (-((x - mean) ** 2) / (2 * var) - 0.5 * np.log(2 * np.pi * var)).sum(-1)

    ref_log_rhos = logpdf(tm, ts, acts) - logpdf(bm, bs, acts)
    np.testing.assert_allclose(log_rhos.numpy(), ref_log_rhos, rtol=1e-10)
    ref_vs, ref_pg = reference_vtrace(ref_log_rhos, discounts, rewards, values, bootstrap, 1.0, 1.0, 1.0, 0.9)
    np.testing.assert_allclose(out.vs.numpy(), ref_vs, rtol=1e-10)
    np.testing.assert_allclose(out.pg_advantages.numpy(), ref_pg, rtol=1e-10)


def test_termination_is_discount_zero():
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    terminated = torch.tensor([[False], [True], [False]])
    truncated = torch.zeros(3, 1, dtype=torch.bool)
    discounts, new_rewards = vtrace.episode_end_inputs(rewards, terminated, truncated, 0.9)
    assert discounts.squeeze(1).tolist() == pytest.approx([0.9, 0.0, 0.9])
    assert torch.equal(new_rewards, rewards)
    values = torch.tensor([[0.5], [0.7], [0.2]])
    vs = vtrace.from_importance_weights(torch.zeros(3, 1), discounts, new_rewards, values, torch.tensor([10.0])).vs
    # Episode 1 ends at t=1: v_1 = 2, v_0 = 1 + 0.9*2; episode 2: v_2 = 3 + 0.9*10.
    assert vs.squeeze(1).tolist() == pytest.approx([2.8, 2.0, 12.0])


def test_truncation_bootstraps_from_the_final_observation_not_the_next_episode():
    """At t=1 the episode is cut by a time limit; x_2 is already the next episode's first state.

    Its targets must use V(x_final) = 4.0 and never V(x_2) = -50 or anything after it."""
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    terminated = torch.zeros(3, 1, dtype=torch.bool)
    truncated = torch.tensor([[False], [True], [False]])
    final_values = torch.tensor([[0.0], [4.0], [0.0]])
    discounts, new_rewards = vtrace.episode_end_inputs(rewards, terminated, truncated, 0.9, final_values)
    values = torch.tensor([[0.5], [0.7], [-50.0]])
    out = vtrace.from_importance_weights(torch.zeros(3, 1), discounts, new_rewards, values, torch.tensor([10.0]))
    assert out.vs[1, 0].item() == pytest.approx(2.0 + 0.9 * 4.0)
    assert out.vs[0, 0].item() == pytest.approx(1.0 + 0.9 * (2.0 + 0.9 * 4.0))
    assert out.pg_advantages[1, 0].item() == pytest.approx(2.0 + 0.9 * 4.0 - 0.7)
    # A termination at the same step would not bootstrap at all.
    d_term, r_term = vtrace.episode_end_inputs(rewards, truncated, terminated, 0.9)
    out_term = vtrace.from_importance_weights(torch.zeros(3, 1), d_term, r_term, values, torch.tensor([10.0]))
    assert out_term.vs[1, 0].item() == pytest.approx(2.0)


def test_truncated_without_final_values_is_an_error():
    with pytest.raises(ValueError, match="final_values"):
        vtrace.episode_end_inputs(torch.ones(2, 1), torch.zeros(2, 1), torch.ones(2, 1), 0.9)


def test_shape_errors_name_the_argument():
    T, B = 4, 2
    good = [torch.zeros(T, B), torch.ones(T, B), torch.zeros(T, B), torch.zeros(T, B), torch.zeros(B)]
    bad = list(good)
    bad[4] = torch.zeros(B + 1)
    with pytest.raises(ValueError, match="bootstrap_value"):
        vtrace.from_importance_weights(*bad)
    bad = list(good)
    bad[2] = torch.zeros(T + 1, B)
    with pytest.raises(ValueError, match="rewards"):
        vtrace.from_importance_weights(*bad)
