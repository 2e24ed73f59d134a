"""TensorBoard event files: the run directory's event file holds every numeric field of metrics.jsonl,
under the same name, at the record's env step (read back with TensorBoard's own reader)."""

from __future__ import annotations

import json
import math

import pytest

from levelray.contracts.config import RunConfig, replace_paths
from levelray.deploy.monitoring.tensorboard import scalars
from levelray.deploy.rundir import RunDir
from levelray.deploy.training.driver import train
from tests.test_ray_system import read_tensorboard


def test_scalars_flattens_and_keeps_only_finite_numbers():
    record = {"env_steps": 10, "loss": 0.5, "nan": float("nan"), "flag": True, "name": "x", "none": None,
              "replay": {"size": 3, "hist": [1, 2]}, "dropped": {"policy_lag": 2}}
    assert scalars(record) == {"env_steps": 10.0, "loss": 0.5, "replay/size": 3.0, "dropped/policy_lag": 2.0}


@pytest.mark.timeout(120)
def test_an_inline_run_writes_every_record_to_tensorboard(tmp_path):
    run = RunDir.start(tmp_path / "run")
    cfg = replace_paths(RunConfig(), {
        "backend": "inline", "env.id": "CartPole-v1", "env.num_levels": 20,
        "actors.num_actors": 1, "actors.envs_per_actor": 4, "learner.batch_size": 1,
        "metrics_port": 0, "report_interval_s": 0.05, "total_steps": 4_000, "run_dir": str(run.path),
    })
    train(cfg, run, quiet=True)
    records = [json.loads(line) for line in (run.path / "metrics.jsonl").read_text().splitlines()]
    events = read_tensorboard(run.path)
    assert len(records) >= 3
    for name in ("episode_return_mean", "learner_loss_value", "learner_entropy", "level_seen_fraction",
                 "policy_lag_mean", "learner_version"):
        expected = [(r["env_steps"], float(r[name])) for r in records if r.get(name) is not None]
        got = events[name]
        assert [s for s, _ in got] == [s for s, _ in expected], name
        assert all(math.isclose(a, b, rel_tol=1e-6) for (_, a), (_, b) in zip(got, expected, strict=True)), name
    assert "time" not in events and "env_steps" not in events


def test_tensorboard_off_writes_no_event_file(tmp_path):
    run = RunDir.start(tmp_path / "run")
    cfg = replace_paths(RunConfig(), {
        "backend": "inline", "tensorboard": False, "env.id": "CartPole-v1", "env.num_levels": 0,
        "actors.num_actors": 1, "actors.envs_per_actor": 2, "learner.batch_size": 1,
        "metrics_port": 0, "total_steps": 200, "run_dir": str(run.path),
    })
    train(cfg, run, quiet=True)
    assert (run.path / "metrics.jsonl").exists()
    assert not list(run.path.glob("events.out.tfevents.*"))
