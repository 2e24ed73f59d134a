"""APPO (`learner.algorithm appo`, learner/appo.py): PPO's terms and advantage normalisation against a float64 NumPy
reference; at policy lag 0 one epoch is on-policy PPO's gradient, computed here independently; every pass recomputes
the log-probabilities and the clip fraction rises from 0; minibatches are whole columns; the update reads nothing
back until its one read, rescales PopArt's head once and skips non-finite passes; nonsense settings are refused
naming both flags; the `dcd` preset; two learners, bf16, an LSTM with replay and resume; CartPole learns on both
backends."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from levelray.actors.envs import env_spec
from levelray.contracts.config import AppoConfig, ConfigError, LearnerConfig, replace_paths
from levelray.contracts.validate import validate
from levelray.deploy.cli import main
from levelray.learner import appo
from levelray.learner.appo import Appo, standardise
from levelray.learner.learner import Learner, NonFiniteUpdate
from levelray.learner.losses import ppo_losses
from tests.test_learner import VEC, make_batch
from tests.test_learner_host_reads import host_reads
from tests.test_presets import cli_config

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny networks: one torch thread is as fast


def _appo(**kw) -> LearnerConfig:
    """A learner config on APPO: `appo` fields by name, the rest `LearnerConfig`'s."""
    fields = {k: kw.pop(k) for k in list(kw) if k in AppoConfig.__dataclass_fields__}
    return LearnerConfig(algorithm="appo", appo=AppoConfig(**fields), **kw)


# -- the terms against float64 NumPy --------------------------------------------------------------------------------

@pytest.mark.parametrize("value_clip", [0.0, 0.3])
def test_ppo_terms_and_the_surrogates_gradient_match_a_float64_reference(value_clip):
    rng = np.random.default_rng(0)
    T, B, eps = 7, 5, 0.2
    logp, adv, vs, values, ent = (rng.normal(size=(T, B)) for _ in range(5))
    old_logp = logp + rng.normal(scale=0.3, size=(T, B))  # ratios on both sides of the clip
    old_values = values + rng.normal(scale=0.5, size=(T, B))  # moves inside and outside the value clip
    w = np.abs(rng.normal(size=(T, B)))
    w[0, :2] = 0.0  # masked steps: out of the denominators and the diagnostics too
    logp_t = torch.from_numpy(logp).requires_grad_()
    out = ppo_losses(logp_t, *(torch.from_numpy(x) for x in (old_logp, adv, vs, values, old_values, ent)), clip=eps,
                     value_clip=value_clip, value_weight=0.5, entropy_weight=0.01, weights=torch.from_numpy(w))
    n, r = (w > 0).sum(), np.exp(logp - old_logp)
    unclipped, clipped = r * adv, np.clip(r, 1 - eps, 1 + eps) * adv
    policy = -(w * np.minimum(unclipped, clipped)).sum() / n
    squared = (vs - values) ** 2
    if value_clip:
        squared = np.maximum(squared, (vs - (old_values + np.clip(values - old_values, -value_clip, value_clip))) ** 2)
    value = 0.5 * (w * squared).sum() / n
    entropy = (w * ent).sum() / n
    trained = w > 0
    for got, want in ((out.policy, policy), (out.value, value), (out.entropy, entropy),
                      (out.total, policy + 0.5 * value - 0.01 * entropy),
                      (out.clip_fraction, (np.abs(r - 1) > eps)[trained].mean()),
                      (out.approx_kl, ((r - 1) - (logp - old_logp))[trained].mean())):
        assert got.item() == pytest.approx(want, rel=1e-12, abs=1e-15)
    out.policy.backward()
    carries = unclipped <= clipped  # min picks the unclipped term: the ratio's gradient flows, r A d(log pi)
    np.testing.assert_allclose(logp_t.grad.numpy(), np.where(carries, -w * r * adv / n, 0.0), rtol=1e-12, atol=1e-15)
    assert 0 < carries.mean() < 1


