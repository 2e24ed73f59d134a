"""Robust PLR: new levels are played and scored but carry no gradient; the flag travels with the unroll.

The learner's masked update against an independent float64 reference (V-trace and IMPALA's loss written out
here, averaged over the replayed steps alone), a wholly new batch that changes nothing but the level scores,
the trajectory contract's `level_replayed` checks, and runs end to end on both backends.
"""

import copy
import dataclasses
import json

import numpy as np
import pytest
import torch

from levelray.contracts.config import LearnerConfig, RunConfig, replace_paths
from levelray.contracts.spec import EnvSpec
from levelray.contracts.trajectory import TrajectoryError, validate_unroll
from levelray.learner.core import LearnerCore
from levelray.learner.learner import Learner
from levelray.level_service.service import LevelServiceCore

VEC = EnvSpec(obs_shape=(4,), obs_dtype="float32", discrete=True, num_actions=3)
GAMMA = 0.9


def make_batch(rng, T=6, B=4, replayed=None):
    """A CartPole-shaped batch; episodes end at step 2 of every column, so flags may change at step 3."""
    terminated = np.zeros((T, B), dtype=bool)
    terminated[2] = True
    return {
        "obs": rng.normal(size=(T + 1, B, 4)).astype(np.float32),
        "actions": rng.integers(0, 3, size=(T, B)),
        "rewards": rng.normal(size=(T, B)).astype(np.float32),
        "terminated": terminated,
        "truncated": np.zeros((T, B), dtype=bool),
        "behaviour_params": rng.normal(size=(T, B, 3)).astype(np.float32),
        "level_seeds": np.tile(np.where(np.arange(T) <= 2, 10, 11)[:, None], (1, B)) + 100 * np.arange(B),
        "level_replayed": np.zeros((T, B), dtype=bool) if replayed is None else replayed,
        "env_ids": np.arange(B),
        "policy_version": np.zeros(B, dtype=np.int64),
        "actor_id": np.zeros(B, dtype=np.int64),
    }


def reference_gradient(learner: Learner, batch: dict, mask: np.ndarray, cfg: LearnerConfig) -> torch.Tensor:
    """IMPALA's loss in float64, averaged over the steps where `mask` is True, and its gradient.

    V-trace (Espeholt et al. 2018, eq. 1) by its backward recursion with rho-bar = c-bar = 1 and lambda 1:
    vs_t = V_t + rho_t delta_t + gamma_t c_t (vs_{t+1} - V_{t+1}), delta_t = r_t + gamma_t V_{t+1} - V_t."""
    model = copy.deepcopy(learner.model).double()  # the MLP's two towers, run in float64 (its forward casts)
    T, B = batch["rewards"].shape
    x = torch.from_numpy(batch["obs"]).double().reshape((T + 1) * B, 4)
    dist, values = model.policy(x).view(T + 1, B, 3), model.value(x).view(T + 1, B)
    logp_all = torch.log_softmax(dist[:T], -1)
    actions = torch.from_numpy(batch["actions"])
    logp = logp_all.gather(-1, actions[..., None])[..., 0]
    behaviour = torch.log_softmax(torch.from_numpy(batch["behaviour_params"]).double(), -1)
    mu = behaviour.gather(-1, actions[..., None])[..., 0]
    rho = torch.exp(logp.detach() - mu).clamp(max=1.0).numpy()
    v = values.detach().numpy()
    r = batch["rewards"].astype(np.float64)
    g = GAMMA * (1.0 - batch["terminated"].astype(np.float64))
    vs = np.zeros((T + 1, B))
    vs[T] = v[T]
    for t in reversed(range(T)):
        delta = r[t] + g[t] * v[t + 1] - v[t]
        vs[t] = v[t] + rho[t] * delta + g[t] * rho[t] * (vs[t + 1] - v[t + 1])
    pg_adv = rho * (r + g * vs[1:] - v[:T])
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    per_step = (-logp * torch.from_numpy(pg_adv) + cfg.value_weight * 0.5 * (torch.from_numpy(vs[:T]) - values[:T]) ** 2
                - cfg.entropy_weight * entropy)
    m = torch.from_numpy(mask)
    loss = per_step[m].sum() / m.sum()
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def learner_gradient(learner: Learner, batch: dict) -> torch.Tensor:
    learner.set_learning_rate(0.0)
    learner.update(batch)
    return torch.cat([p.grad.flatten() for p in learner.model.parameters()]).double()


