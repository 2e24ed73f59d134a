"""The supervisor on a real Ray: actors that cannot be placed, scaling past the cores on the embedded Ray,
and env actors that crash at start (growing respawn delays, then the job stops with the error)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from levelray.contracts.config import RunConfig
from levelray.deploy.cluster.supervisor import RESPAWN_DELAY_MAX_S, respawn_delay
from levelray.deploy.errors import error_summary
from levelray.deploy.rundir import RunDir
from levelray.deploy.training.ray_backend import RayJob
from tests import support
from tests.support import wait_for

REPO = Path(__file__).resolve().parents[1]
DRIVER_ONLY_ENV = "LevelrayDriverOnlyCartPole-v0"


def small_config(tmp_path, **overrides) -> RunConfig:
    sizes = dict(env__num_levels=0, actors__num_actors=1, actors__envs_per_actor=2, learner__batch_size=2,
                 report_interval_s=0.5)
    return support.cartpole_config(tmp_path, **{**sizes, **overrides})


def test_respawn_delay_doubles_from_half_a_second_to_a_cap():
    assert [respawn_delay(n) for n in range(0, 9)] == [0.5, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert respawn_delay(100) == RESPAWN_DELAY_MAX_S


def test_error_summary_is_the_exception_not_rays_wrapping():
    import ray

    init_failed = ray.exceptions.ActorDiedError.__new__(ray.exceptions.ActorDiedError)
    ray.exceptions.RayActorError.__init__(
        init_failed, "abc", "The actor died because of an error raised in its creation task, \x1b[36mray::EnvActor."
        "__init__()\x1b[39m (pid=1, ip=10.0.0.1)\n  File \"x.py\", line 7, in __init__\n    raise ValueError(...)\n"
        "ValueError: unknown environment id 'Foo-v0'", True, False)
    assert error_summary(init_failed) == "ValueError: unknown environment id 'Foo-v0'"
    killed = ray.exceptions.ActorDiedError.__new__(ray.exceptions.ActorDiedError)
    ray.exceptions.RayActorError.__init__(
        killed, "abc", "The actor died unexpectedly before finishing this task.\n\tclass_name: EnvActor\nThe actor is "
        "dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker "
        "unexpectedly exits with a connection error code 2. End of file.", False, False)
    assert error_summary(killed) == ("ActorDiedError: The actor died unexpectedly before finishing this task. "
                                     "(SYSTEM_ERROR: Worker unexpectedly exits with a connection error code 2)")
    assert len(error_summary(RuntimeError("x" * 5000))) <= 500


def test_status_is_one_snapshot_when_an_actor_dies_while_it_asks_the_others(ray_session, tmp_path):
    """`status()` waits on the live actors outside the lock; a death the monitor records meanwhile must not
    show up half: the error without the death that caused it, or the counters of one moment with the
    deaths of another. The monitor's `_ended` is run at exactly that point."""
    from levelray.deploy.cluster.supervisor import Supervisor

    sup = Supervisor(small_config(tmp_path, actors__max_restarts=0), learner=None, monitor_interval_s=3600)
    sup.actors[0] = {"handle": None, "run_ref": None, "ready_ref": None, "ready_at": None,
                     "spawned": time.time(), "failures": 0, "pid": None, "node": None}
    sup._refresh_ready = lambda entries: sup._ended(0, "ValueError: boom")  # the monitor, mid-status
    during = sup.status(timeout_s=0.1)
    assert during["error"] is None and during["recent_deaths"] == [] and during["actor_failures"] == 0
    assert during["last_actor_error"] is None
    after = sup.status(timeout_s=0.1)
    assert after["error"].startswith("env actor 0 failed 1 times in a row")
    assert [d["actor"] for d in after["recent_deaths"]] == [0] and after["actor_failures"] == 1
    sup._stopping = True


