"""The single-process runner (`levelray train --backend inline`) end to end, through the CLI."""

import json

import numpy as np
import pytest

from levelray.deploy.cli import main
from levelray.deploy.rundir import RunDir

CARTPOLE = ["--backend", "inline", "--env", "CartPole-v1", "--num-actors", "2", "--envs-per-actor", "8",
            "--batch-size", "2", "--learning-rate", "2e-3", "--metrics-port", "0", "--report-interval", "1",
            "--quiet"]
REQUIRED_KEYS = {"time", "env_steps", "env_steps_per_second", "episode_return_mean", "learner_version",
                 "policy_lag_mean"}


@pytest.mark.timeout(240)
def test_inline_learns_cartpole(tmp_path):
    run = tmp_path / "run"
    # 400 (random play: ~22) within 300k env steps: seeds 0-5 cross it at 66-206k, where 475 was reached by 4 of the
    # 6 (the mean oscillates 200-470 on the way), so the stop, not the budget, ends the run on any machine's numerics
    assert main(["train", *CARTPOLE, "--num-levels", "0", "--total-steps", "300000", "--stop-at-return", "400",
                 "--run-dir", str(run)]) == 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records and REQUIRED_KEYS <= set(records[-1])
    final = records[-1]
    assert final["episode_return_mean"] >= 400 and final["env_steps"] < 300_000, final
    steps = [r["env_steps"] for r in records]
    assert steps == sorted(steps)
    assert (run / "config.yaml").exists()
    ckpts = RunDir(run).list_checkpoints()
    assert ckpts and ckpts[-1].name == f"ckpt-{final['learner_version']:010d}"


@pytest.mark.timeout(240)
def test_inline_resume_continues_counters_and_levels(tmp_path):
    run = tmp_path / "run"
    args = [*CARTPOLE, "--num-levels", "20", "--run-dir", str(run)]
    assert main(["train", *args, "--total-steps", "3200"]) == 0
    first = RunDir(run).load_latest_checkpoint()
    assert first["counters"]["env_steps"] == 3200 and first["version"] == 10
    levels_before = first["levels"]
    assert main(["train", "--resume", str(run), "--total-steps", "6400", "--quiet"]) == 0
    second = RunDir(run).load_latest_checkpoint()
    assert second["counters"]["env_steps"] == 6400 and second["version"] == 20
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["learner_version"] == 20
    # the level sampler continued from its saved state rather than starting over: its sample counter
    # carries on past the first run's, and every level seen before is still seen
    assert second["levels"]["counter"] > levels_before["counter"] > 0
    assert np.all(second["levels"]["seen"][levels_before["seen"].astype(bool)])


@pytest.mark.timeout(120)
def test_inline_continuous_actions(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "--backend", "inline", "--env", "Pendulum-v1", "--num-levels", "0", "--num-actors", "1",
                 "--envs-per-actor", "4", "--total-steps", "2000", "--metrics-port", "0", "--quiet",
                 "--run-dir", str(run)]) == 0
    ckpt = RunDir(run).load_latest_checkpoint()
    assert 2000 <= ckpt["counters"]["env_steps"] < 2000 + 2 * 80  # whole batches of 2 unrolls x 4 envs x 20
    assert "log_std" in ckpt["learner"]["model"]  # the Gaussian head was trained
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["episode_return_mean"] < 0  # Pendulum returns are negative costs


@pytest.mark.timeout(120)
def test_python_api_trains_and_evaluates(tmp_path):
    """`levelray.train(config)` and `levelray.evaluate(...)`: the CLI's two jobs, from a script."""
    import levelray
    from levelray.contracts.config import replace_paths

    cfg = replace_paths(levelray.RunConfig(), {
        "backend": "inline", "env.id": "CartPole-v1", "env.num_levels": 20, "env.start_level": 100,
        "actors.num_actors": 1, "actors.envs_per_actor": 4, "learner.batch_size": 1,
        "total_steps": 800, "metrics_port": 0, "run_dir": str(tmp_path / "run"),
    })
    result = levelray.train(cfg)
    assert result["run_dir"] == cfg.run_dir and result["env_steps"] == 800  # 10 updates of 4 envs x 20 steps
    assert RunDir(cfg.run_dir).load_latest_checkpoint()["version"] == result["learner_version"] == 10
    out = levelray.evaluate(result["run_dir"], levels="train,7000-7001", episodes=2, greedy=True)
    assert set(out["results"]) == {"train", "7000-7001"}
    assert all(100 <= s < 120 for s in out["results"]["train"]["seeds"])
    assert out["results"]["7000-7001"]["seeds"] == [7000, 7001]
    with pytest.raises(levelray.ConfigError, match="unknown config key"):
        levelray.train({"learner": {"learning_rat": 1e-3}})


