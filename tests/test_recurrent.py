"""Recurrent policies (`learner.lstm_size` > 0): the LSTM core against a float64 reference, the state the actors
carry against the learner's recomputation at policy lag 0, the `core_state` contract, replay, resume, the model
loss's refusal and the behaviour KL metric."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import torch

from levelray.actors.envs import env_spec, make_env_vector
from levelray.actors.rollout import RolloutWorker
from levelray.contracts import snapshot
from levelray.contracts.config import ConfigError, RunConfig, replace_paths
from levelray.contracts.spec import EnvSpec
from levelray.contracts.trajectory import TrajectoryError, stack_unrolls, validate_unroll
from levelray.contracts.validate import validate
from levelray.deploy.training.components import make_replay
from levelray.deploy.training.inline import InlineBackend
from levelray.learner.core import LearnerCore
from levelray.learner.learner import Learner, behaviour_kl
from levelray.policy import recurrent
from levelray.policy.models import build_model
from levelray.policy.numpy_policy import NumpyPolicy
from levelray.policy.recurrent import LSTMCore, core_inputs, unroll
from levelray.policy.weights import load_numpy_weights, weights_to_numpy

N = 16


def _cfg(env_id: str = "CartPole-v1", **paths) -> RunConfig:
    """A recurrent run of one actor: short time limits, so that episodes end in the middle of every unroll."""
    base = {"env.id": env_id, "env.num_levels": 20, "env.max_episode_steps": 9, "learner.lstm_size": N,
            "actors.num_actors": 1, "actors.envs_per_actor": 3, "actors.unroll_length": 12,
            "learner.batch_size": 1}
    return replace_paths(RunConfig(), {**base, **paths})


# -- the core against a float64 reference ------------------------------------------------------------------------

def _reference_lstm(cell: torch.nn.LSTMCell, x: torch.Tensor, starts: torch.Tensor, state: torch.Tensor,
                    E: int) -> torch.Tensor:
    """The LSTM written out in float64 (gates i, f, g, o), reset where `starts`: `x [T, B, F + E]` -> h `[T, B, N]`."""
    w_ih, w_hh = cell.weight_ih.double(), cell.weight_hh.double()
    b = cell.bias_ih.double() + cell.bias_hh.double()
    h, c = state[0].double(), state[1].double()
    out = []
    for t in range(x.shape[0]):
        keep = (~starts[t]).double()[:, None]
        xt = torch.cat([x[t, :, :-E], x[t, :, -E:] * keep], dim=1)
        h, c = h * keep, c * keep
        i, f, g, o = (xt @ w_ih.T + h @ w_hh.T + b).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        out.append(h)
    return torch.stack(out)


@pytest.mark.parametrize("unroll_dtype, tolerance", [
    (torch.float32, 1e-5),
    (torch.bfloat16, 1e-2),  # `learner.lstm_precision` bf16: 8 bits of mantissa, carried through time (~2e-3 here)
], ids=["fp32", "bf16"])
def test_core_matches_a_float64_reference_with_resets_in_features_and_gradient(unroll_dtype, tolerance):
    """h within `tolerance`, each gradient within `tolerance` of its largest entry; a bf16 core's error is above
    float32's (it did compute in bf16) and its outputs and gradients are float32."""
    torch.manual_seed(0)
    T, B, F, E = 7, 4, 5, 3
    core = LSTMCore(F, E, N)
    core.unroll_dtype = unroll_dtype
    features = torch.randn(T, B, F, dtype=torch.float64)
    extra = torch.randn(T, B, E, dtype=torch.float64)
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[2, 0] = starts[4, 1] = starts[4, 2] = starts[6, 3] = True  # episodes begin mid-unroll
    state = torch.randn(2, B, N, dtype=torch.float64)
    weights = torch.randn(T, B, N, dtype=torch.float64)

    feats32 = features.float().requires_grad_()
    h, c = core(feats32, extra.float(), starts, state.float())
    (h.double() * weights).sum().backward()
    grads = [core.cell.weight_ih.grad, core.cell.weight_hh.grad, core.cell.bias_ih.grad, feats32.grad]

    ref_params = [p.detach().double().requires_grad_() for p in core.cell.parameters()]
    ref_cell = torch.nn.LSTMCell(F + E, N).double()
    with torch.no_grad():
        for p, q in zip(ref_cell.parameters(), ref_params, strict=True):
            p.copy_(q)
    feats64 = features.clone().requires_grad_()
    ref_h = _reference_lstm(ref_cell, torch.cat([feats64, extra], dim=-1), starts, state, E)
    (ref_h * weights).sum().backward()
    ref_grads = [ref_cell.weight_ih.grad, ref_cell.weight_hh.grad, ref_cell.bias_ih.grad, feats64.grad]

    assert h.dtype == torch.float32 and all(g.dtype == torch.float32 for g in grads)
    h_error = float((h.detach().double() - ref_h.detach()).abs().max())
    assert h_error < tolerance and (unroll_dtype == torch.float32 or h_error > 1e-4)
    for got, want in zip(grads, ref_grads, strict=True):
        assert float((got.double() - want).abs().max()) < tolerance * float(want.abs().max())
    # a reset really cuts the past: env 0 from step 2 on is the same from any state before it
    h_other, _ = core(feats32.detach(), extra.float(), starts, torch.randn(2, B, N))
    torch.testing.assert_close(h_other[2:, 0], h[2:, 0].detach())
    assert not torch.allclose(h_other[:2, 0], h[:2, 0].detach())


