"""Budgets that hold at array speed: `--total-steps` and `--total-trained-steps` end a run within one unroll per actor
of the budget on both backends, whatever the env's speed. The learner, which counts both, refuses what arrives once
either is spent and says so in its receipts, and the actors stop (`learner.service`, "The budget").

The maze steps at ~20k env steps/s. Before, a Robust PLR run in its level buffer's warm-up (which trains nothing) was
stopped only by the driver's poll: `--total-steps 20000` ended at 65,760 and 74,560 env steps on Ray, and after a
trained-steps budget the actors in explore windows stepped 4,672 and 13,792 env steps more in 1.5 s."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from levelray.contracts.counters import budget_reached
from levelray.deploy.cli import build_config, build_parser, main
from levelray.deploy.rundir import RunDir
from tests.support import wait_for

NUM_ACTORS, ENVS_PER_ACTOR = 2, 4


def warmup_args(backend: str, run_dir, total_steps: int) -> list[str]:
    """The maze under Robust PLR with the default 4,000-level buffer: replay starts once 800 levels are buffered,
    ~200k env steps in, so a budget of thousands is spent before anything is trained."""
    return ["train", "--backend", backend, "--env", "maze:13x13", "--num-levels", "0", "--level-robust",
            "--level-window", "256", "--num-actors", str(NUM_ACTORS), "--envs-per-actor", str(ENVS_PER_ACTOR),
            "--total-steps", str(total_steps), "--report-interval", "1", "--metrics-port", "0", "--quiet",
            "--tensorboard", "false", "--run-dir", str(run_dir)]


def trained_args(backend: str, run_dir, total_trained_steps: int) -> list[str]:
    """A 16-level buffer that replays from its 4th level, in windows of 128 unrolls, one in five replayed (trained
    on): an actor spends seconds in explore windows, which send only tallies and never wait on the learner's queue;
    the env-step budget is far away."""
    return ["train", "--backend", backend, "--env", "maze:7x7", "--maze-blocks", "0-10", "--num-levels", "0",
            "--level-robust", "--level-buffer-size", "16", "--level-rho", "0.25", "--level-replay-prob", "0.2",
            "--level-window", "1024",
            "--num-actors", str(NUM_ACTORS), "--envs-per-actor", str(ENVS_PER_ACTOR), "--unroll-length", "8",
            "--batch-size", "2", "--max-episode-steps", "20", "--total-steps", str(10**9),
            "--total-trained-steps", str(total_trained_steps), "--report-interval", "1", "--metrics-port", "0",
            "--quiet", "--tensorboard", "false", "--run-dir", str(run_dir)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("batch_size", [2, 4])
def test_the_learner_receives_nothing_once_the_budget_is_spent(ray_session, batch_size):
    """Unrolls of 15 env steps against a budget of 20: the second spends it. The batch it ends (whole, or begun
    and short) is trained; later submits are refused, uncounted, with a receipt that says the budget is spent."""
    from levelray.contracts.config import RunConfig, replace_paths
    from levelray.learner.service import LearnerService
    from tests.test_fuzz import SPEC, valid_unroll

    cfg = replace_paths(RunConfig(), {"env.id": "CartPole-v1", "env.num_levels": 10, "actors.unroll_length": 5,
                                      "learner.batch_size": batch_size, "total_steps": 20})
    service = LearnerService(cfg, SPEC)

    def unroll() -> dict:
        u = valid_unroll()
        u["policy_version"] = 0
        return u

    try:
        assert not service.submit_batch([unroll()]).budget_spent
        service.submit_batch([unroll()])
        wait_for(lambda: service.stats()["learner_version"] == 1, 30, "the last batch trained")
        tally = {"env_steps": 7, "episode_returns": np.zeros(0), "episode_lengths": np.zeros(0, dtype=np.int64)}
        receipt = service.submit_batch([unroll()], tally)
        assert receipt.budget_spent and len(receipt.weights) == 1
        time.sleep(0.5)
        stats = service.stats()
        assert stats["env_steps"] == stats["learner_samples_received"] == stats["samples_trained"] == 30
        assert stats["unrolls_received"] == 2 and stats["learner_version"] == 1 and service.queue.qsize() == 0
    finally:
        service.stop()


def last_record(run_dir) -> dict:
    return json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_an_env_step_budget_in_a_warmup_that_trains_nothing(backend, tmp_path, one_thread, request):
    """Nothing is trained, so only the budget can stop the actors: the run ends within one unroll per actor of
    `--total-steps`, the final checkpoint holds the same count, and a resume with a larger budget goes on to it."""
    if backend == "ray":
        request.getfixturevalue("ray_session")
    run = tmp_path / "run"
    slack = NUM_ACTORS * ENVS_PER_ACTOR * 20  # one unroll (T = 20) per actor
    assert main(warmup_args(backend, run, 5_000)) == 0
    record = last_record(run)
    assert 5_000 <= record["env_steps"] <= 5_000 + slack, record["env_steps"]
    assert record["samples_trained"] == 0  # the warm-up: only the budget stopped it
    assert RunDir(run).load_latest_checkpoint()["counters"]["env_steps"] == record["env_steps"]
    assert main(["train", "--resume", str(run), "--total-steps", "10000", "--quiet"]) == 0
    record = last_record(run)
    assert 10_000 <= record["env_steps"] <= 10_000 + slack, record["env_steps"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_a_trained_steps_budget_stops_the_actors(backend, tmp_path, one_thread, request):
    """Once `--total-trained-steps` is trained on, the learner trains less than a batch more and the actors stop
    within one unroll each (explore windows, which train nothing, would otherwise step on until the driver's poll)."""
    budget, unroll = 512, ENVS_PER_ACTOR * 8
    parser, dests = build_parser()
    args = trained_args(backend, tmp_path / "run", budget)
    cfg = build_config(parser.parse_args(args), dests)
    if backend == "ray":
        request.getfixturevalue("ray_session")
        from levelray.deploy.training.ray_backend import RayJob

        backend_ = RayJob(cfg, RunDir(tmp_path / "run"))
    else:
        from levelray.deploy.training.inline import InlineBackend

        backend_ = InlineBackend(cfg)

    def learner() -> dict:
        return backend_.poll()["learner"]

    def spent() -> bool:
        backend_.advance(time.time() + 0.2, 10**9, threading.Event())
        stats = learner()
        return budget_reached(cfg, stats["env_steps"], stats["samples_trained"])

    try:
        wait_for(spent, 120, "the trained-steps budget spent", interval=0)
        before = learner()
        for _ in range(3):  # Ray: ~1.5 s of the actors' time; inline: three more calls to go on
            backend_.advance(time.time() + 0.5, 10**9, threading.Event())
        after = learner()
        assert budget <= after["samples_trained"] < budget + 2 * unroll, after["samples_trained"]
        assert after["env_steps"] - before["env_steps"] <= NUM_ACTORS * unroll, (before["env_steps"],
                                                                                 after["env_steps"])
        assert after["learner_samples_received"] == after["samples_trained"]  # what was received was trained
        if backend == "ray":
            actors = backend_.poll()["supervisor"]["actors"]
            assert len(actors) == NUM_ACTORS and all(a.get("budget_spent") for a in actors), actors
    finally:
        backend_.stop()
        if backend == "ray":
            backend_.kill()
        else:
            backend_.close()
