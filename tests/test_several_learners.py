"""Several learners training one policy on Ray (`learner.num_learners`): the group forms, the actors are spread
over the ranks, counters add up, and a killed rank takes the group down and back up from the checkpoint."""

from __future__ import annotations

import pytest
import torch

from levelray.contracts.config import ConfigError, replace_paths
from levelray.contracts.validate import ray_resources, validate
from levelray.deploy.cluster.control import job_status
from levelray.deploy.rundir import RunDir
from levelray.deploy.training.driver import write_checkpoint
from levelray.deploy.training.ray_backend import RayJob, check_placement
from levelray.learner.ranks import merge_counters, merge_stats, rank_counters
from tests import support
from tests.support import wait_for
from tests.test_reliability import kill_and_wait


def _config(tmp_path, **kw):
    sizes = dict(env__num_levels=50, actors__num_actors=2, actors__envs_per_actor=4, learner__batch_size=1,
                 learner__num_learners=2, levels__snapshot_interval_s=0.5)
    return support.cartpole_config(tmp_path, **{**sizes, **kw})


def test_counters_add_up_over_ranks_and_shared_ones_do_not():
    ranks = [{"env_steps": 100, "episodes": 4, "learner_version": 7, "samples_trained": 300, "dropped": {"lag": 1}},
             {"env_steps": 50, "episodes": 1, "learner_version": 7, "samples_trained": 300, "dropped": {"lag": 2}}]
    merged = merge_counters(ranks)
    assert (merged["env_steps"], merged["episodes"], merged["learner_version"], merged["samples_trained"]) == (
        150, 5, 7, 300)
    assert merged["dropped"] == {"lag": 3}
    assert rank_counters(merged, 0) == merged
    assert rank_counters(merged, 1)["env_steps"] == 0 and rank_counters(merged, 1)["learner_version"] == 7
    stats = merge_stats([{**ranks[0], "episode_return_mean": 10.0, "episode_returns_window": 3, "node": "a",
                          "queue_depth": 1},
                         {**ranks[1], "episode_return_mean": 30.0, "episode_returns_window": 1, "node": "b",
                          "queue_depth": 2}])
    assert stats["episode_return_mean"] == pytest.approx(15.0) and stats["queue_depth"] == 3
    assert [(r["rank"], r["node"]) for r in stats["learners"]] == [(0, "a"), (1, "b")]


def test_learners_the_cluster_cannot_place_are_a_config_error_not_a_hang(ray_session, tmp_path):
    with pytest.raises(ConfigError, match="learner.num_learners = 64 learners need 1 CPU each"):
        check_placement(replace_paths(_config(tmp_path), {"learner.num_learners": 64}))
    with pytest.raises(ConfigError, match="need 1 GPU each"):
        check_placement(replace_paths(_config(tmp_path), {"learner.num_gpus": 1.0}))
    with pytest.raises(ConfigError, match="need 1 learner_node each"):
        check_placement(replace_paths(_config(tmp_path), {"learner.resources": "learner_node=1"}))
    with pytest.raises(ConfigError, match="service_resources asks for 1 levelray_services"):
        check_placement(replace_paths(_config(tmp_path), {"service_resources": "levelray_services=1"}))
    check_placement(_config(tmp_path))  # 2 learners, a CPU each: placeable


@pytest.mark.parametrize("text", ["learner_node", "learner_node=0", "=1", "a=1,b=x"])
def test_malformed_learner_resources_are_refused_naming_the_field(tmp_path, text):
    with pytest.raises(ConfigError, match="learner.resources: expected NAME=AMOUNT"):
        validate(replace_paths(_config(tmp_path), {"learner.resources": text}))
    assert ray_resources("learner_node=1, fast_disk=0.5") == {"learner_node": 1.0, "fast_disk": 0.5}
    with pytest.raises(ConfigError, match="service_resources: expected NAME=AMOUNT"):
        validate(replace_paths(_config(tmp_path), {"service_resources": text}))


