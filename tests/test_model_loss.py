"""The model loss (`--model-loss muzero`, `learner/model_loss.py`): targets and masks on hand-built unrolls
against a float64 reference, gradient scaling through the dynamics, the target network's schedule, the
priorities written back to replay, checkpoint/resume, and the config checks. End to end runs are in
tests/test_model_loss_e2e.py."""

from __future__ import annotations

import copy
import io

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from levelray.actors.envs import env_spec, make_env_vector
from levelray.actors.rollout import RolloutWorker
from levelray.contracts import snapshot
from levelray.contracts.config import ModelLossConfig, RunConfig, replace_path, replace_paths
from levelray.contracts.presets import apply_preset
from levelray.contracts.spec import EnvSpec
from levelray.deploy.cli import main
from levelray.deploy.training.components import make_replay
from levelray.learner.core import LearnerCore
from levelray.learner.model_batch import ModelBatch
from levelray.learner.model_loss import ModelLoss, MuZeroLoss, model_losses
from levelray.learner.model_targets import inverse_value_transform, step_weights, two_hot, value_transform
from levelray.policy.models import MLP

SPEC = EnvSpec(obs_shape=(4,), obs_dtype="float32", discrete=True, num_actions=2)
GAMMA = 0.9


def _hand_batch(T: int = 6) -> ModelBatch:
    """Three sequences of a [T, 3] unroll: column 0 terminates after step 2, column 1 is truncated after
    step 3, column 2 runs off the end of the stored data (start 4, K = 3 reaches step 7 > T)."""
    rng = np.random.default_rng(0)
    n = 3
    terminated = np.zeros((T, n), bool)
    truncated = np.zeros((T, n), bool)
    terminated[2, 0] = True
    truncated[3, 1] = True
    final_values = np.zeros((T, n), np.float32)
    final_values[3, 1] = 2.5
    return ModelBatch(
        obs=rng.normal(size=(T + 1, n, 4)).astype(np.float32),
        actions=rng.integers(0, 2, size=(T, n)),
        rewards=rng.normal(size=(T, n)).astype(np.float32),
        terminated=terminated,
        truncated=truncated,
        behaviour_params=rng.normal(size=(T, n, 2)).astype(np.float32),
        values=rng.normal(size=(T + 1, n)).astype(np.float32),
        final_values=final_values,
        final_obs=rng.normal(size=(1, 4)).astype(np.float32),
        final_obs_index=np.array([[3, 1]]),
        age=np.zeros(n),
        starts=np.array([1, 1, 4]),
        weights=np.ones(n, np.float32),
        ids=np.arange(n),
    )


def _reference_returns(b: ModelBatch, td: int) -> np.ndarray:
    """z [T+1, n] in float64 by the formula, with loops: episode ends folded as V-trace folds them."""
    T, n = b.rewards.shape
    r = b.rewards.astype(np.float64).copy()
    d = np.full((T, n), GAMMA)
    for t in range(T):
        for i in range(n):
            if b.terminated[t, i]:
                d[t, i] = 0.0
            elif b.truncated[t, i]:
                d[t, i] = 0.0
                r[t, i] += GAMMA * float(b.final_values[t, i])
    v = b.values.astype(np.float64)
    z = np.zeros((T + 1, n))
    for i in range(n):
        for t in range(T + 1):
            m = min(td, T - t)
            total, coef = 0.0, 1.0
            for j in range(m):
                total += coef * r[t + j, i]
                coef *= d[t + j, i]
            z[t, i] = total + coef * v[t + m, i]
    return z


def muzero_of(learner) -> MuZeroLoss | None:
    """The learner's model loss (its auxiliary loss `model`), None without one."""
    return next((aux.muzero for aux in learner.auxiliary if isinstance(aux, ModelLoss)), None)


def _muzero(**overrides) -> MuZeroLoss:
    cfg = ModelLossConfig(**{"loss": "muzero", "num_unroll_steps": 3, "td_steps": 2, **overrides})
    torch.manual_seed(0)
    return MuZeroLoss(MLP(SPEC), 2, cfg, discount=GAMMA, device=torch.device("cpu"))