def test_advantage_normalisation_matches_a_float64_reference_over_the_trained_steps():
    rng = np.random.default_rng(1)
    x = rng.normal(loc=3.0, scale=2.0, size=(6, 4))
    trained = rng.random((6, 4)) < 0.7
    got = standardise(torch.from_numpy(x), torch.from_numpy(trained)).numpy()
    want = (x - x[trained].mean()) / (x[trained].std(ddof=1) + 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert np.isfinite(standardise(torch.ones(3, 2), torch.ones(3, 2, dtype=torch.bool)).numpy()).all()


# -- one epoch at lag 0 is PPO; several recompute -------------------------------------------------------------------

def _ppo_gradient(net: torch.nn.Module, batch: dict, *, clip: float, value_clip: float, gamma: float,
                  value_weight: float, entropy_weight: float) -> list[torch.Tensor]:
    """On-policy PPO's gradient on `batch`, written out as CleanRL's ppo.py computes it: GAE(lambda = 1) in float64
    from the values at collection (a truncated step bootstrapping from V(final obs), a terminated one from nothing),
    the advantages standardised, the ratio against the logged log-probabilities of the policy that acted, the
    pessimistic clipped surrogate and value terms."""
    T, B = batch["rewards"].shape
    logits, values = net(torch.from_numpy(batch["obs"]).reshape((T + 1) * B, -1))
    logits, values = logits.view(T + 1, B, -1), values.view(T + 1, B)
    v = values.detach().double().numpy()
    next_v = v[1:].copy()
    with torch.no_grad():
        v_final = net(torch.from_numpy(batch["final_obs"]))[1].double().numpy()
    for (t, k), value in zip(batch["final_obs_index"], v_final, strict=True):
        next_v[t, k] = value
    done = batch["terminated"] | batch["truncated"]
    delta = batch["rewards"] + gamma * np.where(batch["terminated"], 0.0, next_v) - v[:-1]
    adv, last = np.zeros((T, B)), np.zeros(B)
    for t in reversed(range(T)):
        adv[t] = last = delta[t] + gamma * (1.0 - done[t]) * last
    returns = torch.from_numpy(adv + v[:-1]).float()
    adv = torch.from_numpy((adv - adv.mean()) / (adv.std(ddof=1) + 1e-5)).float()
    actions = torch.from_numpy(batch["actions"])[..., None]
    log_pi = torch.log_softmax(logits[:-1], -1)
    logp = log_pi.gather(-1, actions)[..., 0]
    logged = torch.log_softmax(torch.from_numpy(batch["behaviour_params"]), -1).gather(-1, actions)[..., 0]
    ratio = (logp - logged).exp()
    pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()
    old = torch.from_numpy(v[:-1]).float()
    v_clipped = old + (values[:-1] - old).clamp(-value_clip, value_clip)
    v_loss = 0.5 * torch.maximum((values[:-1] - returns) ** 2, (v_clipped - returns) ** 2).mean()
    entropy = -(log_pi.exp() * log_pi).sum(-1).mean()
    return list(torch.autograd.grad(pg - entropy_weight * entropy + value_weight * v_loss, list(net.parameters())))


def test_one_epoch_at_policy_lag_0_is_on_policy_ppos_gradient():
    cfg = _appo(clip=0.2, value_clip=0.2, normalize_advantages=True, value_normalization=False,
                grad_clip_type="none", learning_rate=0.0, lambda_=1.0, discount=0.97)
    learner = Learner(VEC, cfg, seed=3)
    ppo_net = copy.deepcopy(learner.model)
    batch = make_batch(np.random.default_rng(4), T=8, B=5, truncate_at=(3, 2))
    with torch.no_grad():  # the policy that acted is the learner's: policy lag 0
        batch["behaviour_params"] = learner.model(torch.from_numpy(batch["obs"][:-1]).reshape(40, 4))[0].view(
            8, 5, -1).numpy()
    learner.update(batch)
    want = _ppo_gradient(ppo_net, batch, clip=0.2, value_clip=0.2, gamma=0.97, value_weight=cfg.value_weight,
                         entropy_weight=cfg.entropy_weight)
    for (name, p), g in zip(learner.model.named_parameters(), want, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6, msg=name)
    assert sum(float(g.abs().sum()) for g in want) > 0


def test_every_pass_recomputes_the_log_probabilities_and_the_clip_fraction_rises_from_0(monkeypatch):
    passes = []

    def recorded(log_probs, *args, **kwargs):
        out = ppo_losses(log_probs, *args, **kwargs)
        passes.append((log_probs.detach().clone(), float(out.clip_fraction)))
        return out

    monkeypatch.setattr(appo, "ppo_losses", recorded)
    learner = Learner(VEC, _appo(epochs=4, learning_rate=0.05), seed=0)
    forwards = []
    real_forward = learner._forward
    monkeypatch.setattr(learner, "_forward", lambda batch: forwards.append(batch) or real_forward(batch))
    metrics = learner.update(make_batch(np.random.default_rng(5), T=8, B=6)).metrics
    assert len(passes) == len(forwards) == 4  # the update's forward pass serves the first
    assert passes[0][1] == 0.0 and passes[-1][1] > 0.0, [c for _, c in passes]
    for (a, _), (b, _) in zip(passes, passes[1:], strict=False):
        assert not torch.equal(a, b)
    assert "final_obs" not in forwards[1]  # later passes need no V(final obs): the targets are the update's
    assert metrics["clip_fraction"] == pytest.approx(np.mean([c for _, c in passes]), rel=1e-6)
    assert metrics["approx_kl"] > 0 and metrics["version"] == 1


def test_minibatches_are_whole_columns_permuted_every_epoch_and_the_same_after_a_resume(monkeypatch):
    split = Appo(AppoConfig(minibatches=3), seed=7)
    epochs = [split.minibatches(8, version=5, epoch=e) for e in range(3)]
    for parts in epochs:
        assert sorted(np.concatenate(parts).tolist()) == list(range(8)) and [len(p) for p in parts] == [3, 3, 2]
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(epochs, epochs[1:], strict=False))
    again = Appo(AppoConfig(minibatches=3), seed=7).minibatches(8, version=5, epoch=1)
    assert all(np.array_equal(a, b) for a, b in zip(again, epochs[1], strict=True))
    learner = Learner(VEC, _appo(epochs=2, minibatches=3), seed=0)
    widths = []
    real_forward = learner._forward
    monkeypatch.setattr(learner, "_forward", lambda batch: widths.append(batch["obs"].shape[1]) or real_forward(batch))
    assert learner.update(make_batch(np.random.default_rng(6), B=6)).metrics["trained_steps"] == 36
    assert widths == [6, 2, 2, 2, 2, 2, 2]  # the targets' pass over all columns, then 2 epochs x 3 minibatches
    batch = make_batch(np.random.default_rng(6), B=6)
    batch.update(obs=torch.from_numpy(batch["obs"]), core_state=np.zeros((2, 6, 3)), core_inputs=np.eye(6))
    cut = appo.forward_batch(batch, np.array([1, 4]))  # a tensor (the inline fast path's) stays on its device
    assert isinstance(cut["obs"], torch.Tensor) and torch.equal(cut["obs"], batch["obs"][:, [1, 4]])
    assert cut["core_state"].shape == (2, 2, 3) and np.array_equal(cut["core_inputs"], np.eye(6)[[1, 4]])
    assert set(cut) == {"obs", "actions", "rewards", "terminated", "truncated", "core_state", "core_inputs"}