def test_several_learners_need_the_ray_backend(tmp_path):
    with pytest.raises(ConfigError, match="learner.num_learners = 2 needs backend ray"):
        validate(replace_paths(_config(tmp_path), {"backend": "inline"}))


@pytest.mark.timeout(300)
def test_two_learners_train_one_policy_and_a_killed_rank_restarts_the_group(ray_session, tmp_path):
    ray = ray_session
    cfg = _config(tmp_path, max_learner_restarts=2)
    job = RayJob(cfg, RunDir(cfg.run_dir))
    try:
        snap = wait_for(lambda: (s := job.poll())["learner"]["learner_version"] >= 5 and s, 120, "updates")
        learners = snap["learner"]["learners"]
        assert [entry["rank"] for entry in learners] == [0, 1]
        per_rank = ray.get([learner.stats.remote() for learner in job.learners])
        assert all(s["env_steps"] > 0 for s in per_rank)  # each rank is fed by its own actor
        assert snap["learner"]["env_steps"] <= sum(s["env_steps"] for s in per_rank)  # the job's: every rank's
        # the ranks move in lockstep, at most one update apart: at a common version their models are one
        states = wait_for(lambda: (st := ray.get([learner.state.remote() for learner in job.learners]))
                          and st[0]["counters"]["learner_version"] == st[1]["counters"]["learner_version"] and st,
                          60, "both ranks between updates at one version")
        for name, p in states[0]["learner"]["model"].items():
            assert torch.equal(p, states[1]["learner"]["model"][name]), name
        status = job_status(job.supervisor)  # what `levelray status --json` prints
        assert status["actors_alive"] == 2 and [r["rank"] for r in status["learners"]] == [0, 1]
        assert all(r["device"] == "cpu" and r["node"] for r in status["learners"])
        saved = write_checkpoint(job, job.run_dir, cfg)
        before = job.poll()["learner"]
        kill_and_wait(ray, job.learners[1])
        after = wait_for(lambda: (s := job.poll())["learner_restarts"] == 1 and s, 120, "group restart")
        assert len(job.learners) == 2
        for key in ("env_steps", "episodes", "learner_version", "samples_trained"):
            assert after["learner"][key] >= before[key], key
        wait_for(lambda: job.poll()["learner"]["learner_version"] > max(saved, before["learner_version"]) + 3, 120,
                 "training after the restart")
    finally:
        job.stop()
        job.kill()


@pytest.mark.timeout(300)
def test_a_two_learner_run_checkpoints_and_resumes_without_counters_stepping_back(ray_session, tmp_path, capsys):
    """`levelray train --num-learners 2` to 6k env steps, then `--resume` to 12k: the checkpoint holds the job's
    counters (every rank's env steps), the resumed run goes on from them, and metrics.jsonl never steps back."""
    import json

    from levelray.deploy.cli import main
    from levelray.deploy.training.driver import load_resume_state

    run = tmp_path / "run"
    common = ["--env", "CartPole-v1", "--num-levels", "50", "--num-actors", "2", "--envs-per-actor", "4",
              "--batch-size", "1", "--metrics-port", "0", "--report-interval", "1", "--tensorboard", "false",
              "--quiet", "--checkpoint-interval", "5"]
    assert main(["train", *common, "--num-learners", "2", "--total-steps", "6000", "--run-dir", str(run)]) == 0
    counters = load_resume_state(RunDir(run))["learner"]["counters"]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert counters["env_steps"] >= 6000 and counters["env_steps"] == records[-1]["env_steps"]
    assert main(["train", "--resume", str(run), "--total-steps", "12000", "--quiet"]) == 0
    after = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for key in ("env_steps", "learner_version", "samples_trained", "episodes"):
        values = [r[key] for r in after if r.get(key) is not None]
        assert values == sorted(values), key
    assert after[-1]["env_steps"] >= 12000 and after[-1]["learner_version"] > records[-1]["learner_version"]
