"""The learner's V-trace targets on REAL CartPole unrolls (the project's own RolloutWorker and env vector)
against an independent float64 reference that reads episode ends straight from the unroll.

The reference does not use `vtrace.episode_end_inputs` nor the backward recursion: it derives time-limit
truncations from its own episode-length count, checks each final observation against one step of
CartPole's dynamics from the previous observation, and sums V-trace's explicit series (Espeholt et al.
2018, eq. 1) with the trace cut at every episode end.
"""

import copy

import numpy as np
import pytest
import torch

from levelray.actors.envs import make_env_vector
from levelray.actors.rollout import RolloutWorker
from levelray.contracts.config import EnvConfig, LearnerConfig
from levelray.contracts.trajectory import stack_unrolls
from levelray.learner import vtrace
from levelray.learner.learner import Learner

TIME_LIMIT = 25  # random CartPole play lasts ~22 steps: with T = 20 both kinds of episode end occur
T, K, N_UNROLLS = 20, 4, 4


def collect(behaviour_weights):
    cfg = EnvConfig(id="CartPole-v1", num_levels=0, max_episode_steps=TIME_LIMIT)
    worker = RolloutWorker(make_env_vector(cfg, K, None, seed=3), T, seed=3)
    worker.set_weights(0, behaviour_weights)
    unrolls = [worker.unroll() for _ in range(N_UNROLLS)]
    return worker, unrolls


def cartpole_step(obs, action):
    """CartPole-v1's Euler step from an observation (gymnasium's own code, its float64 state)."""
    import gymnasium as gym

    env = gym.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    env.state = np.asarray(obs, dtype=np.float64)
    out, *_ = env.step(int(action))
    return out


def forward64(model, x):
    """The MLP's two towers in float64 NumPy (its torch forward casts inputs to float32)."""

    def tower(seq, h):
        for m in seq:
            if isinstance(m, torch.nn.Linear):
                h = h @ m.weight.detach().double().numpy().T + m.bias.detach().double().numpy()
            else:
                h = np.tanh(h)
        return h

    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    return tower(model.policy, x), tower(model.value, x)[:, 0]


def reference_targets(forward, batch, gamma, rho_bar=1.0, c_bar=1.0, pg_bar=1.0):
    """Float64 V-trace per env column, episode ends read from the raw flags. `forward(obs [N, 4])` gives the
    network's (logits [N, A], values [N]). Returns (vs, pg_adv, values, rhos)."""
    obs = batch["obs"]
    Tn, B = batch["rewards"].shape
    params, values = forward(obs.reshape(-1, obs.shape[-1]))
    params, values = params.reshape(Tn + 1, B, -1), values.reshape(Tn + 1, B)
    final_v = {}
    for row, (t, k) in enumerate(batch.get("final_obs_index", np.zeros((0, 2), int))):
        final_v[(int(t), int(k))] = forward(batch["final_obs"][row : row + 1])[1][0]

    def logsoftmax(x):
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    a = batch["actions"]
    tgt = np.take_along_axis(logsoftmax(params[:Tn]), a[..., None], -1)[..., 0]
    beh = np.take_along_axis(logsoftmax(batch["behaviour_params"].astype(np.float64)), a[..., None], -1)[..., 0]
    rhos = np.exp(tgt - beh)
    r = batch["rewards"].astype(np.float64)
    term, trunc = batch["terminated"], batch["truncated"]

    def next_value(t, k):  # what the one-step target bootstraps from, and whether the trace continues
        if term[t, k]:
            return 0.0, False
        if trunc[t, k]:
            return final_v[(t, k)], False
        return values[t + 1, k], True

    vs = np.zeros((Tn, B))
    for k in range(B):
        for s in range(Tn):
            total, coef = 0.0, 1.0
            for t in range(s, Tn):
                nv, cont = next_value(t, k)
                total += coef * min(rho_bar, rhos[t, k]) * (r[t, k] + gamma * nv - values[t, k])
                if not cont:
                    break
                coef *= gamma * min(c_bar, rhos[t, k])
            vs[s, k] = values[s, k] + total
    pg = np.zeros((Tn, B))
    for k in range(B):
        for t in range(Tn):
            nv, cont = next_value(t, k)
            if cont:
                nv = vs[t + 1, k] if t + 1 < Tn else values[Tn, k]
            pg[t, k] = min(pg_bar, rhos[t, k]) * (r[t, k] + gamma * nv - values[t, k])
    return vs, pg, values, rhos