def test_one_chunk_lays_the_cells_weights_out_in_one_buffer_in_cudnns_order_and_passes_their_gradients_back():
    """The CUDA core hands cuDNN its weights as `_one_chunk` lays them out (tests/test_gpu.py checks cuDNN takes
    them without copying them again); here, on any device: the same values, one buffer, w_ih | w_hh | b_ih | b_hh
    end to end from its start, and gradients reaching the cell's parameters."""
    cell = torch.nn.LSTMCell(5, 3)
    params = [cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh]
    chunk = recurrent._one_chunk(params)
    base = chunk[0].untyped_storage().data_ptr()
    offset = 0
    for got, param in zip(chunk, params, strict=True):
        torch.testing.assert_close(got, param, rtol=0, atol=0)
        assert got.untyped_storage().data_ptr() == base and got.data_ptr() == base + 4 * offset
        assert got.is_contiguous()
        offset += param.numel()
    sum((w * (i + 1)).sum() for i, w in enumerate(chunk)).backward()
    for i, param in enumerate(params):
        torch.testing.assert_close(param.grad, torch.full_like(param, i + 1.0))


def test_core_runs_in_float32_under_bf16_autocast():
    torch.manual_seed(0)
    core = LSTMCore(6, 3, N)
    x, extra = torch.randn(4, 2, 6), torch.randn(4, 2, 3)
    starts = torch.zeros(4, 2, dtype=torch.bool)
    want, _ = core(x, extra, starts, core.initial_state(2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, _ = core(x, extra, starts, core.initial_state(2))
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want)


def test_core_inputs_one_hot_action_and_clipped_reward():
    spec = EnvSpec((4,), "float32", True, num_actions=3)
    out = core_inputs(np.array([[2, 0]]), np.array([[5.0, -0.25]], dtype=np.float32), spec)
    np.testing.assert_array_equal(out, [[[0, 0, 1, 1.0], [1, 0, 0, -0.25]]])
    box = EnvSpec((3,), "float32", False, action_dim=2, action_low=(-1, -1), action_high=(1, 1))
    np.testing.assert_array_equal(core_inputs(np.array([[0.5, -3.0]]), np.array([-2.0]), box), [[0.5, -3.0, -1.0]])


@pytest.mark.parametrize("kind, spec", [
    ("mlp", EnvSpec((4,), "float32", True, num_actions=2)),
    ("minigrid_cnn", EnvSpec((7, 7, 4), "uint8", True, num_actions=7, obs_encoding="minigrid")),
    ("impala_cnn", EnvSpec((16, 16, 3), "uint8", True, num_actions=5)),
])
def test_every_network_kind_has_the_core_between_torso_and_heads(kind, spec):
    model = build_model(spec, kind, lstm_size=N)
    assert model.core.size == N and model.representation(torch.zeros(2, *spec.obs_shape,
                                                                      dtype=getattr(torch, spec.obs_dtype))).shape[1]
    obs = torch.zeros(3, 2, *spec.obs_shape, dtype=getattr(torch, spec.obs_dtype))
    dist, value, h, c = unroll(model, obs, torch.zeros(3, 2, spec.core_input_size), torch.zeros(3, 2, dtype=bool),
                               model.core.initial_state(2))
    assert dist.shape == (3, 2, spec.policy_params) and value.shape == h.shape[:2] == (3, 2)
    with pytest.raises(ValueError, match="LSTM core"):
        model(obs[0])
    assert not NumpyPolicy.supports(model)
    assert build_model(spec, kind).core is None


# -- actors and learner at policy lag 0 ---------------------------------------------------------------------------

def _recomputed(learner: Learner, u: dict) -> tuple[np.ndarray, np.ndarray]:
    """The learner's `dist_params [T, K, P]` and values `[T, K]` of the unroll `u`, from its own forward pass."""
    with torch.no_grad():
        forward = learner._forward(stack_unrolls([u]))
    return forward.dist_params[:-1].numpy(), forward.values[:-1].numpy()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "minigrid:MemoryS7"])
