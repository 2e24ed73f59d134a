"""The distributed system end to end on a real local Ray (started once per test session)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from levelray.contracts.config import RunConfig, replace_paths
from levelray.deploy.rundir import RunDir
from levelray.deploy.training.driver import train
from levelray.deploy.training.ray_backend import RayJob
from tests import support
from tests.support import free_port, json_output, wait_for

REPO = Path(__file__).resolve().parents[1]


def cartpole_config(tmp_path, **overrides) -> RunConfig:
    sizes = dict(env__num_levels=0, actors__num_actors=2, actors__envs_per_actor=8, learner__batch_size=2,
                 learner__learning_rate=1e-3,  # 2e-3 sometimes collapses the policy at ~3 versions of lag
                 report_interval_s=0.5)
    return support.cartpole_config(tmp_path, **{**sizes, **overrides})




@pytest.mark.timeout(300)
def test_cartpole_learns_on_ray_and_metrics_increase(ray_session, tmp_path):
    port = free_port()
    # The benchmark's configuration (benchmarks/bench_vs_rllib.py): 8 unrolls per update keep the learner
    # ahead of the actors (policy lag ~2.5 versions); at 2 per update the actors outrun it (lag up to 17
    # versions) and learning was slow and erratic. It reached 475 in 1.0-1.8M steps in 4 of 4 runs.
    cfg = cartpole_config(tmp_path, total_steps=3_000_000, stop_at_return=475.0, metrics_port=port,
                          learner__batch_size=8, actors__unrolls_per_submit=4)
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(train(cfg, RunDir(cfg.run_dir), quiet=True)))
    thread.start()

    def scrape() -> dict[str, float]:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            return {}
        return {s.name + json.dumps(s.labels, sort_keys=True): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples}

    first = wait_for(lambda: (m := scrape()) and m.get('levelray_env_steps_total{}', 0) > 0 and m, 60)
    time.sleep(2.0)
    second = scrape()
    # both actors run (an actor counts as alive once its constructor has returned: on a loaded machine the
    # second may still be starting when the first one's steps arrive)
    alive = wait_for(lambda: (m := scrape()).get('levelray_actors_alive{}') == 2 and m, 60)
    thread.join(timeout=240)
    assert not thread.is_alive()
    assert second['levelray_env_steps_total{}'] > first['levelray_env_steps_total{}']
    assert second['levelray_learner_updates_total{}'] > first['levelray_learner_updates_total{}']
    for name in ('levelray_actors_alive{}', 'levelray_actors_desired{}', 'levelray_learner_queue_depth{}',
                 'levelray_policy_lag_count{}', 'levelray_trajectories_dropped_total{"reason": "policy_lag"}',
                 'levelray_learner_loss{"kind": "value"}'):
        assert name in second, name
    assert alive['levelray_actors_pending{}'] == 0
    assert result["episode_return_mean"] >= 450, result
    assert result["env_steps"] <= 3_100_000
    records = [json.loads(x) for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert {"time", "env_steps", "env_steps_per_second", "episode_return_mean", "learner_version",
            "policy_lag_mean"} <= set(records[-1])
    assert RunDir(cfg.run_dir).list_checkpoints()


@pytest.mark.timeout(180)
def test_procgen_envs_play_the_seeds_the_level_service_gave(ray_session):
    """With the `sequential` strategy the service hands out 100, 101, 102, ... in order, and the actor's
    prefetch buffer passes them on in the order envs ask: at the first reset env 0..3, then at every
    step the envs whose episode ended, by env index. So the levels started, read back from the unrolls
    in that order, must be exactly 100, 101, 102, ... — any seed played that the service did not give,
    or given to the wrong env, breaks the sequence."""
    import ray

    from levelray.actors.env_actor import EnvActor
    from levelray.level_service.service import LevelService

    cfg = replace_paths(RunConfig(), {
        "env.id": "procgen:chaser",  # random play ends ~12 episodes in 4 envs x 384 steps (coinrun: 0-2)
        "env.num_levels": 50,
        "env.start_level": 100,
        "levels.strategy": "sequential",
        "actors.envs_per_actor": 4,
        "actors.unroll_length": 64,
    })
    service = LevelService.options(num_cpus=0).remote(np.arange(100, 150), cfg.levels, discount=cfg.learner.discount,
                                                      rng=cfg.seed)
    actor = ray.remote(num_cpus=1, max_concurrency=4)(EnvActor).remote(0, cfg, None, service, seed=1)
    unrolls = ray.get(actor.collect.remote(6), timeout=120)
    stats = ray.get(service.stats.remote())
    ray.kill(actor)
    ray.kill(service)
    seeds = np.concatenate([u["level_seeds"] for u in unrolls])  # [T_total, K]
    dones = np.concatenate([u["terminated"] | u["truncated"] for u in unrolls])
    assert dones.any(), "no episode ended: the test would not check a level change"
    started = seeds[0].tolist()  # the first reset, env 0..3
    for t in range(len(seeds) - 1):
        started += [int(seeds[t + 1, k]) for k in np.flatnonzero(dones[t])]
    assert len(started) <= 50, "the sequence wrapped around: make the test's level set larger"
    assert started == list(range(100, 100 + len(started)))
    for k in range(4):  # within an episode the reported level never changes
        for segment in np.split(seeds[:, k], np.flatnonzero(dones[:, k]) + 1):
            assert len(set(segment.tolist())) <= 1
    assert stats["num_samples"] >= len(started)  # the service really gave them (prefetch asks ahead)


@pytest.mark.timeout(120)
def test_actor_sends_unrolls_in_groups_and_stops_at_max_unrolls(ray_session):
    """`unrolls_per_submit` = 2 with 5 unrolls to send: groups of 2, 2 and 1, every one received and
    trained on, none past the limit."""
    import ray

    from levelray.actors.env_actor import EnvActor
    from levelray.actors.envs import env_spec
    from levelray.learner.service import learner_actor_class, learner_threads

    cfg = replace_paths(RunConfig(), {
        "env.id": "CartPole-v1", "env.num_levels": 0,
        "actors.envs_per_actor": 3, "actors.unroll_length": 7, "actors.unrolls_per_submit": 2,
        "learner.batch_size": 5,
    })
    learner = learner_actor_class(0).options(num_cpus=0).remote(cfg, env_spec(cfg.env))
    actor = ray.remote(num_cpus=0)(EnvActor).remote(0, cfg, learner, seed=1)
    try:
        assert ray.get(actor.run.remote(max_unrolls=5), timeout=90) == 5
        stats = wait_for(lambda: (s := ray.get(learner.stats.remote()))["learner_version"] >= 1 and s, 60)
        assert stats["unrolls_received"] == 5 and stats["env_steps"] == 5 * 7 * 3
        assert stats["dropped"] == {} and stats["error"] is None
        assert ray.get(actor.info.remote())["unrolls_sent"] == 5
        # Ray starts the actor with OMP_NUM_THREADS=1 (its reserved CPUs); the learner takes the machine's cores
        assert stats["threads"] == learner_threads() == min(len(os.sched_getaffinity(0)), 4)
    finally:
        ray.get(learner.stop.remote())
        ray.kill(actor)
        ray.kill(learner)


@pytest.mark.timeout(240)
def test_scale_up_and_down_mid_run_and_status(ray_session, tmp_path, capsys):
    import ray

    from levelray.deploy.cluster import control

    cfg = cartpole_config(tmp_path, total_steps=10**9, actors__num_actors=1)
    job = RayJob(cfg, RunDir(cfg.run_dir))
    try:
        wait_for(lambda: job.poll()["learner"]["env_steps"] > 0, 60)
        supervisor = ray.get_actor("levelray-supervisor", namespace="levelray")
        ray.get(supervisor.scale.remote(3))
        status = wait_for(lambda: (s := ray.get(supervisor.status.remote()))["actors_alive"] == 3 and s, 60)
        assert status["actors_desired"] == 3 and len({a["pid"] for a in status["actors"]}) == 3
        steps_before = job.poll()["learner"]["env_steps"]
        ray.get(supervisor.scale.remote(1))
        status = wait_for(lambda: (s := ray.get(supervisor.status.remote()))["actors_alive"] == 1 and s, 60)
        assert status["actors_desired"] == 1 and status["actors"][0]["id"] == 0
        wait_for(lambda: job.poll()["learner"]["env_steps"] > steps_before + 2000, 60)  # training goes on

        # the driver's rate reaches `levelray status` through the supervisor
        job.publish({"env_steps_per_second": 1234.5, "time": time.time(), "levels_buffered": 17,
                     "levels_replay_fraction": 0.25, "levels_trained_fraction": 0.5, "levels_evicted": 3,
                     "levels_mean_walls": 25.5,
                     "levels_mean_path_length": 8.5, "levels_unsolvable_fraction": 0.125})
        wait_for(lambda: ray.get(supervisor.status.remote())["progress"].get("env_steps_per_second") == 1234.5, 30)
        # the CLI commands against the same job (in-process: the session's Ray is already connected)
        assert control.cmd_status(type("A", (), {"address": "auto", "json": True})()) == 0
        out = json_output(capsys.readouterr().out)
        assert out["env_steps_per_second"] == 1234.5
        assert (out["levels_buffered"], out["levels_replay_fraction"], out["levels_evicted"]) == (17, 0.25, 3)
        assert out["levels_trained_fraction"] == 0.5
        assert (out["levels_mean_walls"], out["levels_mean_path_length"], out["levels_unsolvable_fraction"]) == (
            25.5, 8.5, 0.125)
        assert control.cmd_status(type("A", (), {"address": "auto", "json": False})()) == 0
        text = capsys.readouterr().out
        assert "levels buffered 17  evicted 3  replayed 25% of recent episodes" in text
        assert "trained on 50% of recent env steps" in text
        assert "levels mean walls 25.5  mean path length 8.5  unsolvable fraction 0.125" in text
        for key in ("actors_alive", "actors_desired", "learner_version", "env_steps", "env_steps_per_second",
                    "actors"):
            assert key in out, key
        assert out["actors_alive"] == 1 and out["env_steps"] > 0 and out["learner_version"] > 0
        assert set(out["actors"][0]) >= {"id", "pid", "node", "alive"}
        assert control.cmd_scale(type("A", (), {"address": "auto", "num_actors": 2})()) == 0
        wait_for(lambda: ray.get(supervisor.status.remote())["actors_alive"] == 2, 60)
    finally:
        job.stop()
        job.kill()


def test_bad_scale_request_is_refused(ray_session, tmp_path):
    import ray

    cfg = cartpole_config(tmp_path, actors__num_actors=0)
    job = RayJob(cfg, RunDir(cfg.run_dir))
    try:
        supervisor = ray.get_actor("levelray-supervisor", namespace="levelray")
        with pytest.raises(ray.exceptions.RayTaskError, match="num_actors must be a non-negative int"):
            ray.get(supervisor.scale.remote(-1))
        assert ray.get(supervisor.status.remote())["actors_desired"] == 0
    finally:
        job.stop()
        job.kill()


@pytest.mark.timeout(240)
def test_ctrl_c_leaves_a_checkpoint(tmp_path):
    """A real `levelray train` process with its own embedded Ray, interrupted like a user would."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "levelray.deploy.cli", "train", "--env", "CartPole-v1", "--num-levels", "0",
           "--num-actors", "1", "--envs-per-actor", "4", "--batch-size", "1", "--total-steps", "100000000",
           "--metrics-port", "0", "--report-interval", "0.5", "--run-dir", str(run)]
    # Without --address the job starts a Ray of its own, whatever cluster RAY_ADDRESS (here: nothing listens
    # there) or a `ray start` on this machine points at (before, ray.init joined it and refused num_cpus).
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", "RAY_ADDRESS": "127.0.0.1:9"})
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("steps") and "version" in line and not line.split("version")[1].strip().startswith("0"):
                break
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
        lines.append(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = "".join(lines)
    assert proc.returncode == 0, output
    assert "final checkpoint" in output
    ckpts = RunDir(run).list_checkpoints()
    assert ckpts, output
    ckpt = RunDir(run).load_latest_checkpoint()
    assert ckpt["version"] > 0 and ckpt["counters"]["env_steps"] > 0


@pytest.mark.timeout(240)
def test_inline_backend_runs_the_same_config(ray_session, tmp_path):
    from levelray.deploy.cli import main

    config = tmp_path / "run.yaml"
    config.write_text(
        "env: {id: procgen:bigfish, num_levels: 10}\n"
        "actors: {num_actors: 1, envs_per_actor: 2, unroll_length: 8}\n"
        "learner: {batch_size: 1}\n"
        "total_steps: 48\nmetrics_port: 0\nreport_interval_s: 0.2\n"
    )
    records, checkpoints = {}, {}
    for backend in ("inline", "ray"):
        run = tmp_path / backend
        assert main(["train", "--config", str(config), "--backend", backend, "--run-dir", str(run), "--quiet"]) == 0
        lines = (run / "metrics.jsonl").read_text().splitlines()
        records[backend] = json.loads(lines[-1])
        checkpoints[backend] = RunDir(run).load_latest_checkpoint()
    # One driver loop builds both records: the same keys, whichever transport ran.
    assert set(records["inline"]) == set(records["ray"])
    for backend, rec in records.items():
        ckpt = checkpoints[backend]
        assert rec["env_steps"] >= 48 and rec["learner_version"] >= 1, backend
        assert rec["env_steps"] % (8 * 2) == 0, backend  # whole unrolls of T = 8 steps x 2 envs
        assert 0 <= rec["level_seen_fraction"] <= 1 and ckpt["levels"] is not None, backend
        # the final checkpoint is taken after the last record, with nothing running in between
        counters = {k: ckpt["counters"][k] for k in ("env_steps", "episodes", "learner_version", "samples_trained")}
        assert counters == {k: rec[k] for k in counters}, backend
        assert ckpt["version"] == rec["learner_version"], backend
        assert rec["samples_trained"] == rec["learner_version"] * 8 * 2, backend  # batch of 1 unroll


@pytest.mark.timeout(180)
def test_replay_on_ray_inserts_samples_and_updates(ray_session, tmp_path):
    cfg = cartpole_config(tmp_path, total_steps=25_000, learner__batch_size=4, replay__replay_ratio=0.5,
                          replay__min_size=4)
    record = train(cfg, RunDir(cfg.run_dir), quiet=True)
    assert record["learner_version"] > 10
    replay = record["replay"]
    assert replay["inserts"] >= record["learner_version"]  # two fresh unrolls per update go in
    assert replay["samples"] > 0 and replay["size"] > 0
    assert (Path(cfg.run_dir) / "services" / "replay.msgpack").exists()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_total_steps_is_a_budget_the_learner_keeps(ray_session, tmp_path, backend):
    """`--total-steps N`: the learner consumes at least N and at most one batch more, on both backends
    (before, the Ray driver noticed the budget at its next report: seconds of actor throughput later)."""
    cfg = cartpole_config(tmp_path, total_steps=10_000, learner__batch_size=4, actors__unrolls_per_submit=4,
                          report_interval_s=5.0, backend=backend)
    batch_steps = 4 * cfg.actors.envs_per_actor * cfg.actors.unroll_length  # 4 unrolls of 8 envs x 20 steps
    record = train(cfg, RunDir(cfg.run_dir), quiet=True)
    assert 10_000 <= record["env_steps"] < 10_000 + batch_steps, record["env_steps"]
    if not record["dropped"].get("policy_lag"):  # every consumed step was trained on, no more
        assert record["samples_trained"] == record["env_steps"]
    assert RunDir(cfg.run_dir).load_latest_checkpoint()["counters"]["env_steps"] == record["env_steps"]
    # TensorBoard event files are written by the shared driver loop, so both backends have them
    events = read_tensorboard(cfg.run_dir)
    assert events["learner_version"][-1] == (record["env_steps"], record["learner_version"])


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_total_trained_steps_is_a_budget_the_learner_keeps(ray_session, tmp_path, backend):
    """`--total-trained-steps N` with an env-step budget far away: the learner trains on at least N steps and at
    most one batch more, on both backends, and the final checkpoint holds the same count."""
    cfg = cartpole_config(tmp_path, total_steps=10**9, total_trained_steps=6_000, learner__batch_size=4,
                          actors__unrolls_per_submit=4, report_interval_s=5.0, backend=backend)
    batch_steps = 4 * cfg.actors.envs_per_actor * cfg.actors.unroll_length
    record = train(cfg, RunDir(cfg.run_dir), quiet=True)
    assert 6_000 <= record["samples_trained"] < 6_000 + batch_steps, record["samples_trained"]
    assert record["env_steps"] < 10**9
    assert RunDir(cfg.run_dir).load_latest_checkpoint()["counters"]["samples_trained"] == record["samples_trained"]


def read_tensorboard(run_dir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series of the run directory's event files: name -> [(env steps, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