def check_episode_ends(unrolls):
    """Truncation flags from an own step count; final observations from CartPole's dynamics."""
    lengths = np.zeros(K, dtype=int)
    n_term = n_trunc = 0
    for u in unrolls:
        finals = {(int(t), int(k)): row for row, (t, k) in enumerate(u["final_obs_index"])}
        for t in range(T):
            lengths += 1
            for k in range(K):
                if u["terminated"][t, k]:
                    n_term += 1
                    assert not u["truncated"][t, k]
                    lengths[k] = 0
                    continue
                assert bool(u["truncated"][t, k]) == (lengths[k] == TIME_LIMIT), (t, k, lengths[k])
                if u["truncated"][t, k]:
                    n_trunc += 1
                    expected = cartpole_step(u["obs"][t, k], u["actions"][t, k])
                    np.testing.assert_allclose(u["final_obs"][finals[(t, k)]], expected, atol=1e-5)
                    # the next row already belongs to a fresh episode (CartPole resets within +-0.05)
                    assert np.abs(u["obs"][t + 1, k]).max() <= 0.05
                    lengths[k] = 0
    return n_term, n_trunc


CASES = [  # (off_policy, value_scale, value_normalization)
    (False, 1.0, False),
    (False, 100.0, False),
    (True, 1.0, False),
    (True, 100.0, False),
    (True, 1.0, True),
]


@pytest.mark.parametrize(
    "off_policy, value_scale, popart", CASES, ids=["on", "on_x100", "off", "off_x100", "off_popart"]
)
def test_learner_vtrace_on_real_cartpole_unrolls_matches_float64_reference(
    monkeypatch, off_policy, value_scale, popart
):
    learner = Learner(learner_spec(), LearnerConfig(learning_rate=0.0, value_normalization=popart), seed=0)
    if popart:  # statistics far from the identity: V-trace must see mu + sigma * head output, final values too
        learner.value_norm.mu, learner.value_norm.nu, learner.value_norm.count = 60.0, 60.0**2 + 15.0**2, 10
    with torch.no_grad():  # values of the size a trained CartPole value head outputs (up to ~100)
        learner.model.value[-1].weight.mul_(value_scale)
        learner.model.value[-1].bias.fill_(0.5 * value_scale)
    _, weights = learner.get_weights()
    if off_policy:  # the actors act with a sharper, different policy: real importance ratios, clipped often
        weights = dict(weights)
        last = [k for k in weights if k.startswith("policy.") and k.endswith(".weight")][-1]
        weights[last] = np.random.default_rng(1).normal(scale=0.5, size=weights[last].shape).astype(np.float32)
    _, unrolls = collect(weights)
    n_term, n_trunc = check_episode_ends(unrolls)
    print(f"terminations {n_term}, truncations {n_trunc}")
    assert n_term > 0 and n_trunc > 0
    batch = stack_unrolls(unrolls)

    captured = {}
    real = vtrace.from_importance_weights

    def spy(*args, **kwargs):
        captured["out"] = real(*args, **kwargs)
        return captured["out"]

    monkeypatch.setattr(vtrace, "from_importance_weights", spy)
    model_before = copy.deepcopy(learner.model)
    outputs = learner.update(batch).outputs

    def forward32(x):  # the learner's own float32 network, its outputs taken to float64
        with torch.no_grad():
            p, v = model_before(torch.from_numpy(np.asarray(x, dtype=np.float32)))
        if popart:  # statistics before the update (the update moves them)
            v = v.double() * 15.0 + 60.0
        return p.double().numpy(), v.double().numpy()

    # The float32 network is the float64 one to rounding (weights x100 amplify float32 rounding in its layers).
    p32, v32 = forward32(batch["obs"].reshape(-1, 4))
    p64, v64 = forward64(model_before, batch["obs"].reshape(-1, 4))
    v64 = v64 * 15.0 + 60.0 if popart else v64
    np.testing.assert_allclose(v32, v64, rtol=1e-5, atol=2e-5 * value_scale)
    np.testing.assert_allclose(p32, p64, rtol=1e-5, atol=1e-5)
    vs_ref, pg_ref, values_ref, rhos = reference_targets(forward32, batch, learner.config.discount)

    # float32 rounding is relative to the size of the values that enter each target (r + gamma V' - V)
    scale = max(1.0, np.abs(values_ref).max(), np.abs(vs_ref).max())
    np.testing.assert_allclose(outputs.values, values_ref.reshape(T + 1, -1), rtol=1e-6, atol=1e-6)
    err_vs = np.max(np.abs(captured["out"].vs.double().numpy() - vs_ref) / scale)
    err_pg = np.max(np.abs(captured["out"].pg_advantages.double().numpy() - pg_ref) / scale)
    print(f"max relative error: vs {err_vs:.2e}, pg advantages {err_pg:.2e}; scale {scale:.1f}")
    assert err_vs < 1e-6 and err_pg < 1e-6
    vs_learner = outputs.advantages + outputs.values[:T]
    assert np.max(np.abs(vs_learner - vs_ref) / scale) < 1e-6
    if off_policy:
        print(f"rho > 1: {(rhos > 1).mean():.2f}, rho < 0.8: {(rhos < 0.8).mean():.2f}")
        assert (rhos > 1.0).mean() > 0.2 and (rhos < 0.8).mean() > 0.1
    else:
        np.testing.assert_allclose(rhos, 1.0, atol=1e-5)


def learner_spec():
    from levelray.actors.envs import env_spec

    return env_spec(EnvConfig(id="CartPole-v1", num_levels=0))