def test_masks_and_value_targets_on_hand_built_unrolls():
    b = _hand_batch()
    targets, reanalysed = _muzero().targets(b)
    z = _reference_returns(b, td=2)
    r = b.rewards
    assert not reanalysed.any()
    # column 0: terminated after step 2 = the transition into unroll step k* = 2 -> absorbing from there
    np.testing.assert_array_equal(targets.value_mask[0], [1, 1, 1, 1])
    np.testing.assert_allclose(targets.value[0], [z[1, 0], z[2, 0], 0, 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(targets.reward_mask[0], [0, 1, 1, 1])
    np.testing.assert_allclose(targets.reward[0], [0, r[1, 0], r[2, 0], 0], rtol=1e-6)
    np.testing.assert_array_equal(targets.terminal[0], [0, 0, 1, 1])
    np.testing.assert_array_equal(targets.policy_mask[0], [1, 1, 0, 0])
    np.testing.assert_array_equal(targets.consistency_mask[0], [0, 1, 0, 0])
    # column 1: truncated after step 3 (k* = 3): the last real reward is trained, nothing else from there
    np.testing.assert_array_equal(targets.value_mask[1], [1, 1, 1, 0])
    np.testing.assert_allclose(targets.value[1], [z[1, 1], z[2, 1], z[3, 1], 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(targets.reward_mask[1], [0, 1, 1, 1])
    np.testing.assert_allclose(targets.reward[1], [0, r[1, 1], r[2, 1], r[3, 1]], rtol=1e-6)
    np.testing.assert_array_equal(targets.terminal_mask[1], [1, 1, 1, 0])
    np.testing.assert_array_equal(targets.policy_mask[1], [1, 1, 1, 0])
    np.testing.assert_array_equal(targets.consistency_mask[1], [0, 1, 1, 0])
    # the truncated step's bootstrap (folded final value) reaches z_2 and z_3 of column 1
    assert z[3, 1] == pytest.approx(r[3, 1] + GAMMA * 2.5, rel=1e-6)
    # column 2: start 4 of T = 6; x_6 is the stored bootstrap observation, step 7 does not exist
    np.testing.assert_array_equal(targets.value_mask[2], [1, 1, 1, 0])
    np.testing.assert_allclose(targets.value[2], [z[4, 2], z[5, 2], b.values[6, 2], 0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(targets.reward_mask[2], [0, 1, 1, 0])
    # stored policy targets (behaviour logits) exist for x_0 .. x_{T-1}: x_6 has none
    np.testing.assert_array_equal(targets.policy_mask[2], [1, 1, 0, 0])
    probs = torch.from_numpy(b.behaviour_params).softmax(-1)
    np.testing.assert_allclose(targets.policy[2, 1], probs[5, 2], rtol=1e-6)
    assert float(targets.policy[2, 2].abs().sum()) == 0.0


def test_reanalysed_targets_come_from_the_target_network():
    b = _hand_batch()
    mz = _muzero(reanalyze_ratio=1.0)
    with torch.no_grad():  # make the target network differ from the stored values
        for p in mz.target_module.prediction.parameters():
            p.normal_()
    values, finals, policy = mz._reanalyse(torch.from_numpy(b.obs), torch.from_numpy(b.final_obs))
    re = copy.copy(b)
    re.values, re.final_values = values.numpy(), np.zeros_like(b.final_values)
    re.final_values[3, 1] = float(finals[0])
    z = _reference_returns(re, td=2)
    targets, reanalysed = mz.targets(b)
    assert reanalysed.all()
    np.testing.assert_allclose(targets.value[:, 0], z[[1, 1, 4], [0, 1, 2]], rtol=1e-5, atol=1e-5)
    # the reanalysed policy exists at x_T too (T + 1 rows): column 2's step 2 is x_6
    np.testing.assert_array_equal(targets.policy_mask[2], [1, 1, 1, 0])
    np.testing.assert_allclose(targets.policy[2, 2], policy[6, 2], rtol=1e-6)


@pytest.mark.parametrize("scale", [0.5, 0.3, 1.0])
def test_predictions_at_step_k_reach_the_representation_scaled_by_c_to_the_k_minus_1(scale):
    """MuZero's and ALF's rule, against a float64 reference: with linear dynamics s' = A s + B onehot(a) + b
    (A = I + W_s), a loss sum_k <d_k, s_k> over the heads' latents k = 0..K gives s_0 the gradient
    d_0 + sum_{k>=1} c^(k-1) (A^k)^T d_k: the heads read each s_k unscaled, only the latent passed on to the
    next dynamics step is scaled by c."""
    K = 5
    mz = _muzero(recurrent_gradient_scaling=scale, num_unroll_steps=K)
    torch.manual_seed(1)
    D = mz.module.transition[-1].out_features
    linear = torch.nn.Linear(mz.module.transition[0].in_features, D).double()
    mz.module.transition = linear
    mz.module.normalize = lambda s: s  # linear dynamics: the min-max normalisation is tested on its own
    s0 = torch.randn(3, D, dtype=torch.float64, requires_grad=True)

    class Identity(torch.nn.Module):
        def representation(self, x):
            return x

    actions = torch.tensor([[0, 1, 1, 0, 1]] * 3)
    directions = torch.randn(K + 1, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    latents = mz.unroll(Identity(), s0, actions)
    sum((latents[k] * directions[k]).sum() for k in range(K + 1)).backward()

    A = np.eye(D) + linear.weight.detach().numpy()[:, :D]  # s' = s + W [s, onehot]: ds'/ds = I + W_s
    d = directions.numpy()
    expected = d[0] + sum(scale ** (k - 1) * np.linalg.matrix_power(A, k).T @ d[k] for k in range(1, K + 1))
    np.testing.assert_allclose(s0.grad.numpy(), np.broadcast_to(expected, (3, D)), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("value_repr", ["categorical", "scalar"])
def test_model_latents_are_min_max_normalised_and_scalar_heads_start_at_zero(value_repr):
    """Every latent the heads read (the encoded torso output and each dynamics output) spans [0, 1] per row, as
    ALF's; a constant row maps to 0, not NaN. A fresh model predicts value, reward and game-over 0 exactly."""
    mz = _muzero(num_unroll_steps=4, game_over=True, value_repr=value_repr)
    net = MLP(SPEC)
    torch.manual_seed(3)
    obs0 = torch.randn(16, *SPEC.obs_shape) * 5
    assert (net.representation(obs0) < 0).any()  # the torso's output itself is not in [0, 1]
    latents = mz.unroll(net, obs0, torch.randint(0, 2, (16, 4)))
    for s in latents:
        assert torch.all((s >= 0) & (s <= 1))
        torch.testing.assert_close(s.min(-1).values, torch.zeros(16))
        torch.testing.assert_close(s.max(-1).values, torch.ones(16), rtol=0, atol=1e-4)
    assert torch.equal(mz.module.normalize(torch.full((2, 5), 3.0)), torch.zeros(2, 5))
    heads = mz.module.heads(torch.cat(latents))
    for name in ("value", "reward", "game_over"):
        assert torch.equal(heads[name], torch.zeros_like(heads[name])), name
    assert heads["policy"].abs().sum() > 0
    assert mz._decode(heads["value"]).abs().max() < 1e-6  # uniform over the support decodes to 0


def test_target_network_update_schedule_and_buffers():
    torch.manual_seed(0)
    net = MLP(SPEC)
    net.register_buffer("stat", torch.zeros(3))
    cfg = ModelLossConfig(loss="muzero", target_update_period=3, target_update_tau=0.25)
    mz = MuZeroLoss(net, 2, cfg, discount=GAMMA, device=torch.device("cpu"))
    first = [p.detach().clone() for p in mz.target_net.parameters()]
    first_module = [p.detach().clone() for p in mz.target_module.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(first, net.parameters(), strict=True))  # a copy at start
    for step in range(1, 4):
        with torch.no_grad():
            for p in [*net.parameters(), *mz.module.parameters()]:
                p.add_(1.0)
            net.stat += 5.0
        mz.after_update(net)
        if step < 3:  # not yet: the target stays as it was
            assert all(torch.equal(a, b) for a, b in zip(first, mz.target_net.parameters(), strict=True))
            assert torch.equal(mz.target_net.stat, torch.zeros(3))
    for old, new, target in zip(first, net.parameters(), mz.target_net.parameters(), strict=True):
        torch.testing.assert_close(target, 0.75 * old + 0.25 * new.detach())
    for old, new, target in zip(first_module, mz.module.parameters(), mz.target_module.parameters(), strict=True):
        torch.testing.assert_close(target, 0.75 * old + 0.25 * new.detach())
    assert torch.equal(mz.target_net.stat, torch.full((3,), 15.0))  # buffers are copied, not averaged
    assert mz.updates == 3


def _cartpole_cfg(**model) -> RunConfig:
    cfg = apply_preset(replace_path(RunConfig(), "env.id", "CartPole-v1"), set())
    return replace_paths(cfg, {
        "actors.envs_per_actor": 4, "learner.batch_size": 2, "replay.min_size": 2,
        "model_loss.loss": "muzero", "model_loss.batch_size": 8,
        **{f"model_loss.{key}": value for key, value in model.items()},
    })


def _unrolls(cfg: RunConfig, n: int) -> list:
    worker = RolloutWorker(make_env_vector(cfg.env, cfg.actors.envs_per_actor, None, seed=3),
                           cfg.actors.unroll_length, learner=cfg.learner, seed=3)
    torch.manual_seed(5)
    worker.set_weights(0, {k: v.numpy() for k, v in MLP(env_spec(cfg.env)).state_dict().items()})
    out = []
    for _ in range(n):
        u = worker.unroll()
        u["policy_version"] = 0
        out.append(u)
    worker.envs.close()
    return out


def _min_max64(s: torch.Tensor) -> torch.Tensor:
    """Each row of `s` scaled to [0, 1] (a span below 1e-5 padded by 1e-5), written apart from the code's."""
    lo, hi = s.min(dim=1, keepdim=True).values, s.max(dim=1, keepdim=True).values
    span = hi - lo
    return (s - lo) / (span + 1e-5 * (span < 1e-5))


def _expected_priorities(core: LearnerCore, net, module, batch: ModelBatch) -> np.ndarray:
    """sqrt(step-weighted masked value loss) per sequence, recomputed in float64 from the weights the
    update started from."""
    mz = muzero_of(core.learner)
    targets, _ = mz.targets(batch)
    net64, module64 = copy.deepcopy(net).double(), copy.deepcopy(module).double()
    n, K = len(batch.starts), mz.cfg.num_unroll_steps
    T = batch.rewards.shape[0]
    obs = torch.from_numpy(batch.obs).double()
    cols = torch.arange(n)
    starts = torch.from_numpy(batch.starts)
    x = obs[starts, cols]  # MLP.representation casts to float32: the same layers, in float64
    s = _min_max64(torch.cat([net64.policy[:-1](x), net64.value[:-1](x)], dim=1))
    support = mz.support.double()
    w = step_weights(K, dtype=torch.float64)
    total = torch.zeros(n, dtype=torch.float64)
    for k in range(K + 1):
        if k:
            a = torch.from_numpy(batch.actions)[(starts + k - 1).clamp(max=T - 1), cols]
            s = _min_max64(s + module64.transition(torch.cat([s, F.one_hot(a, 2).double()], 1)))
        probs = two_hot(value_transform(targets.value[:, k].double()), support)
        value_logits = module64.prediction(s)[:, :support.numel()]  # the first outputs of f are the value's
        loss = -(probs * value_logits.log_softmax(-1)).sum(-1)
        total += w[k] * targets.value_mask[:, k].double() * loss
    return total.sqrt().detach().numpy()


def test_priorities_written_back_equal_the_formula():
    cfg = _cartpole_cfg()
    spec = env_spec(cfg.env)
    core = LearnerCore(cfg, spec, replay=make_replay(cfg))
    unrolls = _unrolls(cfg, 12)
    for i in range(4):
        core.train(unrolls[2 * i: 2 * i + 2])
    seen = {}
    real = core.learner.update

    def recording(batch, model_batch=None):  # the real update, with its model batch and result kept for the check below
        seen["batch"], seen["result"] = model_batch, real(batch, model_batch)
        return seen["result"]

    core.learner.update = recording
    net, module = copy.deepcopy(core.learner.model), copy.deepcopy(muzero_of(core.learner).module)
    metrics = core.train(unrolls[8:10])
    batch = seen["batch"]
    assert batch is not None and "model_value_loss" in metrics
    assert metrics["model_batch_age"] == np.median(batch.age) and batch.age.max() > 0
    x = torch.from_numpy(batch.obs).double()[torch.from_numpy(batch.starts), torch.arange(len(batch.starts))]
    net64 = copy.deepcopy(net).double()
    torso = torch.cat([net64.policy[:-1](x), net64.value[:-1](x)], dim=1).detach()  # MLP.representation, float64
    assert metrics["feature_rms"] == pytest.approx(float(torso.pow(2).mean().sqrt()), rel=1e-5)
    expected = _expected_priorities(core, net, module, batch)
    np.testing.assert_allclose(seen["result"].outputs.sampled_priorities, expected, rtol=1e-4, atol=1e-6)
    replay = core.replay_feed.replay._replay
    eta = cfg.replay.eta
    for item in np.unique(batch.ids):
        mine = expected[batch.ids == item]
        slot = int(item) % replay.capacity
        assert replay._slot_ids[slot] == item
        assert replay._raw[slot] == pytest.approx(eta * mine.max() + (1 - eta) * mine.mean(), rel=1e-4)


def test_td_priority_mode_leaves_priorities_to_vtrace():
    cfg = _cartpole_cfg(priority="td")
    core = LearnerCore(cfg, env_spec(cfg.env), replay=make_replay(cfg))
    unrolls = _unrolls(cfg, 8)
    for i in range(4):
        metrics = core.train(unrolls[2 * i: 2 * i + 2])
    assert "model_value_loss" in metrics
    # fresh unrolls went in with their V-trace priorities (eta*max + (1-eta)*mean |td|), not the max seen
    raw = core.replay_feed.replay._replay.raw_priorities()
    assert len(np.unique(raw)) == len(raw) == 8


def _roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)  # as deploy.rundir loads learner.pt


def test_checkpoint_and_resume_give_the_same_next_update():
    cfg = _cartpole_cfg(target_update_period=2, target_update_tau=0.5, reanalyze_ratio=0.5,
                        consistency_weight=1.0, max_bootstrap_age=3.0)
    spec = env_spec(cfg.env)
    unrolls = _unrolls(cfg, 12)
    a = LearnerCore(cfg, spec, replay=make_replay(cfg))
    for i in range(5):
        a.train(unrolls[2 * i: 2 * i + 2])
    state = _roundtrip(a.state_dict())
    replay_state = snapshot.unpackb(snapshot.packb(a.replay_feed.replay.state_dict()))
    assert state["learner"]["model_loss"]["updates"] == 5
    b_replay = make_replay(cfg)
    b_replay.load_state_dict(replay_state)
    torch.manual_seed(123)  # a fresh process: nothing about the next update may come from the old one
    b = LearnerCore(cfg, spec, replay=b_replay)
    b.load_state_dict(state)
    ma = a.train(unrolls[10:12])
    mb = b.train(unrolls[10:12])
    assert "model_consistency_loss" in ma and ma == mb
    pairs = [(a.learner.model, b.learner.model), (muzero_of(a.learner).module, muzero_of(b.learner).module),
             (muzero_of(a.learner).target_net, muzero_of(b.learner).target_net),
             (muzero_of(a.learner).target_module, muzero_of(b.learner).target_module)]
    for x, y in pairs:
        for (name, p), q in zip(x.state_dict().items(), y.state_dict().values(), strict=True):
            assert torch.equal(p, q), name
    # the agent's optimiser over the policy network; the model loss's own over the torso and the model
    for which, count in (("optimizer", len(list(a.learner.model.parameters()))), ("model_optimizer", None)):
        sa, sb = (learner.optimizers()[which].state_dict()["state"] for learner in (a.learner, b.learner))
        assert sa.keys() == sb.keys() and len(sa) == (count or len(sa)) > 0
        for key in sa:
            for name in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(sa[key][name], sb[key][name])
    model_state = a.learner.optimizers()["model_optimizer"].state_dict()["state"]
    torso_and_model = len(model_state)  # the policy network's output layers get no model-loss gradient
    assert len(list(muzero_of(a.learner).module.parameters())) < torso_and_model < len(a.learner.parameters())
    np.testing.assert_array_equal(a.replay_feed.replay._replay.raw_priorities(),
                                  b.replay_feed.replay._replay.raw_priorities())


def test_separate_optimiser_adds_the_model_loss_step_to_the_torso_and_leaves_the_agent_step_as_it_was():
    """`model_loss.optimizer separate`: the agent's optimiser steps on V-trace's gradient alone, exactly as
    with no model loss; the model loss's own Adam adds its step to the torso. From fresh optimisers the first
    step of Adam is -lr g / (|g| + eps), so on the torso (separate - no model loss) = -lr g_m / (|g_m| + eps),
    with g_m the model loss's gradient at the starting weights, taken here apart from the update."""
    from levelray.contracts.trajectory import stack_unrolls
    from levelray.learner.learner import Learner

    cfg = _cartpole_cfg(num_unroll_steps=3, td_steps=2)
    spec = env_spec(cfg.env)
    batch, model_batch = stack_unrolls(_unrolls(cfg, 2)), _hand_batch()
    off = Learner(spec, cfg.learner, seed=0)
    learners = {mode: Learner(spec, cfg.learner, seed=0,
                              auxiliary=model_losses(replace_path(cfg, "model_loss.optimizer", mode).model_loss))
                for mode in ("separate", "shared")}
    sep = learners["separate"]
    probe = copy.deepcopy(sep)  # the model loss's gradient at the starting weights, apart from the update
    names = [name for name, _ in probe.model.named_parameters()]
    loss = muzero_of(probe).loss(probe.model, model_batch)[0] * cfg.model_loss.loss_weight
    g_model = dict(zip(names, torch.autograd.grad(loss, list(probe.model.parameters()), allow_unused=True),
                       strict=True))
    off.update(batch)
    metrics = {mode: learner.update(batch, model_batch).metrics for mode, learner in learners.items()}
    for m in metrics.values():  # each loss's gradient on the torso, what a regression would be traced to
        assert m["torso_grad_norm_vtrace"] > 0 and m["torso_grad_norm_model"] > 0 and m["grad_norm_model"] > 0
    # the torso is what the model loss's gradient reaches of the policy network: every layer but the outputs
    torso = {name for name, g in g_model.items() if g is not None}
    in_torso = sep.gradient_step.auxiliary[0].in_torso
    flags = dict(zip([n for n, _ in sep.model.named_parameters()], in_torso, strict=False))
    assert torso == {name for name, mine in flags.items() if mine} and 0 < len(torso) < len(flags)
    lr, eps = cfg.learner.learning_rate, cfg.learner.adam_eps
    moved = 0
    for (name, p_sep), p_off in zip(sep.model.named_parameters(), off.model.parameters(), strict=True):
        g = g_model[name]
        if g is None:  # the policy and value output layers: no model-loss gradient, the agent's step only
            torch.testing.assert_close(p_sep, p_off, rtol=0, atol=1e-7)
            continue
        g = g.double()
        expected = -lr * g / (g.abs() + eps)
        torch.testing.assert_close((p_sep - p_off).double(), expected, rtol=1e-4, atol=1e-7)
        moved += int((p_sep != p_off).any())
    assert moved > 0
    shared_torso = [p for (name, p) in learners["shared"].model.named_parameters() if g_model[name] is not None]
    sep_torso = [p for (name, p) in sep.model.named_parameters() if g_model[name] is not None]
    assert any(not torch.allclose(a, b) for a, b in zip(shared_torso, sep_torso, strict=True))


@pytest.mark.parametrize("mode", ["separate", "shared"])
def test_detached_torso_control_leaves_the_agent_as_without_the_model_loss(mode):
    """`model_loss.torso_gradient false` (the fair test's control arm): the model's modules train, while the
    agent's network takes exactly the step it takes with no model loss, under either optimiser mode."""
    from levelray.contracts.trajectory import stack_unrolls
    from levelray.learner.learner import Learner

    cfg = _cartpole_cfg(num_unroll_steps=3, td_steps=2, optimizer=mode, torso_gradient=False)
    spec = env_spec(cfg.env)
    batch, model_batch = stack_unrolls(_unrolls(cfg, 2)), _hand_batch()
    off = Learner(spec, cfg.learner, seed=0)
    control = Learner(spec, cfg.learner, seed=0, auxiliary=model_losses(cfg.model_loss))
    model_before = copy.deepcopy(muzero_of(control).module.state_dict())
    for _ in range(3):
        off.update(batch)
        metrics = control.update(batch, model_batch).metrics
    for p_control, p_off in zip(control.model.parameters(), off.model.parameters(), strict=True):
        torch.testing.assert_close(p_control, p_off, rtol=0, atol=0)
    assert metrics["torso_grad_norm_model"] == 0.0 and metrics["grad_norm_model"] > 0
    assert metrics["torso_grad_norm_vtrace"] > 0  # still measured where the model loss's gradient stops
    model_after = muzero_of(control).module.state_dict().values()
    assert any(not torch.equal(before, after) for before, after in zip(model_before.values(), model_after, strict=True))


def test_resuming_with_the_other_optimiser_mode_is_refused_before_anything_loads():
    from levelray.learner.learner import Learner

    cfg = _cartpole_cfg()
    spec = env_spec(cfg.env)
    saved = Learner(spec, cfg.learner, seed=0,
                    auxiliary=model_losses(cfg.model_loss)).state_dict()  # separate, the default
    shared = Learner(spec, cfg.learner, seed=1,
                     auxiliary=model_losses(replace_path(cfg, "model_loss.optimizer", "shared").model_loss))
    before = copy.deepcopy(shared.model.state_dict())
    with pytest.raises(ValueError, match="resume with --model-optimizer separate"):
        shared.load_state_dict(saved)
    for name, value in shared.model.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_actors_get_the_policy_network_alone():
    cfg = _cartpole_cfg()
    core = LearnerCore(cfg, env_spec(cfg.env), replay=make_replay(cfg))
    _version, weights = core.learner.get_weights()
    assert set(weights) == set(MLP(env_spec(cfg.env)).state_dict())


def test_categorical_decode_round_trips_through_the_support():
    mz = _muzero()
    x = torch.tensor([-30.0, -1.0, 0.0, 0.5, 7.0, 80.0])
    logits = two_hot(value_transform(x), mz.support).clamp(min=1e-30).log()
    torch.testing.assert_close(mz._decode(logits), x, rtol=1e-4, atol=1e-4)
    assert inverse_value_transform(value_transform(x)).allclose(x, rtol=1e-5)


BASE = ["train", "--backend", "inline", "--env", "CartPole-v1", "--metrics-port", "0", "--quiet",
        "--model-loss", "muzero"]


@pytest.mark.parametrize(
    "flags, fields",
    [
        (["--unroll-length", "5"], ("model_loss.num_unroll_steps", "actors.unroll_length")),
        (["--model-unroll-steps", "20"], ("model_loss.num_unroll_steps", "actors.unroll_length")),
        (["--replay-capacity", "0"], ("replay.capacity",)),
        (["--replay-min-size", "50", "--replay-capacity", "10"], ("replay.min_size", "replay.capacity")),
        (["--model-td-steps", "0"], ("model_loss.td_steps",)),
        (["--model-td-steps", "-2"], ("model_loss.td_steps",)),
        (["--model-max-bootstrap-age", "10", "--model-td-steps", "-1"], ("model_loss.max_bootstrap_age",
                                                                          "model_loss.td_steps")),
        (["--model-max-bootstrap-age", "10", "--model-min-td-steps", "6"], ("model_loss.min_td_steps",
                                                                             "model_loss.td_steps")),
        (["--model-target-tau", "0"], ("model_loss.target_update_tau",)),
        (["--model-loss-weight", "0"], ("model_loss.loss_weight",)),
        (["--model-reanalyze-ratio", "1.5"], ("model_loss.reanalyze_ratio",)),
        (["--model-value-repr", "gaussian"], ("model_loss.value_repr",)),
    ],
)
def test_bad_model_config_is_refused_naming_the_fields_before_anything_starts(tmp_path, capsys, flags, fields):
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main([*BASE, *flags, "--run-dir", str(run)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    for field in fields:
        assert field in err, (field, err)
    assert not run.exists()


def test_model_loss_with_continuous_actions_is_refused_before_anything_starts(tmp_path, capsys):
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--backend", "inline", "--env", "Pendulum-v1", "--num-levels", "0", "--model-loss", "muzero",
              "--metrics-port", "0", "--quiet", "--run-dir", str(run)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "model_loss.loss" in err and "env.id" in err and "discrete" in err
    assert not run.exists()


def test_model_loss_off_has_no_replay_service_and_no_model_modules():
    cfg = replace_path(_cartpole_cfg(), "model_loss.loss", "none")
    from levelray.deploy.training.inline import InlineBackend

    backend = InlineBackend(cfg)
    try:
        assert backend.replay is None and muzero_of(backend.core.learner) is None
    finally:
        backend.close()


def test_model_loss_terms_are_exported_to_prometheus_by_term():
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from levelray.deploy.monitoring.metrics import JobCollector

    def exposition(snapshot: dict) -> dict[str, float]:
        registry, collector = CollectorRegistry(), JobCollector()
        registry.register(collector)
        collector.update(snapshot)
        families = {f.name: f.samples for f in text_string_to_metric_families(generate_latest(registry).decode())}
        return {s.labels["term"]: s.value for s in families["levelray_learner_model_loss"]}

    terms = {"total", "value", "reward", "policy", "game_over", "consistency"}
    off = exposition({})
    assert set(off) == terms and all(v != v for v in off.values())  # NaN without the model loss, never absent
    metrics = {"model_loss": 3.5, "model_value_loss": 1.25, "model_reward_loss": 0.5, "model_policy_loss": 0.75,
               "model_game_over_loss": 1.0}
    on = exposition({"learner": {"metrics": metrics}})
    assert {k: v for k, v in on.items() if k != "consistency"} == {
        "total": 3.5, "value": 1.25, "reward": 0.5, "policy": 0.75, "game_over": 1.0}
    assert on["consistency"] != on["consistency"]  # the term is off by default


def test_dynamic_horizon_bootstraps_older_sequences_sooner():
    b = _hand_batch()
    b.age = np.array([0.0, 5.0, 100.0])  # td = ceil(1 + 3 * relu(1 - age / 10)) = 4, 3 (2.5 up), 1
    targets, _ = _muzero(td_steps=4, max_bootstrap_age=10.0, min_td_steps=1).targets(b)
    expected = [_reference_returns(b, td)[t, i] for i, (td, t) in enumerate(zip((4, 3, 1), b.starts, strict=True))]
    np.testing.assert_allclose(targets.value[:, 0], expected, rtol=1e-5, atol=1e-6)
    fixed, _ = _muzero(td_steps=4).targets(b)  # without the dynamic horizon every sequence uses 4 steps
    assert not np.allclose(fixed.value[:, 0], expected)


def test_model_loss_together_with_replayed_vtrace_unrolls():
    """replay_ratio > 0 and the model loss share the replay service: replayed unrolls (which carry the model
    fields) stack into the V-trace batch, and the model batch is sampled from the same buffer."""
    cfg = replace_path(_cartpole_cfg(), "replay.replay_ratio", 0.5)
    core = LearnerCore(cfg, env_spec(cfg.env), replay=make_replay(cfg))
    assert core.num_fresh == 1
    unrolls = _unrolls(cfg, 8)
    for u in unrolls:
        metrics = core.train([u])
    assert "model_value_loss" in metrics and np.isfinite(metrics["loss_total"])
    assert len(core.replay_feed.replay) == 8
    assert core.replay_feed.replay.stats()["samples"] > 0