# -- the update's reads, PopArt, non-finite passes ------------------------------------------------------------------

@pytest.mark.parametrize("popart", [False, True])
def test_passes_read_nothing_back_until_the_updates_one_read(popart):
    rng = np.random.default_rng(7)
    learner = Learner(VEC, _appo(epochs=3, minibatches=2, value_clip=0.2, normalize_advantages=True,
                                 value_normalization=popart), seed=0)
    learner.update(make_batch(rng))
    with host_reads() as seen:
        pending = learner.step(make_batch(rng, truncate_at=(2, 1)))
    assert seen == []
    with host_reads(refuse=False) as seen:
        result = learner.settle(pending)
    assert seen == ["Tensor.tolist"] and learner.version == 2
    assert 0.0 <= result.metrics["clip_fraction"] <= 1.0 and np.isfinite(result.metrics["approx_kl"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on a lent GPU machine)")
@pytest.mark.parametrize("popart", [False, True])
def test_passes_on_cuda_do_not_synchronise_until_settle(popart):
    """`torch.cuda.set_sync_debug_mode("error")` raises at any synchronising CUDA call while the passes are queued."""
    from benchmarks.bench_learner import CASES
    from benchmarks.bench_learner import make_batch as bench_batch

    spec = CASES["mlp"]
    learner = Learner(spec, _appo(epochs=3, minibatches=2, value_clip=0.2, normalize_advantages=True, device="cuda",
                                  value_normalization=popart), seed=0)
    rng = np.random.default_rng(4)
    learner.update(bench_batch(spec, 20, 32, rng))  # first-step allocations (Adam's state) out of the way
    batch = bench_batch(spec, 20, 32, rng)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        pending = learner.step(batch)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    result = learner.settle(pending)
    assert learner.version == 2 and np.isfinite(result.metrics["loss_total"])


def test_popart_rescales_the_value_head_once_per_update_however_many_passes():
    """At learning rate 0 the passes' steps move nothing but PopArt's output-preserving rescale: the values in reward
    units are those before the update, as after one IMPALA step, though the statistics moved."""
    learner = Learner(VEC, _appo(epochs=3, minibatches=2, learning_rate=0.0), seed=0)
    batch = make_batch(np.random.default_rng(8))
    batch["rewards"] = batch["rewards"] * 50.0 + 20.0
    obs = torch.from_numpy(batch["obs"]).reshape(-1, 4)
    with torch.no_grad():
        before = learner.value_norm.unnormalize(learner.model(obs)[1])
    learner.update(batch)
    with torch.no_grad():
        after = learner.value_norm.unnormalize(learner.model(obs)[1])
    assert learner.value_norm.sigma > 5.0
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-3)


