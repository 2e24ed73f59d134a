"""`--model-loss muzero` end to end through the CLI, on both backends, CartPole and MiniGrid: the replay service
runs with `--replay-ratio 0`, the model terms reach `metrics.jsonl`, they decrease over a short run, and the
checkpoint carries the model loss's state."""

from __future__ import annotations

import json

import numpy as np
import pytest

from levelray.deploy.cli import main
from levelray.deploy.rundir import RunDir

COMMON = ["--num-actors", "1", "--envs-per-actor", "4", "--batch-size", "2", "--model-loss", "muzero",
          "--model-batch-size", "16", "--metrics-port", "0", "--quiet", "--tensorboard", "false"]
ENVS = {
    "cartpole": ["--env", "CartPole-v1", "--num-levels", "0", "--total-steps", "9600"],
    "minigrid": ["--env", "minigrid:DoorKey-5x5", "--num-levels", "50", "--unroll-length", "10",
                 "--total-steps", "3200"],
}
TERMS = ("learner_model_value_loss", "learner_model_reward_loss", "learner_model_policy_loss",
         "learner_model_game_over_loss")
# what a regression of the model loss is traced to (the diagnostic metric names benchmarks.model_loss_fair reads)
DIAGNOSTICS = ("learner_torso_grad_norm_vtrace", "learner_torso_grad_norm_model", "learner_feature_rms",
               "learner_model_batch_age")


def _mean(records: list[dict], key: str) -> float:
    return float(np.mean([r[key] for r in records]))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("env", sorted(ENVS))
@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_model_losses_decrease_over_a_short_run(request, tmp_path, backend, env):
    if backend == "ray":
        request.getfixturevalue("ray_session")  # one Ray for the whole test session
    run = tmp_path / "run"
    interval = "0" if backend == "inline" else "0.2"
    assert main(["train", "--backend", backend, *ENVS[env], *COMMON, "--report-interval", interval,
                 "--run-dir", str(run)]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "learner_model_loss" in r]
    # Ray reports every 0.2 s while the learner runs on its own: CartPole's 60 updates take ~1.2 s and leave 5
    # or 6 reports (measured over 8 runs: 5 twice), so 4 are asked for.
    assert len(trained) >= 4, len(trained)
    assert set(TERMS) <= set(trained[-1])
    last = trained[-1]
    assert all(np.isfinite(last[key]) for key in DIAGNOSTICS), last
    assert last["learner_torso_grad_norm_model"] > 0 and last["learner_feature_rms"] > 0, last  # it trains the torso
    assert last["learner_model_batch_age"] >= 0, last
    for key in ("learner_model_loss", "learner_model_value_loss", "learner_model_reward_loss"):
        series = [r[key] for r in trained]
        if backend == "inline":  # deterministic: the last third of the run below the first
            third = len(trained) // 3
            assert _mean(trained[-third:], key) < _mean(trained[:third], key), (key, series)
        else:
            # On Ray which updates a report catches is timing: on CartPole the loss falls over the first ~20
            # updates and the value loss rises again later as the returns (the value targets) grow, replay now
            # holding only recent data. So: below the first report's somewhere in the run.
            assert min(series[1:]) < series[0], (key, series)
    assert records[-1]["replay"]["size"] > 0  # the replay service ran and kept unrolls with replay_ratio 0
    ckpt = RunDir(run).load_latest_checkpoint()
    state = ckpt["learner"]["model_loss"]
    assert state["updates"] == ckpt["version"] and set(state) >= {"module", "target_net", "target_module", "rng"}


@pytest.mark.timeout(120)
def test_resume_continues_the_model_loss_from_its_checkpoint(tmp_path):
    run = tmp_path / "run"
    args = ["--backend", "inline", *ENVS["cartpole"][:-2], *COMMON, "--report-interval", "0", "--run-dir", str(run)]
    assert main(["train", *args, "--total-steps", "3200"]) == 0
    first = RunDir(run).load_latest_checkpoint()
    assert first["learner"]["model_loss"]["updates"] == first["version"] == 20
    assert main(["train", "--resume", str(run), "--total-steps", "6400", "--quiet"]) == 0
    second = RunDir(run).load_latest_checkpoint()
    state = second["learner"]["model_loss"]
    assert second["version"] == 40 and state["updates"] == 40  # the target schedule counted on, not from 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all("learner_model_loss" in r for r in records if r["learner_version"] > 20)
