"""A NaN/Inf loss or gradient skips the update (model, optimiser, PopArt statistics and version as they
were), is counted, and N in a row stop the job with a message naming what diverged."""

from __future__ import annotations

import json
import re

import gymnasium as gym
import numpy as np
import pytest
import torch

from levelray.contracts.config import LearnerConfig, RunConfig, replace_paths
from levelray.deploy.errors import JobFailed
from levelray.deploy.rundir import RunDir
from levelray.learner.core import LearnerCore, TrainingDiverged
from levelray.learner.learner import Learner, NonFiniteUpdate
from tests.test_learner import VEC, make_batch


def overflowing(batch: dict) -> dict:
    """Finite rewards whose squared errors overflow float32: the value loss is +Inf."""
    batch = dict(batch)
    batch["rewards"] = np.full_like(batch["rewards"], 3e38)
    return batch


def snapshot(learner: Learner) -> dict:
    state = learner.state_dict()
    return {"model": {k: v.clone() for k, v in state["model"].items()},
            "adam": {k: {n: t.clone() for n, t in v.items() if torch.is_tensor(t)}
                     for k, v in state["optimizer"]["state"].items()},
            "version": state["version"], "samples": state["samples_trained"], "norm": state["value_normalization"]}


@pytest.mark.parametrize("popart", [False, True])
def test_a_nonfinite_update_is_skipped_and_leaves_everything_as_it_was(popart):
    rng = np.random.default_rng(0)
    learner = Learner(VEC, LearnerConfig(value_normalization=popart), seed=0)
    learner.update(make_batch(rng))  # Adam has moments, PopArt has statistics
    before = snapshot(learner)
    with pytest.raises(NonFiniteUpdate, match=r"non-finite .*loss_value.* at learner version 1") as info:
        learner.update(overflowing(make_batch(rng)))
    assert re.search(r"loss_total=(nan|inf)", str(info.value))
    after = snapshot(learner)
    assert after["version"] == before["version"] == 1 and after["samples"] == before["samples"]
    assert after["norm"] == before["norm"]
    for k in before["model"]:
        assert torch.equal(before["model"][k], after["model"][k]), k
    for k in before["adam"]:
        for n in before["adam"][k]:
            assert torch.equal(before["adam"][k][n], after["adam"][k][n]), (k, n)
    assert all(p.grad is None for p in learner.model.parameters())
    metrics = learner.update(make_batch(rng)).metrics  # and the next good batch trains normally
    assert metrics["version"] == 2 and np.isfinite(metrics["loss_total"])


def unrolls(rng, n: int, T: int = 6, K: int = 2) -> list[dict]:
    out = []
    for _ in range(n):
        b = make_batch(rng, T=T, B=K)
        out.append({**b, "policy_version": 0, "actor_id": 0, "episode_returns": np.zeros(0),
                    "episode_lengths": np.zeros(0, dtype=np.int64)})
    return out


def test_the_core_counts_skips_and_stops_after_n_in_a_row():
    cfg = replace_paths(RunConfig(), {"learner.batch_size": 1, "learner.max_nonfinite_updates": 3})
    core = LearnerCore(cfg, VEC)
    rng = np.random.default_rng(1)
    good = lambda: unrolls(rng, 1)  # noqa: E731
    bad = lambda: [overflowing(u) for u in unrolls(rng, 1)]  # noqa: E731
    assert core.train(bad()) == {} and core.train(bad()) == {}
    assert core.train(good())["version"] == 1  # a good update resets the run of skips
    assert core.train(bad()) == {} and core.train(bad()) == {}
    with pytest.raises(TrainingDiverged, match=r"3 updates in a row .*--max-nonfinite-updates 3.*loss_value"):
        core.train(bad())
    stats = core.stats()
    assert stats["nonfinite_updates"] == 5 and stats["learner_version"] == 1
    assert "loss_value" in stats["last_nonfinite"]
    assert core.state_dict()["counters"]["nonfinite_updates"] == 5


class OverflowingCartPole(gym.Wrapper):
    """CartPole whose rewards are 3e38: finite (so no input check refuses them) but their squares are not."""

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, 3e38, terminated, truncated, info


gym.register("LevelrayTest/OverflowingCartPole-v0",
             entry_point=lambda **kw: OverflowingCartPole(gym.make("CartPole-v1", **kw)))


@pytest.mark.timeout(120)
def test_a_diverging_run_stops_with_a_message_keeps_its_checkpoint_and_its_records(tmp_path):
    from levelray.deploy.training.driver import train

    run = RunDir.start(tmp_path / "run")
    cfg = replace_paths(RunConfig(), {
        "backend": "inline",
        "env.id": "LevelrayTest/OverflowingCartPole-v0",
        "env.num_levels": 0,
        "actors.num_actors": 1,
        "actors.envs_per_actor": 2,
        "learner.batch_size": 1,
        "learner.max_nonfinite_updates": 4,
        "metrics_port": 0,
        "report_interval_s": 0.01,
        "total_steps": 10**7,
        "run_dir": str(run.path),
    })
    with pytest.raises(JobFailed, match=r"training diverged: 4 updates in a row .*non-finite .*loss_value"):
        train(cfg, run, quiet=True)
    records = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    assert records and records[-1]["nonfinite_updates"] == 4  # the writer recorded the divergence
    ckpt = RunDir(run.path).load_latest_checkpoint()
    assert ckpt["version"] == 0 and ckpt["counters"]["nonfinite_updates"] == 4
    assert all(torch.isfinite(v).all() for v in ckpt["learner"]["model"].values())


def test_the_metrics_writer_records_nonfinite_values_as_null(tmp_path):
    run = RunDir.start(tmp_path / "run")
    run.append_metrics({"loss": float("nan"), "nested": {"x": float("inf"), "ok": 1.5},
                        "list": [1.0, float("-inf")], "array": np.array([np.nan, 2.0], dtype=np.float32)})
    run.close()
    record = json.loads((run.path / "metrics.jsonl").read_text())
    assert record == {"loss": None, "nested": {"x": None, "ok": 1.5}, "list": [1.0, None], "array": [None, 2.0]}
