"""Surviving what clusters do: killed actors, services and learners, and damaged checkpoints."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from levelray.contracts.config import ReplayConfig, RunConfig, replace_paths
from levelray.deploy.rundir import RunDir
from levelray.deploy.training.driver import write_checkpoint
from levelray.deploy.training.ray_backend import RayJob
from tests import support
from tests.support import wait_for

REPO = Path(__file__).resolve().parents[1]


def job_config(tmp_path, **kw) -> RunConfig:
    sizes = dict(env__num_levels=50, actors__num_actors=2, actors__envs_per_actor=4, learner__batch_size=2,
                 levels__snapshot_interval_s=0.5, replay__snapshot_interval_s=0.5)
    return support.cartpole_config(tmp_path, **{**sizes, **kw})



@pytest.mark.timeout(300)
def test_killed_actor_and_services_come_back_and_training_goes_on(ray_session, tmp_path):
    ray = ray_session
    cfg = job_config(tmp_path, replay__replay_ratio=0.5, replay__min_size=2, learner__batch_size=2)
    job = RayJob(cfg, RunDir(cfg.run_dir))
    try:
        wait_for(lambda: job.poll()["learner"]["learner_version"] >= 5, 90)

        # 1. an env actor's process is killed: the supervisor replaces it within seconds
        status = ray.get(job.supervisor.status.remote())
        victim = status["actors"][0]
        os.kill(victim["pid"], signal.SIGKILL)
        t0 = time.time()
        status = wait_for(lambda: (s := ray.get(job.supervisor.status.remote()))["actor_restarts"] >= 1
                          and s["actors_alive"] == 2 and s, 30)
        assert time.time() - t0 < 30
        assert victim["pid"] not in {a["pid"] for a in status["actors"]}
        assert job.poll()["supervisor"]["actor_restarts"] >= 1

        # 2. the level service dies: Ray restarts it and it comes back from its last snapshot
        before = ray.get(job.level_service.stats.remote())
        ray.get(job.level_service.snapshot.remote())
        ray.kill(job.level_service, no_restart=False)
        # (ray.kill is asynchronous: wait for an answer from the restarted process)
        after = wait_for(lambda: (s := _try(lambda: ray.get(job.level_service.stats.remote(), timeout=5)))
                         and s["restored_from_snapshot"] and s, 60)
        assert after["num_samples"] >= before["num_samples"] and after["num_seen"] >= before["num_seen"] > 0

        # 3. the replay service dies: it comes back from its snapshot with its buffer
        ray.get(job.replay_service.snapshot.remote())
        size_before = ray.get(job.replay_service.stats.remote())["size"]
        assert size_before > 0
        ray.kill(job.replay_service, no_restart=False)
        replay = wait_for(lambda: (s := _try(lambda: ray.get(job.replay_service.stats.remote(), timeout=5)))
                          and s["restored_from"] is not None and s, 60)
        assert replay["restored_from"].endswith("replay.msgpack") and replay["size"] > 0

        # 4. the supervisor dies, and its env actors with it (Ray kills the actors an actor owns): before, the
        # job stalled silently; now the next report starts a new supervisor with the same number of actors
        before = job.poll()["supervisor"]
        kill_and_wait(ray, job.supervisor)
        snap = job.poll()
        assert snap["supervisor_restarts"] == 1
        assert snap["supervisor"]["actor_restarts"] >= before["actor_restarts"]  # monotone across supervisors
        wait_for(lambda: job.poll()["supervisor"]["actors_alive"] == 2, 60)

        # training goes on through all of it
        v = job.poll()["learner"]["learner_version"]
        wait_for(lambda: job.poll()["learner"]["learner_version"] > v + 5, 90)
        assert job.poll()["learner"]["error"] is None
    finally:
        job.stop()
        job.kill()


def kill_and_wait(ray, handle, timeout: float = 60) -> None:
    """ray.kill, then wait until the actor really is dead: ray.kill is asynchronous, and a call made right
    after it can still be answered by the old process (the test then saw no restart)."""
    ray.kill(handle)
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            ray.get(handle.__ray_call__.remote(lambda self: None), timeout=5)
        except ray.exceptions.RayActorError:
            return
        except ray.exceptions.GetTimeoutError:
            pass
        time.sleep(0.1)
    raise AssertionError("the killed actor still answers")


def _try(fn):
    try:
        return fn()
    except Exception:
        return None


@pytest.mark.timeout(300)
def test_dead_learner_restarts_from_the_latest_checkpoint(ray_session, tmp_path):
    ray = ray_session
    cfg = job_config(tmp_path, max_learner_restarts=2)
    job = RayJob(cfg, RunDir(cfg.run_dir))
    try:
        wait_for(lambda: job.poll()["learner"]["learner_version"] >= 5, 90)
        saved = write_checkpoint(job, job.run_dir, cfg)
        # the job reports past the checkpoint before the learner dies: what it reported must not step back
        before = wait_for(lambda: (ls := job.poll()["learner"])["learner_version"] > saved + 3 and ls, 90)
        kill_and_wait(ray, job.learner)
        snap = job.poll()  # notices the dead learner and restarts it from the checkpoint
        assert snap["learner_restarts"] == 1
        for key in ("env_steps", "episodes", "learner_version", "samples_trained", "unrolls_received"):
            assert snap["learner"][key] >= before[key], (key, snap["learner"][key], before[key])
        assert snap["learner"]["learner_version"] > saved
        wait_for(lambda: job.poll()["learner"]["learner_version"] > saved + 5, 90)  # actors rebound, training on
        status = ray.get(job.supervisor.status.remote())
        assert status["actors_alive"] == 2 and status["actor_restarts"] == 0
        # the learner dies while a checkpoint is being written (found by benchmarks/chaos.py: it ended the
        # job): the checkpoint restarts it and is written
        kill_and_wait(ray, job.learner)
        version = write_checkpoint(job, job.run_dir, cfg)
        assert job.learner_restarts == 2 and version >= saved
        assert RunDir(cfg.run_dir).load_latest_checkpoint()["version"] == version
        # past max_learner_restarts the job stops with a message that says how to resume
        kill_and_wait(ray, job.learner)
        with pytest.raises(RuntimeError, match=f"levelray train --resume {cfg.run_dir}"):
            job.poll()
    finally:
        job.stop()
        job.kill()


def _checkpoints(tmp_path, n=3):
    run = RunDir(tmp_path / "run")
    for version in range(1, n + 1):
        run.save_checkpoint(version, {"version": version, "w": torch.full((3,), float(version))},
                            {"env_steps": 100 * version}, level_state={"x": np.arange(version)}, keep=5)
    return run


@pytest.mark.parametrize("damage", ["truncate_learner", "corrupt_levels", "drop_meta", "garbage_meta"])
def test_damaged_latest_checkpoint_falls_back_to_the_previous(tmp_path, damage):
    run = _checkpoints(tmp_path)
    latest = run.list_checkpoints()[-1]
    if damage == "truncate_learner":
        data = (latest / "learner.pt").read_bytes()
        (latest / "learner.pt").write_bytes(data[: len(data) // 2])
    elif damage == "corrupt_levels":
        data = bytearray((latest / "levels.msgpack").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (latest / "levels.msgpack").write_bytes(bytes(data))
    elif damage == "drop_meta":
        (latest / "meta.json").unlink()
    else:
        (latest / "meta.json").write_text("{not json")
    ckpt = run.load_latest_checkpoint()
    assert ckpt["version"] == 2 and ckpt["counters"]["env_steps"] == 200
    assert torch.equal(ckpt["learner"]["w"], torch.full((3,), 2.0))


def test_all_checkpoints_damaged_is_a_clear_error(tmp_path):
    run = _checkpoints(tmp_path, n=2)
    for ckpt in run.list_checkpoints():
        (ckpt / "meta.json").unlink()
    with pytest.raises(ValueError, match="no usable checkpoint"):
        run.load_latest_checkpoint()


def test_checkpoints_keep_the_last_k_and_leave_no_temporaries(tmp_path):
    run = RunDir(tmp_path / "run")
    for version in range(1, 6):
        run.save_checkpoint(version, {"version": version}, {"env_steps": version}, keep=2)
    assert [p.name for p in run.list_checkpoints()] == ["ckpt-0000000004", "ckpt-0000000005"]
    assert [p.name for p in run.checkpoints.iterdir() if p.name.startswith(".")] == []


@pytest.mark.timeout(600)
def test_a_cluster_that_loses_and_gains_nodes_keeps_training(tmp_path):
    """A Ray cluster of several nodes on this machine (ray.cluster_utils.Cluster, in a child process so the test
    session's own Ray is untouched; see tests/multinode_script.py): actors spread over the nodes, an actors' node
    removed (they come back), a node added (scale up uses it), the learner's node removed (it restarts from the
    checkpoint on the surviving node, counters never step back), and in a second job the node of services placed
    by `service_resources` removed (they come back from their snapshots)."""
    script = REPO / "tests" / "multinode_script.py"
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "run")], cwd=REPO, capture_output=True,
                          text=True, timeout=560)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "CLUSTER OK" in proc.stdout


@pytest.mark.timeout(240)
def test_counters_never_step_back_across_a_kill_and_resume(tmp_path):
    """A real `levelray train` process killed with SIGKILL after reporting past its last checkpoint, then
    resumed: env steps, episodes and updates in metrics.jsonl never go backwards."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "levelray.deploy.cli", "train", "--backend", "inline", "--env", "CartPole-v1",
           "--num-levels", "0", "--num-actors", "1", "--envs-per-actor", "4", "--batch-size", "1",
           "--checkpoint-interval", "50", "--metrics-port", "0", "--report-interval", "0.2", "--quiet"]
    proc = subprocess.Popen([*cmd, "--total-steps", "100000000", "--run-dir", str(run)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def past_checkpoint():
            ckpt = RunDir(run).list_checkpoints()
            last = RunDir(run).last_metrics_record()
            return ckpt and last and last["learner_version"] > int(ckpt[-1].name.rsplit("-", 1)[-1]) + 10 and last

        killed_at = wait_for(past_checkpoint, 120)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed_at = RunDir(run).last_metrics_record()  # the record the killed process wrote last
    resumed = subprocess.run([*cmd, "--resume", str(run), "--total-steps", str(killed_at["env_steps"] + 5000)],
                             cwd=REPO, capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["env_steps"] >= killed_at["env_steps"] + 5000
    for key in ("env_steps", "episodes", "learner_version", "samples_trained"):
        values = [r[key] for r in records]
        assert all(a <= b for a, b in zip(values[:-1], values[1:], strict=True)), (key, values)


def test_monotone_counters_takes_the_higher_of_checkpoint_and_last_report():
    from levelray.learner.core import monotone_counters

    saved = {"env_steps": 1000, "episodes": 10, "learner_version": 7, "dropped": {"policy_lag": 2}}
    seen = {"env_steps": 1600, "episodes": 9, "learner_version": 12, "samples_trained": 400,
            "unrolls_received": None, "dropped": {"policy_lag": 1, "malformed": 3}}
    out = monotone_counters(saved, seen)
    assert out == {"env_steps": 1600, "episodes": 10, "learner_version": 12, "samples_trained": 400,
                   "dropped": {"policy_lag": 2, "malformed": 3}}
    assert saved["env_steps"] == 1000  # inputs untouched
    assert monotone_counters(None, None) == {"dropped": {}}


@pytest.mark.timeout(120)
def test_a_hung_level_service_never_stalls_an_actor(ray_session):
    """The level service's process is stopped (SIGSTOP: a real hang, not a mock). The actor's episode ends
    play uniform levels instead of waiting on it (before: up to 30 s per episode end), and say so."""
    ray = ray_session
    from levelray.actors.env_actor import EnvActor
    from levelray.level_service.service import LevelService

    cfg = job_config(Path("/nonexistent"), actors__envs_per_actor=4, actors__seed_prefetch=2)
    service = LevelService.options(num_cpus=0).remote(np.arange(50), cfg.levels, discount=cfg.learner.discount,
                                                      rng=cfg.seed)
    actor = ray.remote(num_cpus=1, max_concurrency=4)(EnvActor).remote(0, cfg, None, service, seed=3)
    pid = ray.get(service.__ray_call__.remote(lambda self: os.getpid()))
    try:
        first = ray.get(actor.collect.remote(1), timeout=60)[0]
        assert set(first["level_seeds"][0].tolist()) <= set(range(50))  # the service's seeds at the start
        os.kill(pid, signal.SIGSTOP)
        # 20 x 20 steps x 4 envs: ~80 episode ends, under a second, where one blocking wait would take 30 s. The
        # actor holds about a second of prefetched levels: collect until they have run out.
        ended, info = 0, {}
        for _ in range(30):
            start = time.time()
            unrolls = ray.get(actor.collect.remote(20), timeout=60)
            assert time.time() - start < 15, "an actor waited on the stopped level service"
            ended += sum(int((u["terminated"] | u["truncated"]).sum()) for u in unrolls)
            info = ray.get(actor.info.remote(), timeout=30)
            if info["seed_uniform_fallbacks"] > 0:
                break
        assert ended > 8 and info["seed_uniform_fallbacks"] > 0, (ended, info)
    finally:
        os.kill(pid, signal.SIGCONT)
        ray.kill(actor)
        ray.kill(service)


def test_a_failing_periodic_snapshot_keeps_the_services_serving(tmp_path):
    """The snapshot directory is unusable (a file where the directory should be: every write fails with a
    real OSError, as on a full or vanished volume). Before: the call that triggered the periodic snapshot
    raised, so actors got no seeds and PLR silently turned into uniform sampling. After: the call answers,
    the failure is counted and named in stats(), and the next interval tries again."""
    from levelray.contracts.config import LevelConfig, ReplayConfig
    from levelray.level_service.service import LevelServiceCore
    from levelray.replay_service.service import ReplayServiceCore
    from tests.support import episode_results

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    levels = LevelServiceCore(range(20), LevelConfig(snapshot_interval_s=1e-6), rng=0,
                              snapshot_path=str(blocker / "levels.msgpack"))
    seeds = levels.sample_seeds(5)
    assert len(seeds) == 5 and set(seeds) <= set(range(20))
    levels.report_episodes(episode_results(seeds[:2], [1.0, 1.0]))
    stats = levels.stats()
    assert stats["snapshot_errors"] >= 2 and "not-a-dir" in stats["last_snapshot_error"]
    assert stats["num_seen"] == 2  # the scores were taken
    with pytest.raises(OSError):  # an explicit snapshot (a checkpoint's) still fails loudly
        levels.snapshot()

    replay = ReplayServiceCore(ReplayConfig(capacity=16, max_use=None, min_size=1, snapshot_interval_s=1e-6), seed=0,
                               snapshot_path=str(blocker / "replay.msgpack"))
    ids = replay.insert([{"obs": np.zeros(3, dtype=np.float32)} for _ in range(4)], np.ones(4))
    replay.update_priorities(ids, np.full(4, 2.0))
    stats = replay.stats()
    assert stats["size"] == 4 and stats["snapshot_errors"] >= 2
    assert "not-a-dir" in stats["last_snapshot_error"]


@pytest.mark.timeout(120)
def test_refused_replay_writes_are_counted_not_lost_silently(ray_session):
    """The learner's replay inserts and priority updates are fire-and-forget; before, a refused one vanished
    without a trace. Now each reply is collected without blocking and failures are counted by kind."""
    from levelray.learner.service import RemoteReplay
    from levelray.replay_service.service import ReplayService

    handle = ReplayService.options(num_cpus=0).remote(ReplayConfig(capacity=16), seed=0)
    try:
        replay = RemoteReplay(handle)
        good = [{"obs": np.zeros(3, dtype=np.float32)} for _ in range(2)]
        replay.insert(good, np.ones(2))
        replay.insert(good, np.array([1.0, -1.0]))  # a negative priority: refused by the service
        replay.update_priorities(np.array([0, 1]), np.array([np.nan, 1.0]))  # NaN: refused
        failures = wait_for(lambda: (f := replay.write_failures) and sum(f.values()) >= 2 and f, 60)
        assert failures == {"insert": 1, "update_priorities": 1}
        assert ray_session.get(handle.stats.remote())["size"] == 2  # the good insert landed, nothing else
    finally:
        ray_session.kill(handle)


@pytest.mark.timeout(420)
def test_short_chaos_run_keeps_counters_checkpoints_and_training(ray_session, tmp_path):
    """`benchmarks/chaos.py` in short: one SIGKILL each of an env actor, the learner, the level service and
    the replay service during a minute of CartPole; every check of the full run must hold."""
    from benchmarks.chaos import run_chaos

    out = run_chaos(tmp_path / "run", seconds=60, kills=4, warmup_s=8, snapshot_interval_s=2.0,
                    checkpoint_interval=20, resume_steps=2000, log=lambda *_: None)
    assert out["kills_by_kind"] == {"actor": 1, "learner": 1, "levels": 1, "replay": 1}, out["events"]
    assert out["learner_restarts"] >= 1 and out["actor_restarts"] >= 1, out
    assert all(out["checks"].values()), out


def test_a_relative_run_dir_is_made_absolute_on_the_driver(tmp_path, monkeypatch):
    """Service actors run in other working directories: a relative run directory handed to them would put
    their snapshots somewhere else. The driver resolves it before anything uses or records it."""
    from levelray.deploy.training.driver import prepare_run_dir

    monkeypatch.chdir(tmp_path)
    cfg = replace_paths(RunConfig(), {"env.id": "CartPole-v1", "env.num_levels": 0, "run_dir": "runs/relative",
                                      "metrics_port": 0})  # no endpoint: a run on this machine may hold 9464
    run_dir = prepare_run_dir(cfg)
    assert run_dir.path.is_absolute() and run_dir.path == tmp_path / "runs" / "relative"
    # the config is frozen: the absolute path is the claimed directory's, which `train` and config.yaml use
    assert str(run_dir.path) == str(tmp_path / "runs" / "relative")
    import yaml

    assert yaml.safe_load((run_dir.path / "config.yaml").read_text())["run_dir"] == str(run_dir.path)
