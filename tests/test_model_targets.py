"""MuZero-style model targets (learner/model_targets.py) against independent references.

n-step returns are checked against a float64 pure-Python evaluation of the defining sum, which folds
truncations into rewards and discounts itself; the implementation gets its inputs from V-trace's
`episode_end_inputs`, so the two agree only if the returns and the folding convention both match.
Window targets are checked on hand-built unrolls whose expected fields are written out literally, and
against a per-window scalar reference on random unrolls.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from levelray.learner import model_targets as mt
from levelray.learner.vtrace import episode_end_inputs

GAMMA = 0.97


def assert_close(actual: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-6, atol: float = 1e-6) -> None:
    """numpy's assert_allclose on tensors (torch.testing's first call costs seconds of lazy imports)."""
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    np.testing.assert_allclose(actual.detach().numpy(), expected.detach().numpy(), rtol=rtol, atol=atol)


# --------------------------------------------------------------------------------------------------
# nstep_returns / linear_td_steps
# --------------------------------------------------------------------------------------------------


def random_episode_batch(seed: int, T: int = 9, B: int = 6):
    """Raw rewards, episode-end flags and values; about a fifth of the steps end an episode."""
    rng = np.random.default_rng(seed)
    raw_rewards = rng.normal(size=(T, B))
    terminated = rng.random((T, B)) < 0.12
    truncated = rng.random((T, B)) < 0.12  # may coincide with a termination: the termination wins
    final_values = rng.normal(size=(T, B))  # V(final observation), used where truncated
    values = rng.normal(size=(T + 1, B))
    return raw_rewards, terminated, truncated, final_values, values


def reference_nstep(raw_rewards, terminated, truncated, final_values, values, gamma, td_steps):
    """float64, element by element: fold episode ends, then z_t from its defining sum."""
    T, B = len(raw_rewards), len(raw_rewards[0])
    rewards = [[float(raw_rewards[t][b]) for b in range(B)] for t in range(T)]
    discounts = [[gamma] * B for _ in range(T)]
    for t in range(T):
        for b in range(B):
            if terminated[t][b]:
                discounts[t][b] = 0.0
            elif truncated[t][b]:
                rewards[t][b] += gamma * float(final_values[t][b])
                discounts[t][b] = 0.0
    z = [[0.0] * B for _ in range(T)]
    for t in range(T):
        for b in range(B):
            td = td_steps if isinstance(td_steps, int) else int(td_steps[t][b])
            m = T - t if td == -1 else min(td, T - t)
            total = 0.0
            for i in range(m):
                coef = 1.0
                for j in range(i):
                    coef *= discounts[t + j][b]
                total += coef * rewards[t + i][b]
            coef = 1.0
            for j in range(m):
                coef *= discounts[t + j][b]
            z[t][b] = total + coef * float(values[t + m][b])
    return np.array(z)


def implementation_inputs(raw_rewards, terminated, truncated, final_values, values, dtype):
    discounts, rewards = episode_end_inputs(
        torch.tensor(raw_rewards, dtype=dtype),
        torch.tensor(terminated),
        torch.tensor(truncated),
        GAMMA,
        final_values=torch.tensor(final_values, dtype=dtype),
    )
    return rewards, discounts, torch.tensor(values, dtype=dtype)


def test_nstep_returns_hand_computed():
    rewards = torch.tensor([[1.0], [2.0], [4.0]])
    discounts = torch.full((3, 1), 0.5)
    values = torch.full((4, 1), 8.0)
    z = mt.nstep_returns(rewards, discounts, values, td_steps=2)
    # z_0 = 1 + .5*2 + .25*8; z_1 = 2 + .5*4 + .25*8; z_2 = 4 + .5*8 (horizon cut at T)
    assert z.flatten().tolist() == [4.0, 6.0, 8.0]


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 2e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("td_steps", [1, 3, 9, 20, -1])
@pytest.mark.parametrize("seed", [0, 1])
def test_nstep_returns_match_reference(seed, td_steps, dtype, tol):
    batch = random_episode_batch(seed)
    assert batch[1].any() and batch[2].any(), "the inputs must contain terminations and truncations"
    rewards, discounts, values = implementation_inputs(*batch, dtype)
    z = mt.nstep_returns(rewards, discounts, values, td_steps=td_steps)
    assert z.dtype == dtype
    assert z.shape == rewards.shape
    expected = reference_nstep(*batch, GAMMA, td_steps)
    np.testing.assert_allclose(z.double().numpy(), expected, rtol=tol, atol=tol)


def test_nstep_returns_td_to_end_equals_td_T():
    batch = random_episode_batch(3)
    rewards, discounts, values = implementation_inputs(*batch, torch.float64)
    T = rewards.shape[0]
    assert torch.equal(
        mt.nstep_returns(rewards, discounts, values, td_steps=-1),
        mt.nstep_returns(rewards, discounts, values, td_steps=T),
    )


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 2e-5), (torch.float64, 1e-12)])
def test_nstep_returns_per_element_td_steps(dtype, tol):
    batch = random_episode_batch(4)
    rewards, discounts, values = implementation_inputs(*batch, dtype)
    T, B = rewards.shape
    td = torch.from_numpy(np.random.default_rng(5).integers(1, T + 3, size=(T, B)))
    z = mt.nstep_returns(rewards, discounts, values, td_steps=td)
    assert z.dtype == dtype
    np.testing.assert_allclose(z.double().numpy(), reference_nstep(*batch, GAMMA, td.tolist()), rtol=tol, atol=tol)


def test_nstep_returns_with_linear_td_steps():
    batch = random_episode_batch(6)
    rewards, discounts, values = implementation_inputs(*batch, torch.float64)
    T, B = rewards.shape
    age = torch.from_numpy(np.random.default_rng(7).integers(0, 12, size=(T, B)))
    td = mt.linear_td_steps(age, max_td_steps=6, min_td_steps=1, max_bootstrap_age=10)
    assert td.min() >= 1 and td.max() == 6
    z = mt.nstep_returns(rewards, discounts, values, td_steps=td)
    np.testing.assert_allclose(z.numpy(), reference_nstep(*batch, GAMMA, td.tolist()), rtol=1e-12, atol=1e-12)


def reference_linear_td_steps(age, max_td_steps, min_td_steps, max_bootstrap_age):
    return math.ceil(min_td_steps + (max_td_steps - min_td_steps) * max(0.0, 1 - age / max_bootstrap_age))


@pytest.mark.parametrize(
    "max_td_steps, min_td_steps, max_bootstrap_age", [(5, 1, 10), (10, 3, 7.5), (4, 4, 1), (8, 1, 3)]
)
def test_linear_td_steps_match_reference(max_td_steps, min_td_steps, max_bootstrap_age):
    rng = np.random.default_rng(8)
    ints = rng.integers(0, 25, size=(4, 5)).astype(np.float64)
    floats = rng.uniform(0, 15, size=(4, 5))
    for ages in (torch.from_numpy(ints).long(), torch.from_numpy(floats).float(), torch.from_numpy(floats)):
        td = mt.linear_td_steps(
            ages, max_td_steps=max_td_steps, min_td_steps=min_td_steps, max_bootstrap_age=max_bootstrap_age
        )
        assert td.dtype == torch.int64 and td.shape == ages.shape
        expected = [
            [reference_linear_td_steps(float(a), max_td_steps, min_td_steps, max_bootstrap_age) for a in row]
            for row in ages.double().tolist()
        ]
        assert td.tolist() == expected


def test_linear_td_steps_endpoints():
    td = mt.linear_td_steps(torch.tensor([0, 1, 5, 9, 10, 50]), max_td_steps=5, max_bootstrap_age=10)
    # 1 + 4 * (1 - age / 10): 5, 4.6 -> 5, 3, 1.4 -> 2, 1, clipped 1
    assert td.tolist() == [5, 5, 3, 2, 1, 1]


def test_nstep_returns_bad_arguments():
    T, B = 4, 3
    rewards, discounts, values = torch.zeros(T, B), torch.zeros(T, B), torch.zeros(T + 1, B)
    for td_steps in (0, -2, -10):
        with pytest.raises(ValueError, match="td_steps"):
            mt.nstep_returns(rewards, discounts, values, td_steps=td_steps)
    with pytest.raises(TypeError, match="td_steps"):
        mt.nstep_returns(rewards, discounts, values, td_steps=1.5)
    with pytest.raises(ValueError, match="values"):
        mt.nstep_returns(rewards, discounts, torch.zeros(T, B), td_steps=1)
    with pytest.raises(ValueError, match="values"):
        mt.nstep_returns(rewards, discounts, torch.zeros(T + 1, B + 1), td_steps=1)
    with pytest.raises(ValueError, match="discounts"):
        mt.nstep_returns(rewards, torch.zeros(T + 1, B), values, td_steps=1)
    with pytest.raises(ValueError, match="discounts"):
        mt.nstep_returns(rewards, discounts.double(), values, td_steps=1)
    with pytest.raises(ValueError, match="rewards"):
        mt.nstep_returns(torch.zeros(T), discounts, values, td_steps=1)
    bad_td = torch.ones(T, B, dtype=torch.long)
    bad_td[2, 1] = 0
    with pytest.raises(ValueError, match="td_steps"):
        mt.nstep_returns(rewards, discounts, values, td_steps=bad_td)
    with pytest.raises(ValueError, match="td_steps"):
        mt.nstep_returns(rewards, discounts, values, td_steps=torch.ones(T, B))  # float horizon
    with pytest.raises(ValueError, match="td_steps"):
        mt.nstep_returns(rewards, discounts, values, td_steps=torch.ones(T, B + 1, dtype=torch.long))


def test_linear_td_steps_bad_arguments():
    age = torch.arange(4)
    for max_bootstrap_age in (0, -1, 0.0, float("nan")):
        with pytest.raises(ValueError, match="max_bootstrap_age"):
            mt.linear_td_steps(age, max_td_steps=5, max_bootstrap_age=max_bootstrap_age)
    with pytest.raises(ValueError, match="min_td_steps"):
        mt.linear_td_steps(age, max_td_steps=5, min_td_steps=0, max_bootstrap_age=10)
    with pytest.raises(ValueError, match="max_td_steps"):
        mt.linear_td_steps(age, max_td_steps=2, min_td_steps=3, max_bootstrap_age=10)
    with pytest.raises(ValueError, match="age"):
        mt.linear_td_steps(torch.tensor([-1]), max_td_steps=5, max_bootstrap_age=10)


# --------------------------------------------------------------------------------------------------
# value transform, supports, two-hot
# --------------------------------------------------------------------------------------------------


def wide_range(dtype=torch.float64):
    magnitudes = torch.logspace(-8, 9, 400, dtype=dtype)
    return torch.cat([-magnitudes.flip(0), torch.zeros(1, dtype=dtype), magnitudes])


@pytest.mark.parametrize("eps", [1e-3, 1e-2, 0.0])
def test_value_transform_round_trip_float64(eps):
    x = wide_range()
    y = mt.value_transform(x, eps)
    assert_close(mt.inverse_value_transform(y, eps), x, rtol=1e-12, atol=1e-14)
    assert_close(mt.value_transform(mt.inverse_value_transform(x, eps), eps), x, rtol=1e-12, atol=1e-14)
    assert bool((y[1:] > y[:-1]).all()), "h must be strictly increasing"


def test_value_transform_known_values():
    x = torch.tensor([0.0, 3.0, -8.0, 99.0], dtype=torch.float64)
    # sign(x) (sqrt(|x| + 1) - 1) + 1e-3 x
    expected = torch.tensor([0.0, 1.0 + 3e-3, -2.0 - 8e-3, 9.0 + 99e-3], dtype=torch.float64)
    assert_close(mt.value_transform(x), expected, rtol=1e-15, atol=0.0)


def test_value_transform_round_trip_float32_near_zero():
    x = torch.linspace(-1, 1, 2001)
    assert (mt.inverse_value_transform(mt.value_transform(x)) - x).abs().max() < 1e-6


@pytest.mark.parametrize("support_size", [1, 5, 300])
def test_two_hot_round_trip(support_size):
    support = mt.make_support(support_size)
    assert support.dtype == torch.float32 and support.shape == (2 * support_size + 1,)
    assert support.tolist() == list(range(-support_size, support_size + 1))
    g = torch.Generator().manual_seed(support_size)
    x = (torch.rand(6, 50, generator=g) * 4 - 2) * support_size  # half of it outside the support
    x[0, :3] = torch.tensor([-support_size, 0, support_size], dtype=x.dtype)  # exact atoms and endpoints
    probs = mt.two_hot(x, support)
    assert probs.shape == (6, 50, 2 * support_size + 1)
    assert bool((probs >= 0).all())
    assert_close(probs.sum(-1), torch.ones(6, 50), rtol=0, atol=1e-6)
    nonzero = (probs > 0).sum(-1)
    assert int(nonzero.max()) <= 2
    clipped = x.clamp(-support_size, support_size)
    assert_close(mt.from_categorical(probs, support), clipped, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("step", [0.05, 0.3, 2.5])
def test_a_support_with_a_step_spaces_its_atoms_and_round_trips(step):
    """Atoms `k * step` for k = -S..S (against float64 arithmetic); a two-hot on them has its value as mean."""
    support = mt.make_support(20, step=step, dtype=torch.float64)
    assert support.tolist() == pytest.approx([k * step for k in range(-20, 21)], rel=1e-15, abs=1e-15)
    g = torch.Generator().manual_seed(7)
    x = (torch.rand(400, generator=g, dtype=torch.float64) * 2.4 - 1.2) * 20 * step  # some outside the support
    probs = mt.two_hot(x, support)
    assert int((probs > 0).sum(-1).max()) <= 2
    assert_close(mt.from_categorical(probs, support), x.clamp(-20 * step, 20 * step), rtol=0, atol=1e-12)
    for bad in (0, -0.1, float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="step"):
            mt.make_support(5, step=bad)


def test_minigrid_returns_spread_over_many_atoms():
    """MiniGrid's returns lie in [0, 1]: its preset's support puts 9 atoms in [h(0), h(1)], MuZero's integer
    atoms only 1 (0), so a two-hot there had at most two atoms to use; procgen keeps the integer atoms."""
    from levelray.contracts.config import RunConfig, replace_paths
    from levelray.contracts.presets import apply_preset

    top = float(mt.value_transform(torch.tensor(1.0, dtype=torch.float64)))
    for env_id, inside in (("minigrid:DoorKey-5x5", 9), ("maze:13x13", 9), ("procgen:bigfish", 1)):
        cfg = apply_preset(replace_paths(RunConfig(), {"env.id": env_id}), {"env.id"})
        support = mt.make_support(cfg.model_loss.support_size, step=cfg.model_loss.support_step,
                                  dtype=torch.float64)
        assert int(((support >= 0) & (support <= top)).sum()) == inside, env_id


def test_two_hot_hand_examples():
    support = mt.make_support(2)
    probs = mt.two_hot(torch.tensor([1.25, -2.5, 2.0, 0.0, -0.75]), support)
    expected = torch.tensor(
        [
            [0, 0, 0, 0.75, 0.25],
            [1, 0, 0, 0, 0],
            [0, 0, 0, 0, 1],
            [0, 0, 1, 0, 0],
            [0, 0.75, 0.25, 0, 0],
        ]
    )
    assert torch.equal(probs, expected)


def test_two_hot_uneven_support():
    support = torch.tensor([-1.0, 0.0, 0.5, 2.0])
    probs = mt.two_hot(torch.tensor([0.25, 1.25]), support)
    assert torch.equal(probs, torch.tensor([[0, 0.5, 0.5, 0], [0, 0, 0.5, 0.5]]))
    with pytest.raises(ValueError, match="support"):
        mt.two_hot(torch.zeros(2), torch.tensor([0.0, 0.0, 1.0]))


# --------------------------------------------------------------------------------------------------
# scale_gradient, step_weights
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 4])
def test_scale_gradient_in_linear_unroll(k):
    g = torch.Generator().manual_seed(10 + k)
    d, a_dim, B = 4, 2, 3
    W = torch.randn(d, d, generator=g, dtype=torch.float64)
    U = torch.randn(d, a_dim, generator=g, dtype=torch.float64)
    actions = torch.randn(k, B, a_dim, generator=g, dtype=torch.float64)
    target = torch.randn(B, d, generator=g, dtype=torch.float64)
    s0_value = torch.randn(B, d, generator=g, dtype=torch.float64)

    def unrolled_gradient(scale):
        s0 = s0_value.clone().requires_grad_(True)
        s = s0
        for i in range(k):
            s = s @ W.T + actions[i] @ U.T  # s_{i+1} = W s_i + U a_i
            if scale is not None:
                s = mt.scale_gradient(s, scale)
        loss = ((s - target) ** 2).sum()
        (grad,) = torch.autograd.grad(loss, s0)
        return s.detach(), grad

    s_plain, grad_plain = unrolled_gradient(None)
    s_scaled, grad_scaled = unrolled_gradient(0.5)
    assert torch.equal(s_scaled, s_plain), "forward pass must be the identity"
    assert grad_plain.abs().max() > 1e-3
    assert_close(grad_scaled, 0.5**k * grad_plain, rtol=1e-12, atol=0)


def test_scale_gradient_forward_exact_and_backward_scaled():
    x = torch.tensor([0.1, -3.7, 1e30, float("inf")], requires_grad=True)
    y = mt.scale_gradient(x, 0.3)
    assert torch.equal(y.detach(), x.detach())
    y.backward(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert_close(x.grad, torch.tensor([0.3, 0.6, 0.9, 1.2]))


def test_step_weights():
    assert mt.step_weights(4).tolist() == [1.0, 0.25, 0.25, 0.25, 0.25]
    assert mt.step_weights(1).tolist() == [1.0, 1.0]
    assert mt.step_weights(0).tolist() == [1.0]
    w = mt.step_weights(5, dtype=torch.float64)
    assert w.dtype == torch.float64
    assert_close(w, torch.tensor([1.0, 0.2, 0.2, 0.2, 0.2, 0.2], dtype=torch.float64))
    assert float(w[1:].sum()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="num_unroll_steps"):
        mt.step_weights(-1)


# --------------------------------------------------------------------------------------------------
# window_targets
# --------------------------------------------------------------------------------------------------

T_HAND, B_HAND, K_HAND = 6, 4, 3


def hand_unroll(policy_rows: int):
    """T = 6 steps, 4 columns; rewards[t, b] = 10 b + t + 1 and value_targets[t, b] = 100 + 10 b + t.

    column 0: terminated after steps 0 and 2
    column 1: truncated after step 3, then terminated after step 4 (the truncation comes first)
    column 2: no episode end
    column 3: terminated and truncated after the last stored step 5 (counts as a termination)
    """
    t = torch.arange(T_HAND).unsqueeze(1)
    b = torch.arange(B_HAND)
    rewards = (10 * b + t + 1).float()
    value_targets = (100 + 10 * b + torch.arange(T_HAND + 1).unsqueeze(1)).float()
    terminated = torch.zeros(T_HAND, B_HAND, dtype=torch.bool)
    truncated = torch.zeros(T_HAND, B_HAND, dtype=torch.bool)
    terminated[0, 0] = terminated[2, 0] = True
    truncated[3, 1] = True
    terminated[4, 1] = True
    terminated[5, 3] = truncated[5, 3] = True
    rows = torch.arange(policy_rows).unsqueeze(1).unsqueeze(2)
    first = (rows + 1) / 16 + b.unsqueeze(1) / 128  # distinct per (row, column), exact in float32
    policy_targets = torch.cat([first, 1 - first], dim=2)
    return rewards, terminated, truncated, value_targets, policy_targets


# window i: (start t, column b)
HAND_STARTS = [1, 2, 4, 4, 3, 0]
HAND_COLUMNS = [0, 1, 2, 3, 0, 0]
# fmt: off
HAND_EXPECTED = {
    #                  terminates  truncates   off the end   term. at T    after an end  terminates at k=1
    "reward":         [[0, 2, 3, 0], [0, 13, 14, 0], [0, 25, 26, 0], [0, 35, 36, 0], [0, 4, 5, 6], [0, 1, 0, 0]],
    "reward_mask":    [[0, 1, 1, 1], [0, 1, 1, 0], [0, 1, 1, 0], [0, 1, 1, 1], [0, 1, 1, 1], [0, 1, 1, 1]],
    "value":          [[101, 102, 0, 0], [112, 113, 0, 0], [124, 125, 126, 0], [134, 135, 0, 0],
                       [103, 104, 105, 106], [100, 0, 0, 0]],
    "value_mask":     [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]],
    "terminal":       [[0, 0, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 1], [0, 0, 0, 0], [0, 1, 1, 1]],
    "terminal_mask":  [[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]],
    "consistency_mask": [[0, 1, 0, 0], [0, 1, 0, 0], [0, 1, 1, 0], [0, 1, 0, 0], [0, 1, 1, 1], [0, 0, 0, 0]],
}
# policy at t + k = T (= 6) exists only with T + 1 policy rows: windows 2 (k = 2) and 4 (k = 3)
HAND_POLICY_MASK = {
    T_HAND + 1: [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]],
    T_HAND:     [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]],
}
# fmt: on


@pytest.mark.parametrize("policy_rows", [T_HAND + 1, T_HAND])
def test_window_targets_hand_built(policy_rows):
    rewards, terminated, truncated, value_targets, policy_targets = hand_unroll(policy_rows)
    targets = mt.window_targets(
        rewards,
        terminated,
        truncated,
        value_targets,
        torch.tensor(HAND_STARTS),
        torch.tensor(HAND_COLUMNS),
        num_unroll_steps=K_HAND,
        policy_targets=policy_targets,
    )
    n = len(HAND_STARTS)
    for name, expected in HAND_EXPECTED.items():
        actual = getattr(targets, name)
        assert actual.dtype == torch.float32, name
        assert actual.shape == (n, K_HAND + 1), name
        assert actual.tolist() == expected, name
    policy_mask = HAND_POLICY_MASK[policy_rows]
    assert targets.policy_mask.tolist() == policy_mask
    assert targets.policy.shape == (n, K_HAND + 1, 2)
    for i, (t, b) in enumerate(zip(HAND_STARTS, HAND_COLUMNS, strict=True)):
        for k in range(K_HAND + 1):
            expected = policy_targets[t + k, b] if policy_mask[i][k] else torch.zeros(2)
            assert torch.equal(targets.policy[i, k], expected), (i, k)


def test_window_targets_without_policy_and_without_unroll():
    rewards, terminated, truncated, value_targets, _ = hand_unroll(T_HAND)
    starts, columns = torch.tensor(HAND_STARTS), torch.tensor(HAND_COLUMNS)
    targets = mt.window_targets(rewards, terminated, truncated, value_targets, starts, columns, num_unroll_steps=K_HAND)
    assert targets.policy is None
    assert targets.policy_mask.tolist() == HAND_POLICY_MASK[T_HAND]  # as for T policy rows
    root = mt.window_targets(rewards, terminated, truncated, value_targets, starts, columns, num_unroll_steps=0)
    assert root.value.tolist() == [[row[0]] for row in HAND_EXPECTED["value"]]
    assert root.reward_mask.tolist() == [[0]] * len(HAND_STARTS)
    assert root.consistency_mask.tolist() == [[0]] * len(HAND_STARTS)
    assert root.value_mask.tolist() == root.terminal_mask.tolist() == [[1]] * len(HAND_STARTS)


def reference_window(rewards, terminated, truncated, value_targets, policy_rows, t, b, K):
    """One window, step by step, straight from the table in `window_targets`' docstring.

    Returns the expected fields and which episode end (if any) the window saw first."""
    T = len(rewards)
    out = {key: [] for key in (*HAND_EXPECTED, "policy_mask")}
    end = None  # "terminated" or "truncated" once the first episode end in the window has passed
    for k in range(K + 1):
        s = t + k
        row = dict.fromkeys(out, 0.0)
        if k == 0:
            row.update(value=value_targets[s][b], value_mask=1, terminal_mask=1, policy_mask=float(s < policy_rows))
        elif end == "terminated":
            row.update(reward_mask=1, value_mask=1, terminal=1, terminal_mask=1)
        elif end is None and s <= T:
            j = s - 1
            row.update(reward=rewards[j][b], reward_mask=1)
            if terminated[j][b]:
                row.update(value_mask=1, terminal=1, terminal_mask=1)
                end = "terminated"
            elif truncated[j][b]:
                end = "truncated"
            else:
                row.update(value=value_targets[s][b], value_mask=1, terminal_mask=1, consistency_mask=1)
                row.update(policy_mask=float(s < policy_rows))
        for key in out:
            out[key].append(float(row[key]))
    return out, end


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_window_targets_match_reference_on_random_unrolls(seed):
    rng = np.random.default_rng(seed)
    T, B, K, n = 7, 5, 4, 60
    rewards = rng.normal(size=(T, B)).astype(np.float32)
    value_targets = rng.normal(size=(T + 1, B)).astype(np.float32)
    terminated = rng.random((T, B)) < 0.2
    truncated = rng.random((T, B)) < 0.2
    starts = rng.integers(0, T, size=n)
    columns = rng.integers(0, B, size=n)
    policy_rows = T + int(seed % 2)
    policy_targets = torch.softmax(torch.from_numpy(rng.normal(size=(policy_rows, B, 3))).float(), -1)
    targets = mt.window_targets(
        torch.from_numpy(rewards),
        torch.from_numpy(terminated),
        torch.from_numpy(truncated),
        torch.from_numpy(value_targets),
        torch.from_numpy(starts),
        torch.from_numpy(columns),
        num_unroll_steps=K,
        policy_targets=policy_targets,
    )
    seen_ends = set()
    for i in range(n):
        expected, end = reference_window(
            rewards.tolist(), terminated, truncated, value_targets.tolist(), policy_rows, starts[i], columns[i], K
        )
        for key, values in expected.items():
            assert getattr(targets, key)[i].tolist() == values, (i, key)
        for k in range(K + 1):
            s = starts[i] + k
            want = policy_targets[s, columns[i]] if expected["policy_mask"][k] else torch.zeros(3)
            assert torch.equal(targets.policy[i, k], want), (i, k)
        seen_ends.add(end)
    assert seen_ends == {None, "terminated", "truncated"}, "the windows must exercise both kinds of episode end"


def test_window_targets_bad_arguments():
    rewards, terminated, truncated, value_targets, policy_targets = hand_unroll(T_HAND + 1)
    starts, columns = torch.tensor(HAND_STARTS), torch.tensor(HAND_COLUMNS)

    def call(**overrides):
        kwargs = dict(
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            value_targets=value_targets,
            starts=starts,
            columns=columns,
            num_unroll_steps=K_HAND,
            policy_targets=policy_targets,
        )
        kwargs.update(overrides)
        return mt.window_targets(**kwargs)

    cases = {
        "value_targets": dict(value_targets=value_targets[:-1]),
        "terminated": dict(terminated=terminated[:, :2]),
        "truncated": dict(truncated=truncated[1:]),
        "policy_targets": dict(policy_targets=policy_targets[:-2]),
        "starts": dict(starts=torch.tensor([0, 1, 2, 3, 4, T_HAND])),
        "columns": dict(columns=torch.tensor([-1, 0, 0, 0, 0, 0])),
        "num_unroll_steps": dict(num_unroll_steps=-1),
    }
    for name, overrides in cases.items():
        with pytest.raises(ValueError, match=name):
            call(**overrides)
    with pytest.raises(ValueError, match="starts"):
        call(starts=torch.tensor([0.0, 1.0]), columns=torch.tensor([0, 1]))