def test_inline_backend_learner_recomputes_the_actors_outputs_at_lag_0(env_id):
    """The actor's behaviour logits and values equal the learner's recomputation from `core_state` within 1e-5,
    with several episode ends inside each unroll, unroll after unroll (the state carried across them), and the
    behaviour KL of every update is 0 up to float error. (Without PopArt: with it the actors' values are the
    head's normalised ones, the learner's in reward units.)"""
    cfg = _cfg(env_id, **{"levels.strategy": "value_l1", "env.max_episode_steps": 5 if "Memory" in env_id else 9,
                          "learner.value_normalization": False})
    backend = InlineBackend(cfg)
    worker, learner = backend.workers[0], backend.core.learner
    ends = 0
    for _ in range(4):
        u = worker.unroll()
        validate_unroll(u, worker.spec, core_size=N)
        dones = u["terminated"] | u["truncated"]
        ends += int(dones[:-1].sum())
        dist, values = _recomputed(learner, u)
        np.testing.assert_allclose(dist, u["behaviour_params"], rtol=0, atol=1e-5)
        np.testing.assert_allclose(values, worker.last_values, rtol=0, atol=1e-5)
        metrics = backend.train_step()
        assert abs(metrics["behaviour_kl"]) < 1e-6 and metrics["rho_mean"] == pytest.approx(1.0, abs=1e-5)
        assert metrics["rho_clipped_fraction"] == 0.0  # a ratio of 1 up to float error is not clipped
    assert ends >= 4, "no episode ended inside an unroll: the resets went unchecked"
    backend.close()


def test_inline_lag_0_holds_across_level_windows_that_restart_envs():
    """Under Robust PLR with level windows of 2 unrolls, every window's end restarts the envs still playing: those
    begin an episode for the core as an episode end does, so the learner's recomputation from each unroll's
    `core_state` still equals the actor's outputs, withheld explore unrolls included."""
    cfg = _cfg("maze:7x7", **{"env.num_levels": 0, "env.maze_blocks": "0-10", "env.max_episode_steps": 40,
                              "levels.strategy": "value_l1", "levels.robust": True, "levels.buffer_size": 8,
                              "levels.rho": 0.25, "levels.window": 24, "learner.value_normalization": False})
    backend = InlineBackend(cfg)
    worker, learner = backend.workers[0], backend.core.learner
    assert worker.windows is not None and worker.windows.withhold
    cuts = 0
    for _ in range(8):
        u = worker.unroll()
        validate_unroll(u, worker.spec, core_size=N)
        cuts += int((u["truncated"][-1] & ~u["terminated"][-1]).sum())
        dist, values = _recomputed(learner, u)
        np.testing.assert_allclose(dist, u["behaviour_params"], rtol=0, atol=1e-5)
        np.testing.assert_allclose(values, worker.last_values, rtol=0, atol=1e-5)
    assert cuts > 0, "no window end cut an episode: the restarts went unchecked"
    backend.close()