def test_a_nonfinite_pass_is_skipped_and_an_update_with_none_taken_changes_nothing():
    rng = np.random.default_rng(9)
    learner = Learner(VEC, _appo(minibatches=2, value_normalization=False), seed=0)
    learner.update(make_batch(rng))
    before = {k: v.clone() for k, v in learner.model.state_dict().items()}
    bad = make_batch(rng)
    bad["rewards"][:] = np.nan
    with pytest.raises(NonFiniteUpdate, match="update skipped"):
        learner.update(bad)
    assert learner.version == 1
    for k, v in learner.model.state_dict().items():
        assert torch.equal(v, before[k]), k
    half = make_batch(rng)
    half["rewards"][:, 0] = np.nan  # one column: the minibatch that holds it is skipped, the other is taken
    learner.update(half)
    assert learner.version == 2
    assert all(torch.isfinite(v).all() for v in learner.model.state_dict().values())
    assert any(not torch.equal(v, before[k]) for k, v in learner.model.state_dict().items())


# -- config: refusals and the dcd preset ------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["--ppo-epochs", "4"], r"learner.appo.epochs = 4 \(--ppo-epochs\).*learner.algorithm is impala \(--algorithm\)"),
    (["--normalize-advantages"], r"learner.appo.normalize_advantages = True \(--normalize-advantages\).*--algorithm"),
    (["--value-clip", "0.2"], r"learner.appo.value_clip = 0.2 \(--value-clip\).*--algorithm appo"),
    (["--algorithm", "appo", "--ppo-minibatches", "17"],
     r"learner.appo.minibatches = 17 \(--ppo-minibatches\).*16 env columns.*--batch-size x --envs-per-actor"),
])
def test_settings_that_mean_nothing_are_refused_naming_both_flags(argv, words):
    cfg = cli_config("--env", "CartPole-v1", "--batch-size", "2", *argv)
    with pytest.raises(ConfigError, match=words):
        validate(cfg)


@pytest.mark.parametrize("argv, words", [(["--ppo-epochs", "0"], "learner.appo.epochs: must be >= 1, got 0"),
                                         (["--ppo-clip", "0"], "learner.appo.clip: must be > 0.0"),
                                         (["--algorithm", "ppo"], "learner.algorithm: expected one of impala, appo")])
def test_out_of_range_settings_are_refused_naming_the_field(argv, words):
    with pytest.raises(ConfigError, match=words):
        cli_config("--env", "CartPole-v1", *argv)


def test_the_dcd_preset_runs_dcds_ppo_on_mazes():
    cfg = cli_config("--env", "maze:13x13", "--preset", "dcd")
    lr, a = cfg.learner, cfg.learner.appo
    assert (lr.algorithm, a.epochs, a.minibatches, a.clip, a.value_clip, a.normalize_advantages) == (
        "appo", 5, 1, 0.2, 0.2, True)
    assert (lr.learning_rate, lr.adam_eps, lr.grad_clip, lr.entropy_weight, lr.value_weight, lr.lambda_) == (
        1e-4, 1e-5, 0.5, 0.0, 0.5, 0.95)
    assert (lr.discount, lr.lstm_size, lr.value_normalization, lr.model) == (0.995, 256, False, "minigrid_cnn")
    assert lr.batch_size * cfg.actors.envs_per_actor == 32 and cfg.actors.unroll_length == 256
    validate(cfg)
    impala = cli_config("--env", "maze:13x13", "--preset", "dcd", "--algorithm", "impala")  # its other settings
    assert impala.learner.appo == AppoConfig() and impala.learner.learning_rate == 1e-4
    validate(impala)
    assert cli_config("--env", "maze:13x13", "--preset", "dcd", "--ppo-epochs", "2").learner.appo.epochs == 2
    with pytest.raises(ConfigError, match="preset dcd is DCD's maze learner.*CartPole-v1"):
        cli_config("--env", "CartPole-v1", "--preset", "dcd")


