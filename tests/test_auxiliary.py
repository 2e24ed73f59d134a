"""Auxiliary losses (`learner/auxiliary.py`): a user's loss, written outside the package and named by import path,
trains beside IMPALA's on both backends with no edit of the learner; docs/architecture.md shows exactly that
module; a path that does not import, or a loss the learner cannot run, is refused naming the key."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from levelray.actors.envs import env_spec
from levelray.contracts.config import LearnerConfig, replace_path
from levelray.deploy.cli import main
from levelray.deploy.rundir import RunDir
from levelray.deploy.training.components import make_replay
from levelray.learner.auxiliary import AuxiliaryInputs, load
from levelray.learner.core import LearnerCore
from levelray.learner.learner import Forward, Learner
from tests.test_learner import VEC, make_batch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "tests.reward_prediction:RewardPrediction"


def test_the_docs_show_the_example_module_that_is_tested():
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Adding an auxiliary loss", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert block == (ROOT / "tests" / "reward_prediction.py").read_text()


def _inputs(batch: dict) -> AuxiliaryInputs:
    """What the learner hands the example for `batch` (all of it that the example reads), built apart."""
    T, B = batch["rewards"].shape
    forward = Forward(None, None, None, torch.from_numpy(batch["actions"]), None)
    return AuxiliaryInputs(batch, forward, torch.ones(T, B), None, torch.device("cpu"))


def test_a_shared_auxiliary_loss_adds_its_weighted_gradient_to_the_agents():
    """With a zero learning rate the step leaves the weights and keeps the gradient it took: on the policy network
    it is the plain learner's plus `weight` x the example's own gradient, computed here from the same weights."""
    cfg = LearnerConfig(learning_rate=0.0, grad_clip_type="none", value_normalization=False)
    batch = make_batch(np.random.default_rng(0))
    plain, learner = Learner(VEC, cfg, seed=0), Learner(VEC, cfg, seed=0, auxiliary=[load(EXAMPLE)])
    probe = copy.deepcopy(learner.auxiliary[0]), copy.deepcopy(learner.model)
    plain_metrics, metrics = plain.update(batch).metrics, learner.update(batch).metrics
    example, net = probe
    out = example.loss(net, _inputs(batch))
    expected = torch.autograd.grad(example.weight * out.loss, list(net.parameters()), allow_unused=True)
    reached = 0
    for p, p_plain, g in zip(learner.model.parameters(), plain.model.parameters(), expected, strict=True):
        torch.testing.assert_close(p.grad, p_plain.grad if g is None else p_plain.grad + g, rtol=1e-5, atol=1e-7)
        reached += g is not None
    assert 0 < reached < len(expected)  # the torso, not the policy and value output layers
    value = float(out.loss.detach())
    assert metrics["reward_prediction_loss"] == pytest.approx(value, rel=1e-6)
    assert metrics["loss_total"] == pytest.approx(plain_metrics["loss_total"] + 0.5 * value, rel=1e-5)
    assert metrics["grad_norm_reward_prediction"] > metrics["torso_grad_norm_reward_prediction"] > 0
    head = learner.auxiliary[0].head
    assert all(p.grad is not None for p in head.parameters())  # the agent's optimiser trains the head


def test_the_example_trains_checkpoints_and_resumes():
    cfg = LearnerConfig(learning_rate=1e-2)
    rng = np.random.default_rng(1)
    a = Learner(VEC, cfg, seed=0, auxiliary=[load(EXAMPLE)])
    head0 = copy.deepcopy(a.auxiliary[0].head.state_dict())
    for _ in range(3):
        a.update(make_batch(rng))
    assert not torch.equal(a.auxiliary[0].head.weight, head0["weight"])
    state = a.state_dict()
    assert set(state["reward_prediction_loss"]) == {"modules"}
    b = Learner(VEC, cfg, seed=7, auxiliary=[load(EXAMPLE)])
    b.load_state_dict(state)
    batch = make_batch(rng)
    assert a.update(batch).metrics == b.update(batch).metrics
    assert torch.equal(a.auxiliary[0].head.weight, b.auxiliary[0].head.weight)


def test_the_example_beside_the_model_loss_with_its_own_optimiser():
    """Two auxiliary losses at once: the model loss (separate optimiser, sequences from replay) and the example
    (shared); each reports its terms and keeps its own checkpoint state."""
    from tests.test_model_loss import _cartpole_cfg, _unrolls

    cfg = replace_path(_cartpole_cfg(), "learner.auxiliary_losses", [EXAMPLE])
    core = LearnerCore(cfg, env_spec(cfg.env), replay=make_replay(cfg))
    assert [aux.name for aux in core.learner.auxiliary] == ["model", "reward_prediction"]
    unrolls = _unrolls(cfg, 8)
    for i in range(4):
        metrics = core.train(unrolls[2 * i: 2 * i + 2])
    assert {"model_value_loss", "grad_norm_model", "reward_prediction_loss", "grad_norm_reward_prediction"} <= set(
        metrics)
    state = core.state_dict()["learner"]
    assert state["model_loss"]["updates"] == 4 and set(state["reward_prediction_loss"]) == {"modules"}
    assert set(core.learner.optimizers()) == {"optimizer", "model_optimizer"}


BASE = ["train", "--env", "CartPole-v1", "--num-levels", "0", "--metrics-port", "0", "--quiet"]


@pytest.mark.parametrize("path, says", [
    ("tests.no_such_module:RewardPrediction", "cannot import 'tests.no_such_module'"),
    ("tests.reward_prediction:NoSuchLoss", "has no class or function 'NoSuchLoss'"),
    ("reward_prediction", "expected module:attribute"),
])
def test_a_loss_that_does_not_import_is_refused_before_anything_starts(tmp_path, capsys, path, says):
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main([*BASE, "--backend", "inline", "--auxiliary-loss", path, "--run-dir", str(run)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "learner.auxiliary_losses" in err and says in err, err
    assert not run.exists()


def test_a_loss_the_learner_cannot_run_is_refused_naming_the_key():
    with pytest.raises(ValueError, match="learner.auxiliary_losses: RewardPrediction.name must be .* got "
                                         "'reward_prediction'"):
        Learner(VEC, LearnerConfig(), auxiliary=[load(EXAMPLE), load(EXAMPLE)])


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_the_example_trains_end_to_end_on_both_backends(request, tmp_path, backend):
    """Named by its import path only, the example loads in the learner's process (on Ray the learner actor's: the
    driver's working directory is on its workers' path), falls over a short CartPole run and is checkpointed."""
    if backend == "ray":
        request.getfixturevalue("ray_session")  # one Ray for the whole test session
    run = tmp_path / "run"
    interval = "0" if backend == "inline" else "0.2"
    assert main([*BASE, "--backend", backend, "--num-actors", "1", "--envs-per-actor", "4", "--batch-size", "2",
                 "--total-steps", "6400", "--tensorboard", "false", "--auxiliary-loss", EXAMPLE,
                 "--report-interval", interval, "--run-dir", str(run)]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    series = [r["learner_reward_prediction_loss"] for r in records if "learner_reward_prediction_loss" in r]
    assert len(series) >= 3, series
    assert min(series[1:]) < series[0], series
    last = next(r for r in reversed(records) if "learner_reward_prediction_loss" in r)
    assert last["learner_torso_grad_norm_reward_prediction"] > 0, last
    ckpt = RunDir(run).load_latest_checkpoint()
    assert set(ckpt["learner"]["reward_prediction_loss"]) == {"modules"}
    assert yaml.safe_load((run / "config.yaml").read_text())["learner"]["auxiliary_losses"] == [EXAMPLE]