@pytest.mark.timeout(180)
def test_ray_backend_actor_unrolls_match_the_learner_at_lag_0(ray_session):
    """An env actor on Ray, acting with the learner actor's version 0: the unrolls that come back through Ray
    recompute to their behaviour logits, and the learner actor's own first update measures a behaviour KL of 0."""
    import ray

    from levelray.actors.env_actor import EnvActor
    from levelray.learner.service import learner_actor_class
    from tests.support import wait_for

    cfg = _cfg()
    spec = env_spec(cfg.env)
    learner = learner_actor_class(0).options(num_cpus=0).remote(cfg, spec)
    actor = ray.remote(num_cpus=0)(EnvActor).remote(0, cfg, learner, seed=1)
    try:
        version, (ref,) = ray.get(learner.latest_weights.remote())
        weights = ray.get(ref)
        assert version == 0
        assert ray.get(actor.run.remote(max_unrolls=1), timeout=90) == 1
        stats = wait_for(lambda: (s := ray.get(learner.stats.remote()))["learner_version"] >= 1 and s, 60)
        assert stats["dropped"] == {} and abs(stats["metrics"]["behaviour_kl"]) < 1e-6
        unrolls = ray.get(actor.collect.remote(2), timeout=60)  # its receipt named version 0: still acting with it
    finally:
        ray.get(learner.stop.remote())
        ray.kill(actor)
        ray.kill(learner)
    local = Learner(spec, cfg.learner, seed=0)
    load_numpy_weights(local.model, {k: v.copy() for k, v in weights.items()})
    ends = 0
    for u in unrolls:
        validate_unroll(u, spec, core_size=N)
        assert u["policy_version"] == 0
        ends += int((u["terminated"] | u["truncated"])[:-1].sum())
        np.testing.assert_allclose(_recomputed(local, u)[0], u["behaviour_params"], rtol=0, atol=1e-5)
    assert ends >= 2


# -- the contract -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def recurrent_unrolls():
    cfg = _cfg()
    worker = RolloutWorker(make_env_vector(cfg.env, 3, None, seed=0), 12, learner=cfg.learner, seed=0)
    return worker.spec, [worker.unroll() for _ in range(3)]


BAD_CORE = [
    ("shape", lambda u: u.__setitem__("core_state", u["core_state"][:, :, :-1]), "core_state", "float32 array"),
    ("dtype", lambda u: u.__setitem__("core_state", u["core_state"].astype(np.float64)), "core_state", "float32"),
    ("nan", lambda u: u["core_state"].__setitem__((0, 0, 0), np.nan), "core_state", "finite"),
    ("missing", lambda u: u.pop("core_state"), "core_state", "present"),
    ("inputs", lambda u: u.__setitem__("core_inputs", u["core_inputs"][:, :2]), "core_inputs", "float32 array"),
]


@pytest.mark.parametrize("name, corrupt, field, expected", BAD_CORE, ids=[b[0] for b in BAD_CORE])
def test_validator_names_a_bad_core_field(recurrent_unrolls, name, corrupt, field, expected):
    spec, unrolls = recurrent_unrolls
    u = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in unrolls[0].items()}
    validate_unroll(u, spec, core_size=N)
    corrupt(u)
    with pytest.raises(TrajectoryError, match=f"'{field}'.*{expected}"):
        validate_unroll(u, spec, core_size=N)


def test_core_fields_are_per_env_column_and_absent_for_feed_forward(recurrent_unrolls):
    spec, unrolls = recurrent_unrolls
    u = unrolls[1]
    assert u["core_state"].shape == (2, 3, N) and u["core_inputs"].shape == (3, spec.core_input_size)
    with pytest.raises(TrajectoryError, match="'core_state'.*absent"):
        validate_unroll(u, spec)  # a feed-forward learner
    batch = stack_unrolls(unrolls)
    assert batch["core_state"].shape == (2, 9, N) and batch["core_inputs"].shape == (9, spec.core_input_size)
    np.testing.assert_array_equal(batch["core_state"][:, 3:6], u["core_state"])
    with pytest.raises(ValueError, match="1 of 2 unrolls have 'core_state'"):
        stack_unrolls([u, {k: v for k, v in unrolls[0].items() if k not in ("core_state", "core_inputs")}])


def test_state_is_zero_where_an_unroll_starts_an_episode_and_carried_elsewhere(recurrent_unrolls):
    _, unrolls = recurrent_unrolls
    first = unrolls[0]
    assert not first["core_state"].any() and not first["core_inputs"].any()  # after the envs' reset
    for before, after in zip(unrolls, unrolls[1:], strict=False):
        ended = before["terminated"][-1] | before["truncated"][-1]
        assert not after["core_state"][:, ended].any()
        assert np.abs(after["core_state"][:, ~ended]).sum(axis=(0, 2)).min() > 0
        np.testing.assert_array_equal(after["core_inputs"][~ended, -1], np.clip(before["rewards"][-1, ~ended], -1, 1))