def test_masked_gradient_is_the_gradient_of_the_replayed_steps_alone():
    rng = np.random.default_rng(0)
    cfg = LearnerConfig(discount=GAMMA, grad_clip_type="none", entropy_weight=0.01, value_normalization=False)
    replayed = np.zeros((6, 4), dtype=bool)
    replayed[:3, 0] = True  # a replayed episode, then a new one, in one column
    replayed[3:, 1] = True  # a new episode, then a replayed one
    replayed[:, 2] = True  # two replayed episodes; column 3 is all new
    batch = make_batch(rng, replayed=replayed)
    masked = learner_gradient(Learner(VEC, cfg, seed=3), {**batch, "mask": replayed})
    expected = reference_gradient(Learner(VEC, cfg, seed=3), batch, replayed, cfg)
    torch.testing.assert_close(masked, expected, rtol=2e-4, atol=1e-6)
    unmasked = learner_gradient(Learner(VEC, cfg, seed=3), batch)
    assert not torch.allclose(unmasked, expected, rtol=1e-2, atol=1e-4)  # the mask is what made them equal


def _core(tmp_path, robust: bool = True, popart: bool = True) -> tuple[LearnerCore, LevelServiceCore]:
    cfg = replace_paths(RunConfig(), {
        "env.id": "CartPole-v1", "env.num_levels": 0, "levels.strategy": "value_l1", "levels.robust": robust,
        "levels.buffer_size": 8, "learner.value_normalization": popart, "learner.discount": GAMMA,
        "run_dir": str(tmp_path)})
    levels = LevelServiceCore(None, dataclasses.replace(cfg.levels, snapshot_interval_s=60.0), start_level=0)
    return LearnerCore(cfg, VEC), levels


def assert_same_state(a, b) -> None:
    """Equal nested learner states: tensors bit for bit, everything else by value."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same_state(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same_state(x, y)
    else:
        assert a == b


def _unroll(batch: dict, k: slice) -> dict:
    """Column slice `k` of a batch as one actor's unroll."""
    u = {key: (v[:, k] if key not in ("env_ids", "policy_version", "actor_id") else v[k]) for key, v in batch.items()}
    u["policy_version"], u["actor_id"] = 0, 0
    u["episode_returns"] = np.zeros(int(u["terminated"].sum()))
    return u


def test_a_batch_of_new_levels_changes_nothing_on_the_learner_and_never_reaches_the_level_service(tmp_path):
    core, levels = _core(tmp_path)
    rng = np.random.default_rng(1)
    warm = make_batch(rng, replayed=np.ones((6, 4), dtype=bool))  # one real update: Adam and PopArt have state
    core.train([_unroll(warm, slice(0, 2)), _unroll(warm, slice(2, 4))])
    assert core.stats()["learner_version"] == 1 and core.stats()["samples_trained"] == 24
    before, episodes_scored = core.learner.state_dict(), levels.stats()["num_episodes"]
    batch = make_batch(rng)  # every step on a new level
    fresh = [_unroll(batch, slice(0, 2)), _unroll(batch, slice(2, 4))]
    for u in fresh:
        assert core.accept(u)
    metrics = core.train(fresh)
    assert metrics["trained_steps"] == 0
    assert_same_state(core.learner.state_dict(), before)  # weights, Adam's moments, PopArt, version, samples
    assert core.stats()["learner_version"] == 1 and core.stats()["samples_trained"] == 24
    assert levels.stats()["num_episodes"] == episodes_scored  # the actors score episodes, never the learner
    assert core.stats()["episodes"] == 4 and core.stats()["episodes_replayed"] == 0


def test_a_mixed_batch_trains_and_counts_only_the_replayed_steps(tmp_path):
    core, _ = _core(tmp_path)
    replayed = np.zeros((6, 4), dtype=bool)
    replayed[3:, :2] = True
    batch = make_batch(np.random.default_rng(2), replayed=replayed)
    fresh = [_unroll(batch, slice(0, 2)), _unroll(batch, slice(2, 4))]
    for u in fresh:
        core.accept(u)
    core.train(fresh)
    stats = core.stats()
    assert stats["learner_version"] == 1 and stats["samples_trained"] == int(replayed.sum()) == 6
    assert stats["episodes_replayed"] == 0  # the replayed episodes have not ended yet
    plain, _ = _core(tmp_path / "plain", robust=False)
    for u in fresh:
        plain.accept(u)
    plain.train(fresh)
    assert plain.stats()["samples_trained"] == 24  # without --level-robust every step trains


