"""`ray job submit -- levelray train --address auto ...` against a real `ray start --head` cluster on this
machine, then `levelray status` / `levelray scale` from other processes, as README's Deploy section says.

The cluster is the test's own: its own temp dir, free ports, loopback only, and token authentication with
a token the test makes (RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH), passed to every Ray client here the way
a user passes theirs. It is stopped by terminating its `ray start --block` process (`ray stop` would stop
every Ray on the machine, the test session's own included).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support import free_port, wait_for

BIN = Path(sys.executable).parent
RAY = BIN / "ray"
LEVELRAY = BIN / "levelray"




def cluster_env(token_path: Path | None, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        HOME=str(home),  # no ~/.ray/auth_token of the user's is picked up
        RAY_USAGE_STATS_ENABLED="0",
        # A one-node cluster on 127.0.0.1 (Ray otherwise advertises the machine's outward address).
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
        PYTHONUNBUFFERED="1",
    )
    if token_path is not None:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_path))
    return env


def run(cmd, env, timeout=90, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"{cmd} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def kill_leftovers(marker: str) -> None:
    """SIGKILL the processes this test's cluster started (their command lines name its temp dir)."""
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit() or int(proc_dir.name) == os.getpid():
            continue
        try:
            cmdline = (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            with contextlib.suppress(OSError):
                os.kill(int(proc_dir.name), signal.SIGKILL)


@pytest.mark.timeout(300)
def test_ray_job_submit_then_status_and_scale_from_other_processes():
    # Unix socket paths under Ray's temp dir must stay short (< 108 bytes): not under pytest's tmp_path.
    root = Path(tempfile.mkdtemp(prefix="lrjob", dir="/tmp"))
    token = root / "token"
    token.write_text(secrets.token_hex(32))
    env = cluster_env(token, root)
    gcs_port, dash_port, metrics_port = free_port(), free_port(), free_port()
    gcs, dashboard = f"127.0.0.1:{gcs_port}", f"http://127.0.0.1:{dash_port}"
    head_log = (root / "head.log").open("w")
    head = subprocess.Popen(
        [str(RAY), "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(gcs_port),
         "--dashboard-port", str(dash_port), "--include-dashboard", "true", "--dashboard-host", "127.0.0.1",
         "--dashboard-agent-listen-port", str(free_port()), "--ray-client-server-port", str(free_port()),
         "--num-cpus", "4", "--temp-dir", str(root / "ray"), "--disable-usage-stats"],
        env=env, stdout=head_log, stderr=subprocess.STDOUT, start_new_session=True)
    job_id = None
    t0 = time.monotonic()

    def mark(what: str) -> None:  # timings, shown with a failure's captured output
        print(f"[{time.monotonic() - t0:6.1f}s] {what}", flush=True)

    try:
        def head_up():
            assert head.poll() is None, (root / "head.log").read_text()
            return "block forever" in (root / "head.log").read_text()

        wait_for(head_up, 120, "ray start --head")
        assert (root / "ray" / "ray_current_cluster").read_text().strip() == gcs
        # The dashboard's job API comes up a little after the node: wait until it answers (with the token).
        wait_for(lambda: run([RAY, "job", "list", "--address", dashboard], env, check=False).returncode == 0, 60,
                 "the job submission API answers")
        mark("head up")

        submit = run([RAY, "job", "submit", "--address", dashboard, "--no-wait", "--",
                      "levelray", "train", "--address", "auto", "--env", "CartPole-v1", "--num-levels", "0",
                      "--num-actors", "1", "--envs-per-actor", "4", "--batch-size", "1",
                      "--metrics-port", str(metrics_port), "--report-interval", "1",
                      "--run-dir", str(root / "run"), "--total-steps", "1000000000", "--quiet"], env)
        job_id = re.search(r"raysubmit_\w+", submit.stdout + submit.stderr).group(0)
        mark(f"submitted {job_id}")

        def job_logs() -> str:
            return run([RAY, "job", "logs", "--address", dashboard, job_id], env, check=False).stdout

        def scrape() -> str:
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
            except OSError:
                return ""

        # The driver joined the cluster (`--address auto` found it through RAY_ADDRESS) and trains.
        try:
            wait_for(lambda: re.search(r"^levelray_env_steps_total [1-9]", scrape(), re.M), 150,
                     "the submitted job's metrics endpoint shows env steps")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\njob logs:\n{job_logs()[-4000:]}") from None
        mark("job trains")

        # A second driver: `levelray status` in another process, authenticating with the cluster's token.
        status = json.loads(run([LEVELRAY, "status", "--address", gcs, "--json"], env).stdout)
        assert status["actors_desired"] == 1 and status["actors_alive"] == 1, status
        assert status["env_steps"] > 0 and status["learner_version"] >= 0

        mark("status")
        out = run([LEVELRAY, "scale", "--num-actors", "2", "--address", gcs], env).stdout
        assert "actors desired 2" in out, out

        def two_alive():
            s = json.loads(run([LEVELRAY, "status", "--address", gcs, "--json"], env).stdout)
            return s["actors_alive"] == 2 and s["actors_desired"] == 2 and len(s["actors"]) == 2 and s

        two = wait_for(two_alive, 90, "actors_alive == 2 after `levelray scale --num-actors 2`", interval=1)
        assert len({a["pid"] for a in two["actors"]}) == 2
        mark("scaled to 2")

        # Without the token the cluster refuses a client.
        no_token = cluster_env(None, root / "nohome")
        (root / "nohome").mkdir()
        refused = run([LEVELRAY, "status", "--address", gcs, "--json"], no_token, timeout=60, check=False)
        assert refused.returncode != 0, refused.stdout
        assert "auth" in (refused.stdout + refused.stderr).lower(), refused.stderr[-2000:]
        mark("refused without the token")

        # `ray job stop` sends SIGTERM, and SIGKILL 3 s later (RAY_JOB_STOP_WAIT_TIME_S, left at Ray's
        # default here): the driver writes its final checkpoint first, so a new one is on disk afterwards.
        checkpoints = root / "run" / "checkpoints"
        before = set(checkpoints.iterdir()) if checkpoints.exists() else set()
        run([RAY, "job", "stop", "--address", dashboard, job_id], env, timeout=120)
        logs = job_logs()
        assert "final checkpoint" in logs, logs[-3000:]
        new = set(checkpoints.iterdir()) - before
        assert any(p.name.startswith("ckpt-") and (p / "meta.json").exists() for p in new), (new, logs[-3000:])
        job_id = None
        mark("job stopped")
    finally:
        if job_id is not None:
            run([RAY, "job", "stop", "--address", dashboard, job_id], env, timeout=60, check=False)
        if head.poll() is None:
            head.send_signal(signal.SIGTERM)  # `ray start --block` stops its cluster on SIGTERM
            try:
                head.wait(timeout=30)
            except subprocess.TimeoutExpired:
                head.kill()
        head_log.close()
        time.sleep(1)
        kill_leftovers(str(root))
        shutil.rmtree(root, ignore_errors=True)
        mark("cluster stopped")