# -- replay and resume --------------------------------------------------------------------------------------------

def test_replay_round_trip_keeps_core_state(recurrent_unrolls):
    _, unrolls = recurrent_unrolls
    cfg = _cfg(**{"replay.replay_ratio": 0.5, "learner.batch_size": 2, "replay.min_size": 1})
    replay = make_replay(cfg)
    replay.insert(unrolls, None)
    restored = make_replay(cfg)
    restored.load_state_dict(snapshot.unpackb(snapshot.packb(replay.state_dict())))
    sample = restored.sample(3, 1.0)
    by_id = dict(zip(sample["ids"].tolist(), sample["items"], strict=True))
    for i, u in by_id.items():
        for key in ("core_state", "core_inputs"):
            np.testing.assert_array_equal(u[key], unrolls[i][key])
            assert u[key].dtype == np.float32


def _roundtrip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def resume_with_replay(cfg) -> tuple[dict, dict]:
    """A recurrent learner with replay trained on 4 unrolls, saved and loaded into a second one (its replay too):
    both trained on the same fifth unroll; returns their metrics after asserting their weights are equal."""
    spec = env_spec(cfg.env)
    worker = RolloutWorker(make_env_vector(cfg.env, 3, None, seed=0), 12, learner=cfg.learner, seed=0)
    unrolls = [worker.unroll() for _ in range(6)]
    a = LearnerCore(cfg, spec, replay=make_replay(cfg))
    for u in unrolls[:4]:
        a.train([u])
    state = _roundtrip(a.state_dict())
    b_replay = make_replay(cfg)
    b_replay.load_state_dict(snapshot.unpackb(snapshot.packb(a.replay_feed.replay.state_dict())))
    torch.manual_seed(123)
    b = LearnerCore(cfg, spec, replay=b_replay)
    b.load_state_dict(state)
    ma, mb = a.train([unrolls[4]]), b.train([unrolls[4]])
    for (name, p), q in zip(a.learner.model.state_dict().items(), b.learner.model.state_dict().values(),
                            strict=True):
        assert torch.equal(p, q), name
    return ma, mb


def test_recurrent_run_with_replay_resumes_to_the_same_next_update():
    ma, mb = resume_with_replay(_cfg(**{"replay.replay_ratio": 0.5, "learner.batch_size": 2, "replay.min_size": 1}))
    assert ma == mb and ma["batch_steps"] == 2 * 12 * 3  # a replayed unroll in the batch, with its stored state


# -- what is refused, and the metric ------------------------------------------------------------------------------

def test_model_loss_with_an_lstm_is_refused_naming_both_flags():
    cfg = _cfg(**{"model_loss.loss": "muzero", "model_loss.num_unroll_steps": 3})
    with pytest.raises(ConfigError, match="--lstm-size 16.*--model-loss muzero"):
        validate(cfg)
    from levelray.learner.model_loss import model_losses

    with pytest.raises(ValueError, match="--lstm-size 16.*--model-loss muzero"):
        Learner(env_spec(cfg.env), cfg.learner, auxiliary=model_losses(cfg.model_loss))


