"""Torch's threads in a levelray process (`policy.threads`): the count from `--num-threads`, Ray's reservation,
`OMP_NUM_THREADS` or the CPUs the process may use; both of torch's pools sized at the process entry; OpenMP's
waiting threads set to sleep before torch loads; the count in the start-up line and every metrics record."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from levelray.contracts.config import ConfigError, from_dict
from levelray.policy import threads


def fresh_python(code: str, **env: str) -> str:
    """Run `code` in a new interpreter (torch not yet loaded); its stdout."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    proc = subprocess.run([sys.executable, "-c", code], env={**full_env, **env}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_count_is_the_flag_then_omp_num_threads_then_the_cpus_the_process_may_use(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.torch_threads(5) == (5, "num_threads")
    assert threads.torch_threads(0) == (3, "OMP_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    cpus = len(os.sched_getaffinity(0))
    count, why = threads.torch_threads(0)
    assert count == threads.auto_threads(cpus)
    assert why == f"auto, {cpus} CPUs usable"
    monkeypatch.setenv("OMP_NUM_THREADS", "not a number")  # ignored, as OpenMP ignores it
    assert threads.torch_threads(0)[0] == count


def test_auto_leaves_half_the_cpus_to_a_second_run():
    assert [threads.auto_threads(n) for n in (1, 2, 3, 4, 16, 64)] == [1, 1, 1, 2, 8, 32]


def test_the_cpus_are_the_affinity_mask_not_the_machine():
    """`taskset -c 0` leaves a process one CPU of the machine's: auto counts that one."""
    out = fresh_python("import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
                       "from levelray.policy.threads import affinity_cpus, torch_threads; "
                       "print(affinity_cpus(), torch_threads(0)[0])")
    assert out.split() == ["1", "1"]


def test_a_negative_count_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="num_threads: must be >= 0, got -1"):
        from_dict({"num_threads": -1})
    with pytest.raises(ValueError, match="num_threads must be 0"):
        threads.torch_threads(-2)


def test_both_pools_are_sized_at_the_process_entry_and_a_second_call_keeps_the_inter_op_pool():
    """The inter-op pool takes its size once, before its first work: `use_threads` at the entry sizes it; a later
    call (the Python API after the command line) changes the intra-op count and leaves the pool as it is."""
    out = fresh_python(
        "import torch\n"
        "from levelray.policy.threads import use_threads\n"
        "print(use_threads(2), torch.get_num_threads(), torch.get_num_interop_threads())\n"
        "fut = torch.jit.fork(torch.add, torch.ones(3), 1)  # work on the inter-op pool\n"
        "torch.jit.wait(fut)\n"
        "print(use_threads(1), torch.get_num_threads(), torch.get_num_interop_threads())\n")
    assert out.split("\n")[:2] == ["2 2 2", "1 1 2"]


def test_waiting_threads_sleep_unless_the_environment_says_otherwise(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    threads.quiet_waits()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert threads.wait_policy_env() == {"OMP_WAIT_POLICY": "PASSIVE"}
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    threads.quiet_waits()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    assert threads.wait_policy_env() == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_the_command_line_sets_the_wait_policy_before_torch_loads():
    """OpenMP reads OMP_WAIT_POLICY once, when torch loads it: the `levelray` entry imports no torch before
    `main` has set it."""
    out = fresh_python(
        "import os, sys\n"
        "from levelray.deploy import cli\n"
        "print('torch' in sys.modules)\n"
        "try:\n"
        "    cli.main(['train', '--num-threads', '-1'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(os.environ.get('OMP_WAIT_POLICY'))\n")
    assert out.split() == ["False", "PASSIVE"]


def test_inside_a_ray_task_the_count_is_its_reservation(ray_session):
    ray = ray_session

    @ray.remote
    def count() -> tuple[int, str, int]:
        from levelray.policy.threads import torch_threads, use_threads

        n, why = torch_threads(0)
        use_threads()
        import torch

        return n, why, torch.get_num_threads()

    assert ray.get(count.options(num_cpus=2).remote(), timeout=120) == (2, "Ray's reservation", 2)
    assert ray.get(count.options(num_cpus=0.5).remote(), timeout=120) == (1, "Ray's reservation", 1)
    assert threads.ray_reserved_cpus() is None  # the driver is no Ray worker


@pytest.mark.timeout(180)
@pytest.mark.parametrize("flags, expected", [([], None), (["--num-threads", "2"], 2)])
def test_a_run_says_its_thread_count_at_start_and_in_every_record(tmp_path, flags, expected):
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "levelray.deploy.cli", "train", "--env", "CartPole-v1", "--backend", "inline",
         "--num-actors", "1", "--envs-per-actor", "4", "--total-steps", "2000", "--report-interval", "0",
         "--metrics-port", "0", "--tensorboard", "false", "--quiet", "--run-dir", str(run), *flags],
        cwd=tmp_path, env={**env, "CUDA_VISIBLE_DEVICES": ""}, capture_output=True, text=True, timeout=170)
    assert proc.returncode == 0, proc.stderr
    if expected is None:
        cpus = len(os.sched_getaffinity(0))
        expected = threads.auto_threads(cpus)
        assert f"levelray: torch threads {expected} (auto, {cpus} CPUs usable)" in proc.stdout.splitlines()
    else:
        assert f"levelray: torch threads {expected} (num_threads)" in proc.stdout.splitlines()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records and {r["torch_threads"] for r in records} == {expected}


@pytest.mark.timeout(120)
def test_a_ray_learner_takes_num_threads_over_its_own_rule(ray_session):
    """The learner actor's own rule gives it its node's CPUs (up to 4); `num_threads` overrides that."""
    from levelray.actors.envs import env_spec
    from levelray.contracts.config import RunConfig, replace_paths
    from levelray.learner.service import learner_actor_class

    ray = ray_session
    cfg = replace_paths(RunConfig(), {"env.id": "CartPole-v1", "env.num_levels": 0, "num_threads": 3})
    learner = learner_actor_class(0).options(num_cpus=0).remote(cfg, env_spec(cfg.env))
    try:
        assert ray.get(learner.stats.remote(), timeout=90)["threads"] == 3
    finally:
        ray.get(learner.stop.remote())
        ray.kill(learner)