# -- several learners, bf16, an LSTM with replay and resume ----------------------------------------------------------

@pytest.mark.timeout(240)
def test_two_learners_on_appo_stay_identical_and_match_one_learner_on_the_union(tmp_path):
    """Each pass's gradient is averaged over the ranks, each weighted by its share of that pass's trained steps, so
    two ranks with Robust-PLR-like masks stay bit-identical and match one learner on both batches side by side."""
    from tests.test_data_parallel import _batches, _cfg, _run_ranks, _union

    cfg = replace_paths(_cfg(), {"learner.algorithm": "appo", "learner.appo.epochs": 3,
                                 "learner.appo.value_clip": 0.2})
    spec = env_spec(cfg.env)
    batches = _batches(cfg, masked=True)
    ranks = _run_ranks(tmp_path, {"spec": spec, "learner": cfg.learner, "model_loss": None, "batches": batches})
    for name, p0 in ranks[0]["params"].items():
        assert torch.equal(p0, ranks[1]["params"][name]), name
    single = Learner(spec, cfg.learner, seed=0)
    for per_rank in batches:
        single.update(_union(per_rank))
    for name, p in single.model.named_parameters():
        torch.testing.assert_close(ranks[0]["params"][name], p.detach(), rtol=0, atol=1e-5)
    assert ranks[0]["version"] == single.version and ranks[0]["metrics"][-1]["approx_kl"] > 0  # the passes moved it


def test_bf16_passes_move_the_policy_as_fp32_passes_do():
    """The networks compute in bf16 (their outputs, the targets, ratios and losses stay float32): the update's loss
    and the direction its passes move the parameters are fp32's, up to bf16's rounding."""
    batch = make_batch(np.random.default_rng(10), T=10, B=8)
    moves, losses = {}, {}
    for precision in ("fp32", "bf16"):
        learner = Learner(VEC, _appo(epochs=3, minibatches=2, learning_rate=1e-3, precision=precision), seed=0)
        assert learner.compute_dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
        before = torch.cat([p.detach().flatten().clone() for p in learner.model.parameters()])
        losses[precision] = learner.update(batch).metrics["loss_total"]
        moves[precision] = torch.cat([p.detach().flatten() for p in learner.model.parameters()]) - before
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.05, abs=0.01)
    assert torch.nn.functional.cosine_similarity(moves["bf16"], moves["fp32"], dim=0) > 0.9


def test_an_lstm_on_appo_with_replay_resumes_to_the_same_next_update():
    """Minibatches of whole columns carry each column's core state; a replayed unroll is one; the checkpoint holds
    all APPO needs (its minibatches come from the seed and the version)."""
    from tests.test_recurrent import _cfg, resume_with_replay

    cfg = _cfg(**{"replay.replay_ratio": 0.5, "learner.batch_size": 2, "replay.min_size": 1,
                  "learner.algorithm": "appo", "learner.appo.epochs": 2, "learner.appo.minibatches": 2,
                  "learner.appo.normalize_advantages": True})
    validate(cfg)
    ma, mb = resume_with_replay(cfg)
    assert ma == mb and ma["batch_steps"] == 2 * 12 * 3 and ma["clip_fraction"] >= 0.0


# -- CartPole learns on both backends ----------------------------------------------------------------------------------

@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_cartpole_learns_with_appo_on_both_backends(backend, tmp_path, request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    run = tmp_path / "run"
    assert main(["train", "--backend", backend, "--env", "CartPole-v1", "--algorithm", "appo", "--ppo-epochs", "2",
                 "--normalize-advantages", "--num-actors", "2", "--total-steps", "400000", "--stop-at-return", "200",
                 "--metrics-port", "0", "--report-interval", "1", "--quiet", "--tensorboard", "false",
                 "--run-dir", str(run)]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    best = max(r.get("episode_return_mean") or 0.0 for r in records)  # random actions: ~22
    assert best >= 150, [(r["env_steps"], r.get("episode_return_mean")) for r in records]
    trained = [r for r in records if r.get("learner_version", 0) > 0]
    assert trained and all(0.0 <= r["learner_clip_fraction"] <= 1.0 for r in trained)
    assert any(r["learner_approx_kl"] > 0.0 for r in trained)  # the second pass moved the policy from pi_0