def test_behaviour_kl_is_the_mean_of_log_mu_minus_log_pi_over_trained_steps():
    log_rhos = torch.tensor([[0.1, -0.3], [0.5, 2.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert behaviour_kl(log_rhos, mask) == pytest.approx(-(0.1 - 0.3 + 0.5) / 3)
    assert behaviour_kl(log_rhos, torch.zeros(2, 2)) == 0.0


def test_behaviour_kl_of_a_moved_policy_estimates_kl(recurrent_unrolls):
    """The learner's metric on unrolls acted by other weights: the mean of log mu - log pi over the steps, an
    estimate of KL(mu || pi). Freshly built policies are both near uniform (their heads start at gain 0.01, KL
    ~1e-7), so the learner's policy head is moved first, by a seeded amount that makes the KL clearly positive."""
    spec, unrolls = recurrent_unrolls
    cfg = _cfg()
    learner = Learner(spec, cfg.learner, seed=5)  # not the weights that acted
    head = learner.model.policy[-1]
    with torch.no_grad():
        head.bias.add_(torch.randn(head.bias.shape, generator=torch.Generator().manual_seed(0)))
    batch = stack_unrolls(unrolls[:1])
    with torch.no_grad():
        forward = learner._forward(batch)
    mu = torch.log_softmax(torch.from_numpy(batch["behaviour_params"]).double(), -1)
    pi = torch.log_softmax(forward.dist_params[:-1].double(), -1)
    a = torch.from_numpy(batch["actions"])[..., None]
    want = float((mu.gather(-1, a) - pi.gather(-1, a)).mean())
    exact_kl = float((mu.exp() * (mu - pi)).sum(-1).mean())
    metrics = learner.update(batch).metrics
    assert metrics["behaviour_kl"] == pytest.approx(want, abs=1e-6)
    assert exact_kl > 0.05 and want == pytest.approx(exact_kl, abs=0.5 * exact_kl)


@pytest.mark.timeout(120)
def test_an_lstm_learns_to_recall_a_cue_that_a_feed_forward_policy_can_only_guess(tmp_path, one_thread):
    """`tests.recall_env`: the cue is shown at the first step and asked for five steps later, its episodes spanning
    unrolls of 12 steps. The same short run with an LSTM core learns to answer it; without one the greedy policy
    answers the question's one observation alike whatever the cue: half right."""
    from levelray.deploy.evaluation.episodes import evaluate_policy
    from tests.recall_env import RECALL_ID, register

    register()
    success = {}
    for lstm_size in (0, 32):
        cfg = replace_paths(RunConfig(), {
            "env.id": RECALL_ID, "env.num_levels": 0, "levels.strategy": "random", "learner.lstm_size": lstm_size,
            "actors.num_actors": 1, "actors.envs_per_actor": 16, "actors.unroll_length": 12,
            "learner.batch_size": 1, "learner.learning_rate": 1e-3, "total_steps": 80_000, "metrics_port": 0,
            "run_dir": str(tmp_path / str(lstm_size))})
        backend = InlineBackend(cfg)
        try:
            while not backend.core.budget_spent:
                backend.train_step()
            _, weights = backend.policy_weights()
        finally:
            backend.close()
        result = evaluate_policy(cfg, weights, np.arange(1000, 1400), 400, greedy=True, num_envs=16, seed=1)
        success[lstm_size] = result["success_rate"]
    assert success[32] >= 0.95 and success[0] <= 0.6, success


@pytest.mark.parametrize(("env_id", "needs_memory"), [("MiniGrid-MemoryS7-v0", False), ("MiniGrid-MemoryS9-v0", False),
                                                      ("MiniGrid-MemoryS11-v0", True)])
def test_memory_s11_is_the_smallest_minigrid_memory_task_whose_split_cannot_see_the_cue(env_id, needs_memory):
    """The premise of benchmarks/sweeps/lstm_memory.yaml: in MemoryS11 no state (cell and direction) at or beyond
    the hallway's end has the start room's cue in view, so the choice at the split needs memory; in MemoryS7 and S9
    the split, facing back down the short hallway, sees it, and a feed-forward policy can solve them."""
    import gymnasium as gym
    import minigrid  # noqa: F401  (registers the MiniGrid ids)

    env = gym.make(env_id, disable_env_checker=True).unwrapped
    env.reset(seed=0)
    cue = (1, env.height // 2 - 1)
    hallway_end = env.width - 3
    seen_from = []
    for x in range(hallway_end, env.width - 1):
        for y in range(1, env.height - 1):
            cell = env.grid.get(x, y)
            if cell is not None and cell.type == "wall":
                continue
            for direction in range(4):
                env.agent_pos, env.agent_dir = np.array((x, y)), direction
                _, visible = env.gen_obs_grid()
                view = env.get_view_coords(*cue)
                if all(0 <= v < env.agent_view_size for v in view) and visible[view[0], view[1]]:
                    seen_from.append((x, y, direction))
    assert (seen_from == []) == needs_memory, seen_from


def test_evaluation_plays_a_recurrent_policy():
    from levelray.deploy.evaluation.episodes import evaluate_policy

    cfg = _cfg()
    weights = weights_to_numpy(build_model(env_spec(cfg.env), "mlp", lstm_size=N))
    result = evaluate_policy(cfg, weights, np.arange(5), 6, greedy=True, num_envs=2, seed=0)
    assert result["episodes"] == 6 and 1 <= result["length_mean"] <= 9
    # a feed-forward learner's weights do not load into a recurrent network
    with pytest.raises(RuntimeError, match="core"):
        evaluate_policy(cfg, weights_to_numpy(build_model(env_spec(cfg.env), "mlp")), np.arange(5), 1,
                        greedy=True, num_envs=1, seed=0)


def test_lstm_precision_bf16_unrolls_the_learners_core_in_bf16_and_needs_a_core_on_a_cpu(recurrent_unrolls):
    """`learner.lstm_precision` bf16: the learner's core unrolls in bf16, an update's losses stay within bf16's
    rounding of fp32's from the same weights and batch; without a core, or off a CPU, it is refused by name."""
    spec, unrolls = recurrent_unrolls
    batch = stack_unrolls(unrolls[:1])
    metrics = {}
    for precision in ("fp32", "bf16"):
        learner = Learner(spec, _cfg(**{"learner.lstm_precision": precision}).learner, seed=5)
        assert learner.model.core.unroll_dtype == getattr(torch, {"fp32": "float32", "bf16": "bfloat16"}[precision])
        metrics[precision] = learner.update(batch).metrics
    for key in ("loss_policy", "loss_value", "entropy", "grad_norm"):
        assert metrics["bf16"][key] == pytest.approx(metrics["fp32"][key], rel=1e-3, abs=1e-4), key
    with pytest.raises(ConfigError, match="learner.lstm_precision.*--lstm-size"):
        validate(replace_paths(RunConfig(), {"learner.lstm_precision": "bf16"}))
    with pytest.raises(ConfigError, match="learner.lstm_precision.*learner.device"):
        validate(_cfg(**{"learner.lstm_precision": "bf16", "learner.device": "cuda"}))
    from levelray.policy.precision import lstm_unroll_dtype

    with pytest.raises(ValueError, match="--lstm-precision fp32"):
        lstm_unroll_dtype("bf16", torch.device("meta"))


@pytest.mark.parametrize("B", [1, 5, 32])
def test_an_actors_step_matches_the_float64_cell_and_follows_new_weights(B):
    # without gradients on a CPU the step's products are oneDNN's (`LSTMCore._step`)
    torch.manual_seed(B)
    core = LSTMCore(6, 3, N)
    x, extra = torch.randn(1, B, 6), torch.randn(1, B, 3)
    starts, state = torch.rand(1, B) < 0.3, torch.randn(2, B, N)

    def reference() -> tuple[torch.Tensor, torch.Tensor]:
        cell = core.cell
        keep = (~starts[0]).double()[:, None]
        xt = torch.cat([x[0].double(), extra[0].double() * keep], dim=1)
        gates = (xt @ cell.weight_ih.double().T + (state[0].double() * keep) @ cell.weight_hh.double().T
                 + cell.bias_ih.double() + cell.bias_hh.double())
        i, f, g, o = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * state[1].double() * keep + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c

    for _ in range(2):  # the second time with weights changed in place, as a fused optimiser changes them
        with torch.inference_mode():
            h, c = core(x, extra, starts, state)
        want_h, want_c = reference()
        torch.testing.assert_close(h[0].double(), want_h, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(c[0].double(), want_c, rtol=1e-5, atol=1e-6)
        for p in core.parameters():
            p.grad = torch.randn_like(p)
        torch.optim.Adam(core.parameters(), lr=0.5, fused=True).step()  # in place, the version counter unmoved
    assert recurrent._ONEDNN_LINEAR or not torch.backends.mkldnn.is_available()


def test_a_step_with_gradients_reaches_the_weights():
    core = LSTMCore(6, 3, N)
    h, _ = core(torch.randn(1, 4, 6), torch.randn(1, 4, 3), torch.zeros(1, 4, dtype=torch.bool),
                torch.randn(2, 4, N))
    h.sum().backward()
    assert core.cell.weight_ih.grad.abs().sum() > 0 and core.cell.weight_hh.grad.abs().sum() > 0


def test_read_only_weights_load_without_a_warning_and_equal_the_learners():
    # Ray's object store hands actors read-only arrays
    source, target = build_model(EnvSpec((4,), "float32", True, num_actions=2)), \
        build_model(EnvSpec((4,), "float32", True, num_actions=2))
    weights = weights_to_numpy(source)
    for array in weights.values():
        array.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_numpy_weights(target, weights)
    for (name, a), b in zip(source.state_dict().items(), target.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