@pytest.mark.timeout(120)
def test_a_run_directory_holding_a_run_is_refused_unless_resume_or_overwrite(tmp_path, capsys):
    """Reusing --run-dir without --resume would mix two runs' checkpoints (the old run's higher versions kept,
    the new run's pruned as soon as they were written): it is refused, and nothing there changes."""
    run = tmp_path / "run"
    args = [*CARTPOLE, "--num-levels", "0", "--run-dir", str(run)]
    assert main(["train", *args, "--total-steps", "3200"]) == 0  # 10 updates
    first = RunDir(run)
    before = {p.name: p.stat().st_mtime_ns for p in [*run.iterdir(), *first.checkpoints.iterdir()]}
    run_id = first.run_id
    with pytest.raises(SystemExit) as refused:
        main(["train", *args, "--total-steps", "640"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "holds an earlier run" in err and f"--resume {run}" in err and "--overwrite" in err
    assert {p.name: p.stat().st_mtime_ns for p in [*run.iterdir(), *first.checkpoints.iterdir()]} == before

    assert main(["train", *args, "--total-steps", "640", "--overwrite"]) == 0  # 2 updates, a new run
    fresh = RunDir(run)
    assert fresh.run_id != run_id
    assert [p.name for p in fresh.list_checkpoints()] == ["ckpt-0000000002"]
    assert fresh.load_latest_checkpoint()["run_id"] == fresh.run_id
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["env_steps"] == 640 and all(r["env_steps"] <= 640 for r in records)


def test_checkpoints_are_pruned_by_write_order_never_the_one_just_written(tmp_path):
    run_dir = RunDir.start(tmp_path / "run")
    for version in (300, 200, 5):  # e.g. versions that went back after a restart from an older checkpoint
        run_dir.save_checkpoint(version, {"version": version}, {"env_steps": version}, keep=2)
    assert [p.name for p in run_dir.list_checkpoints()] == ["ckpt-0000000005", "ckpt-0000000200"]
    run_dir.save_checkpoint(7, {"version": 7}, {"env_steps": 7}, keep=1)
    assert [p.name for p in run_dir.list_checkpoints()] == ["ckpt-0000000007"]


@pytest.mark.timeout(120)
def test_resume_refuses_changes_to_the_saved_state_before_writing_anything(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *CARTPOLE, "--num-levels", "20", "--run-dir", str(run), "--total-steps", "640"]) == 0
    config_before = (run / "config.yaml").read_text()
    for flags, named in ((["--num-levels", "30"], "env.num_levels (20 -> 30)"),
                         (["--batch-size", "4", "--level-strategy", "random"],
                          "learner.batch_size (2 -> 4), levels.strategy ('value_l1' -> 'random')")):
        with pytest.raises(SystemExit) as refused:
            main(["train", "--resume", str(run), *flags, "--quiet"])
        assert refused.value.code == 2
        err = capsys.readouterr().err
        assert named in err and "Keys that may change on resume" in err, err
        assert (run / "config.yaml").read_text() == config_before  # the refused value was not written
    # allowed overrides go through (a larger budget, another actor count)
    assert main(["train", "--resume", str(run), "--total-steps", "1280", "--num-actors", "1", "--quiet"]) == 0
    assert RunDir(run).load_latest_checkpoint()["counters"]["env_steps"] == 1280

    # a damaged config and a run without a checkpoint are messages, not tracebacks
    (run / "config.yaml").write_text("env: {id: [unclosed\n")
    with pytest.raises(SystemExit) as bad_yaml:
        main(["train", "--resume", str(run), "--quiet"])
    assert bad_yaml.value.code == 2 and "is not valid YAML" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.yaml").write_text(config_before)
    with pytest.raises(SystemExit) as no_ckpt:
        main(["train", "--resume", str(empty), "--quiet"])
    assert no_ckpt.value.code == 2 and "holds no checkpoint" in capsys.readouterr().err


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("schedule", "trained_budget"), [("constant", None), ("linear", None), ("linear", 200)])
def test_learning_rate_schedule_follows_the_budget_that_ends_the_run(tmp_path, schedule, trained_budget):
    """`--lr-schedule linear`: each update trains at lr * (1 - the budget spent), the larger of env steps received /
    total steps and, with `--total-trained-steps`, samples trained / that budget: the rate the optimiser actually
    holds and the one reported; `constant` keeps the configured rate."""
    from levelray.deploy.training.inline import InlineBackend
    from tests.support import cartpole_config

    cfg = cartpole_config(tmp_path, actors__num_actors=1, actors__envs_per_actor=4, actors__unroll_length=10,
                          learner__batch_size=1, learner__learning_rate=1e-3, learner__lr_schedule=schedule,
                          env__num_levels=0, total_steps=400, total_trained_steps=trained_budget)
    backend = InlineBackend(cfg)
    try:
        seen = []
        while not backend.core.budget_spent:
            trained = backend.core.learner.samples_trained
            metrics = backend.train_step()
            spent = backend.core.counters["env_steps"] / 400
            if trained_budget is not None:
                spent = max(spent, trained / trained_budget)
            expected = 1e-3 * (1 - spent) if schedule == "linear" else 1e-3
            assert metrics["learning_rate"] == pytest.approx(expected, rel=1e-12)
            assert backend.core.learner.optimizer.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-12)
            seen.append(metrics["learning_rate"])
        if trained_budget is not None:  # the trained budget ends the run at half the env steps, its rate decayed
            assert len(seen) == 5 and seen[-1] == pytest.approx(1e-3 * (1 - 160 / 200))
            return
        assert len(seen) == 10
        assert (seen[-1] == 0.0) if schedule == "linear" else (set(seen) == {1e-3})
    finally:
        backend.close()