def test_train_command_ends_a_failed_job_with_its_error_and_status_1(tmp_path, monkeypatch, capsys):
    """`levelray train` prints the reason a job failed (no traceback) and exits with status 1."""
    from levelray.deploy import cli
    from levelray.deploy.errors import JobFailed
    from levelray.deploy.training import driver

    def failing_train(cfg, run_dir, **kw):
        raise JobFailed("env actors keep failing, the job stops: env actor 2 failed 3 times in a row "
                               "(the last at start; --max-actor-restarts 2): ValueError: unknown environment id")

    monkeypatch.setattr(driver, "train", failing_train)
    monkeypatch.setattr(cli.signal, "signal", lambda *args: None)  # leave pytest's Ctrl-C handler alone
    assert cli.main(["train", "--env", "CartPole-v1", "--run-dir", str(tmp_path / "run"), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "levelray: error: env actors keep failing" in err and "ValueError: unknown environment id" in err
    assert "Traceback" not in err


@pytest.mark.timeout(120)
def test_status_answers_quickly_and_names_what_pending_actors_wait_for(ray_session, tmp_path, capsys):
    """Actors asking for more CPUs than any node has (the test Ray has 8) are `pending` with the reason,
    and neither `status` nor `scale` waits for them; a started actor that stops answering (its process
    stopped with SIGSTOP) is `unresponsive` after the short wait instead of holding `status` up."""
    ray = ray_session
    from levelray.deploy.cluster import control

    cfg = small_config(tmp_path, actors__num_cpus=64.0, actors__num_actors=3)
    job = RayJob(cfg, RunDir(cfg.run_dir))
    try:
        t0 = time.time()
        status = ray.get(job.supervisor.status.remote(), timeout=30)
        took = time.time() - t0
        assert status["actors_desired"] == 3 and status["actors_alive"] == 0 and status["actors_pending"] == 3
        for actor in status["actors"]:
            assert actor["state"] == "pending" and not actor["alive"], actor
            assert actor["reason"].startswith("waiting for 64 CPU: no node has that many (the largest has 8)"), actor
        print(f"status with 3 unplaceable actors took {took:.2f} s")

        assert job.poll()["supervisor"]["actors_pending"] == 3  # the driver's poll is not held up either
        assert control.cmd_status(type("A", (), {"address": "auto", "json": False})()) == 0
        out = capsys.readouterr().out
        assert "0/3 alive, 3 pending" in out and "pending: waiting for 64 CPU" in out, out
        assert control.cmd_scale(type("A", (), {"address": "auto", "num_actors": 1})()) == 0
        assert ray.get(job.supervisor.status.remote(), timeout=30)["actors_pending"] == 1
    finally:
        job.stop()
        job.kill()

    # an actor that was started and then stops answering
    cfg = small_config(tmp_path, run_dir=str(tmp_path / "run2"))
    job = RayJob(cfg, RunDir(cfg.run_dir))
    pid = None
    try:
        status = wait_for(lambda: (s := ray.get(job.supervisor.status.remote()))["actors_alive"] == 1 and s, 60)
        pid = status["actors"][0]["pid"]
        os.kill(pid, signal.SIGSTOP)
        t0 = time.time()
        status = ray.get(job.supervisor.status.remote(), timeout=30)
        assert time.time() - t0 < 20
        (actor,) = status["actors"]
        assert actor["state"] == "unresponsive" and actor["pid"] == pid, actor
        assert "did not answer within 2 s" in actor["reason"]
        os.kill(pid, signal.SIGCONT)
        pid = None
        wait_for(lambda: ray.get(job.supervisor.status.remote())["actors_alive"] == 1, 30)
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        job.stop()
        job.kill()


@pytest.mark.timeout(180)
def test_embedded_ray_scales_past_the_cores(tmp_path):
    """A real embedded Ray (its own process, as `levelray train` without --address starts it): the
    actors reserve no CPU, so scaling to more actors than the Ray has logical CPUs left works."""
    script = textwrap.dedent(f"""
        import json, threading, time
        import ray
        from levelray.contracts.config import RunConfig, replace_paths
        from levelray.deploy.cluster import control
        from levelray.deploy.training.driver import prepare_run_dir, train

        cfg = replace_paths(RunConfig(), {{
            "env.id": "CartPole-v1", "env.num_levels": 0, "actors.num_actors": 1, "actors.envs_per_actor": 2,
            "total_steps": 10**9, "metrics_port": 0, "report_interval_s": 0.5, "run_dir": {str(tmp_path / "run")!r},
        }})
        stop = threading.Event()
        run = threading.Thread(target=train, args=(cfg, prepare_run_dir(cfg)), kwargs=dict(stop=stop, quiet=True))
        run.start()
        deadline = time.time() + 120
        supervisor = None
        while supervisor is None:  # (before the job's thread started its Ray, get_actor would start another)
            if ray.is_initialized():
                try:
                    supervisor = ray.get_actor("levelray-supervisor", namespace="levelray")
                except ValueError:
                    pass
            assert time.time() < deadline
            time.sleep(0.5)
        while not ((st := control.job_status(supervisor))["actors_alive"] == 1 and st["env_steps"]):
            assert time.time() < deadline, st  # the learner has its CPU and the job trains
            time.sleep(0.5)
        # Take every logical CPU the embedded Ray has left, as a busy machine would: with one CPU per actor,
        # the two added below would wait forever.
        free = ray.available_resources().get("CPU", 0)
        hog = ray.remote(num_cpus=free)(type("Hog", (), {{"ready": lambda self: True}})).remote()
        ray.get(hog.ready.remote(), timeout=60)
        target = 3
        control.cmd_scale(type("A", (), {{"address": None, "num_actors": target}})())
        while True:
            status = control.job_status(supervisor)
            if status["actors_alive"] == target or time.time() > deadline:
                break
            time.sleep(0.5)
        left = ray.available_resources().get("CPU", 0)
        print("RESULT", json.dumps({{"cpus_left": left, "target": target, "status": status}}, default=str), flush=True)
        stop.set()
        run.join(timeout=120)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=170,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(lines[0][len("RESULT "):])
    status = result["status"]
    assert status["actor_cpus"] == 0.0
    assert result["cpus_left"] == 0
    assert status["actors_alive"] == status["actors_desired"] == result["target"] == 3, status
    assert len(status["actors"]) == 3 and all(a["alive"] for a in status["actors"])


@pytest.mark.timeout(180)
def test_actors_crashing_at_start_back_off_then_stop_the_job_with_the_error(ray_session, tmp_path):
    """An env registered only in the driver's process (a common mistake with custom gymnasium envs): the
    driver builds it, every env actor fails in its constructor. Replacements wait 0.5 s, then 1 s; the third
    failure in a row is past --max-actor-restarts 2 and the run ends with the actor's exception."""
    import gymnasium as gym

    from levelray.deploy.errors import JobFailed
    from levelray.deploy.training.driver import run

    ray = ray_session
    if DRIVER_ONLY_ENV not in gym.envs.registry:
        gym.register(DRIVER_ONLY_ENV, entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv")
    cfg = small_config(tmp_path, env__id=DRIVER_ONLY_ENV, actors__max_restarts=2, total_steps=10**9)
    job = RayJob(cfg, RunDir(cfg.run_dir))
    statuses = []

    def failed():
        statuses.append(ray.get(job.supervisor.status.remote(), timeout=30))
        return statuses[-1]["error"] and statuses[-1]

    try:
        status = wait_for(failed, 120, "the supervisor gives up")
    except BaseException:
        job.stop()
        job.kill()
        raise
    deaths = status["recent_deaths"]
    assert [(d["actor"], d["failures"], d["delay_s"]) for d in deaths] == [(0, 1, 0.5), (1, 2, 1.0), (2, 3, None)]
    for death in deaths[:2]:  # each replacement started no sooner than its delay after the death
        assert death["respawned_at"] - death["time"] >= death["delay_s"], death
        assert death["when"] == "at start" and "unknown environment id" in death["error"]
    assert status["actor_restarts"] == 2 and status["actor_failures"] == 3
    assert "unknown environment id 'LevelrayDriverOnlyCartPole-v0'" in status["error"]
    assert status["error"].startswith("env actor 2 failed 3 times in a row (the last at start")
    assert status["last_actor_error"]["error"].startswith("ValueError: unknown environment id")
    assert status["respawns"] == [] and status["actors"] == []
    assert {r["delay_s"] for s in statuses for r in s["respawns"]} <= {0.5, 1.0}  # what status showed meanwhile

    with pytest.raises(JobFailed, match="env actors keep failing.*ValueError: unknown environment id") as failure:
        run(cfg, job.run_dir, job)  # the driver loop: its first poll sees the error; closes the job
    print(failure.value)
    records = [json.loads(x) for x in (Path(cfg.run_dir) / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["actor_last_error"].startswith("ValueError: unknown environment id")