def _valid_unroll() -> dict:
    u = _unroll(make_batch(np.random.default_rng(3), T=6, B=2), slice(0, 2))
    u["env_ids"] = np.arange(2)
    return u


def test_the_contract_checks_level_replayed():
    u = _valid_unroll()
    u["level_replayed"] = np.zeros((6, 2), dtype=bool)
    u["level_replayed"][3:, 1] = True  # changes after the episode end at step 2: fine
    validate_unroll(u, VEC)
    for bad, match in (
        (np.zeros((6, 2), dtype=np.int64), "level_replayed"),
        (np.zeros((5, 2), dtype=bool), "level_replayed"),
    ):
        with pytest.raises(TrajectoryError, match=match):
            validate_unroll({**u, "level_replayed": bad}, VEC)
    within = np.zeros((6, 2), dtype=bool)
    within[4:, 0] = True  # changes at step 4, inside the episode that began at step 3
    with pytest.raises(TrajectoryError, match="level_replayed.*step 4 of env 0"):
        validate_unroll({**u, "level_replayed": within}, VEC)
    missing = dict(u)
    del missing["level_replayed"]
    with pytest.raises(TrajectoryError, match="level_replayed"):
        validate_unroll(missing, VEC)


ROBUST_RUN = ["--env", "minigrid:Empty-5x5", "--num-levels", "0", "--level-strategy", "value_l1", "--level-robust",
              "--level-buffer-size", "16", "--level-rho", "0.25", "--level-replay-schedule", "fixed",
              "--seed-prefetch", "1", "--envs-per-actor", "4", "--unroll-length", "20", "--batch-size", "2",
              "--total-steps", "24000", "--metrics-port", "0", "--report-interval", "0.5", "--quiet",
              "--tensorboard", "false"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_robust_run_trains_on_replayed_levels_only(backend, tmp_path, one_thread, request):
    from levelray.deploy.cli import main

    if backend == "ray":
        request.getfixturevalue("ray_session")
    run_dir = tmp_path / backend
    assert main(["train", "--backend", backend, "--num-actors", "2", *ROBUST_RUN, "--run-dir", str(run_dir)]) == 0
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = records[-1]
    fraction = last["samples_trained"] / last["env_steps"]
    assert 0.05 < fraction < 0.75, fraction  # about the replay share (0.5 once replay starts), never everything
    assert all(r["levels_buffered"] <= 16 for r in records) and last["levels_buffered"] == 16
    seen = [r["levels_replay_fraction"] for r in records if r["levels_replay_fraction"] is not None]
    assert seen and max(seen) > 0.2
    assert last["levels_evicted"] > 0


@pytest.mark.timeout(240)
def test_resume_restores_the_level_buffer_exactly(tmp_path, one_thread):
    """The buffer, its scores and staleness, the new-level permutation's position and the pending fragments are
    in the checkpoint, and a resumed run's level service starts from exactly that state."""
    import yaml

    from levelray.contracts.config import from_dict
    from levelray.contracts.snapshot import packb
    from levelray.deploy.cli import main
    from levelray.deploy.rundir import RunDir
    from levelray.deploy.training.components import make_level_service
    from levelray.deploy.training.driver import load_resume_state

    run_dir = tmp_path / "run"
    args = ["train", "--backend", "inline", "--num-actors", "1", *ROBUST_RUN, "--run-dir", str(run_dir)]
    assert main([*(a if a != "24000" else "6400" for a in args)]) == 0
    state = load_resume_state(RunDir(run_dir))
    saved = state["levels"]
    assert saved["kind"] == "buffer" and saved["size"] == 16 and saved["counts"]["num_new"] > 16
    cfg = from_dict(yaml.safe_load((run_dir / "config.yaml").read_text()))
    # the service both backends build from a checkpoint (before any env draws its first level from it)
    assert packb(make_level_service(cfg, saved).state_dict()) == packb(saved)
