"""The supervisor on a real Ray: scaling past the cores on the embedded Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest


@pytest.mark.timeout(180)
def test_embedded_ray_scales_past_the_cores(tmp_path):
    """A real embedded Ray (its own process, as `levelray train` without --address starts it): the
    actors reserve no CPU, so scaling to more actors than the Ray has logical CPUs left works."""
    script = textwrap.dedent(f"""
        import json, threading, time
        import ray
        from levelray.contracts.config import RunConfig
        from levelray.deploy import control
        from levelray.deploy.driver import prepare_run_dir, train

        cfg = RunConfig()
        cfg.env.id, cfg.env.num_levels = "CartPole-v1", 0
        cfg.actors.num_actors, cfg.actors.envs_per_actor = 1, 2
        cfg.total_steps, cfg.metrics_port, cfg.report_interval_s = 10**9, 0, 0.5
        cfg.run_dir = {str(tmp_path / "run")!r}
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
