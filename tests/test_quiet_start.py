"""A quiet, clear start and end: no gym notice or Ray token-authentication warning, a metrics port in use
refused in one line before the run directory is created, SIGTERM/SIGINT ending in levelray's own lines
(not Ray's C++ stack dumps), and the progress line in place on a terminal, one line per report otherwise."""

from __future__ import annotations

import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support import free_port

NOISE = ("Gym has been unmaintained", "Token authentication")
# What SIGTERM made the driver print once Ray's core worker was in it (absl's failure signal handler): a header
# "*** SIGTERM received at time=... on cpu N ***", "PC: @     0x7f...  (unknown)  kill", one "    @     0x..."
# line per frame, then all of it again through Ray's logging ("[... E ...] logging.cc:474: *** SIGTERM ...").
DUMP_MARKS = ("*** SIGTERM received", "*** SIGINT received", "PC: @", "@     0x", "logging.cc")


def levelray(*argv: str) -> list[str]:
    return [sys.executable, "-m", "levelray.deploy.cli", *argv]


def quiet_env(**extra: str) -> dict[str, str]:
    """This environment without a RAY_AUTH_MODE of its own (the default a new user has) and CPU only."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    return {**env, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1", **extra}


def noisy_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if any(mark in line for mark in NOISE)]


@pytest.mark.timeout(120)
def test_a_metrics_port_in_use_is_one_line_before_the_run_directory_and_a_retry_works(tmp_path):
    from levelray.deploy.monitoring.metrics import MetricsServer

    port = free_port()
    run = tmp_path / "run"
    cmd = levelray("train", "--env", "CartPole-v1", "--backend", "inline", "--total-steps", "400",
                   "--report-interval", "0", "--metrics-port", str(port), "--run-dir", str(run))
    first = MetricsServer("127.0.0.1", port)  # a run still going holds the port
    try:
        proc = subprocess.run(cmd, cwd=tmp_path, env=quiet_env(), capture_output=True, text=True, timeout=100)
    finally:
        first.close()
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("levelray: error:")]
    assert errors == [f"levelray: error: --metrics-port {port} is in use (127.0.0.1:{port}: another levelray "
                      f"run, or another program, listens there): pass --metrics-port 0 for none, or another port"]
    assert "Traceback" not in proc.stderr
    assert not run.exists()
    # The same command once the port is free: the run directory was never claimed, so it is not refused.
    retry = subprocess.run(cmd, cwd=tmp_path, env=quiet_env(), capture_output=True, text=True, timeout=100)
    assert retry.returncode == 0, retry.stderr
    assert f"levelray: metrics on http://127.0.0.1:{port}/metrics" in retry.stdout
    assert noisy_lines(retry.stdout + retry.stderr) == []
    assert (run / "metrics.jsonl").exists()


@pytest.mark.timeout(60)
def test_the_python_api_refuses_a_metrics_port_in_use_with_config_error(tmp_path):
    import levelray

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(levelray.ConfigError, match=rf"--metrics-port {port} is in use .*--metrics-port 0"):
            levelray.train({"env": {"id": "CartPole-v1"}, "backend": "inline", "total_steps": 100,
                            "metrics_port": port, "run_dir": str(tmp_path / "run")})
    assert not (tmp_path / "run").exists()


@pytest.mark.timeout(60)
def test_train_help_is_quiet(tmp_path):
    proc = subprocess.run(levelray("train", "--help"), cwd=tmp_path, env=quiet_env(), capture_output=True,
                          text=True, timeout=50)
    assert proc.returncode == 0 and "--metrics-port" in proc.stdout
    assert noisy_lines(proc.stdout + proc.stderr) == []


@pytest.fixture
def ray_tmp():
    """Ray's session directory for one embedded Ray, short enough for its Unix sockets (107 bytes at most),
    so the test can read what the Ray processes wrote to their own logs."""
    path = Path(tempfile.mkdtemp(prefix="lrq", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(120)
def test_a_procgen_run_on_the_embedded_ray_starts_quietly(tmp_path, ray_tmp):
    run = tmp_path / "run"
    proc = subprocess.run(
        levelray("train", "--env", "procgen:coinrun", "--num-levels", "10", "--num-actors", "1",
                 "--envs-per-actor", "2", "--unroll-length", "8", "--batch-size", "1", "--total-steps", "32",
                 "--metrics-port", "0", "--report-interval", "0.5", "--eval-interval", "0", "--run-dir", str(run)),
        cwd=tmp_path, env=quiet_env(RAY_TMPDIR=str(ray_tmp)), capture_output=True, text=True, timeout=110)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "levelray: done" in proc.stdout
    assert noisy_lines(output) == []
    # The env actor imported procgen in a Ray worker: what that worker printed is in its own log files.
    logs = list(ray_tmp.glob("ray/session_*/logs/worker-*"))
    assert logs
    assert [str(p) for p in logs if "Gym has been unmaintained" in p.read_text(errors="replace")] == []


@pytest.mark.timeout(180)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_process_group_ends_with_levelrays_own_lines(tmp_path, ray_tmp, signum):
    """As `timeout -s TERM` (which signals its whole process group) or Ctrl-C in a terminal (the foreground
    process group) deliver it: to the driver and every process it started."""
    run = tmp_path / "run"
    proc = subprocess.Popen(
        levelray("train", "--env", "CartPole-v1", "--num-levels", "0", "--num-actors", "1", "--envs-per-actor", "2",
                 "--batch-size", "1", "--total-steps", "100000000", "--metrics-port", "0", "--report-interval",
                 "0.5", "--run-dir", str(run)),
        cwd=tmp_path, env=quiet_env(RAY_TMPDIR=str(ray_tmp)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("steps "):
                break
        os.killpg(proc.pid, signum)
        rest, _ = proc.communicate(timeout=120)
        lines.append(rest)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    output = "".join(lines)
    assert proc.returncode == 0, output
    assert "levelray: stopping (final checkpoint); Ctrl-C again to abort" in output
    assert "levelray: final checkpoint at version" in output
    assert "levelray: done" in output
    assert [line for line in output.splitlines() if any(mark in line for mark in DUMP_MARKS)] == [], output
    assert noisy_lines(output) == []


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


RECORD = {"env_steps": 1000, "env_steps_per_second": 250.0, "episode_return_mean": 12.5, "policy_lag_mean": 0.5,
          "learner_version": 3, "actors_alive": 2, "actors_desired": 2}


def test_the_progress_line_is_rewritten_in_place_on_a_terminal_and_one_line_per_report_otherwise(monkeypatch):
    from levelray.deploy.training import progress

    monkeypatch.setenv("COLUMNS", "200")  # the terminal's width (shutil.get_terminal_size reads it first)

    log = io.StringIO()
    printer = progress.ProgressPrinter(log)
    printer(RECORD)
    printer({**RECORD, "env_steps": 2000})
    assert log.getvalue() == progress.progress_line(RECORD) + "\n" + progress.progress_line(
        {**RECORD, "env_steps": 2000}) + "\n"

    term = Terminal()
    printer = progress.ProgressPrinter(term)
    printer(RECORD)
    printer({**RECORD, "env_steps": 2000})
    progress.say("levelray: done {}", file=term)
    # each report over the last on one line (erasing what a longer one left), and what follows on a line of its own
    assert term.getvalue() == ("\r" + progress.progress_line(RECORD) + "\x1b[K"
                               + "\r" + progress.progress_line({**RECORD, "env_steps": 2000}) + "\x1b[K"
                               + "\nlevelray: done {}\n")
    progress.say("levelray: next", file=term)
    assert term.getvalue().endswith("levelray: done {}\nlevelray: next\n")  # no empty line when none is open

    monkeypatch.setenv("COLUMNS", "40")  # a narrow terminal: cut, never wrapped onto a second row
    narrow = Terminal()
    progress.ProgressPrinter(narrow)(RECORD)
    progress.end_line()
    assert narrow.getvalue() == "\r" + progress.progress_line(RECORD)[:39] + "\x1b[K\n"
