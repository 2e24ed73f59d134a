"""The Python API (`levelray.train`) and the command line agree: the same run resumed either way continues
identically, and the API refuses what `--resume` refuses."""

import numpy as np
import pytest
import yaml

import levelray
from levelray.deploy.cli import main
from levelray.deploy.rundir import RunDir

CARTPOLE = ["--backend", "inline", "--env", "CartPole-v1", "--num-levels", "20", "--num-actors", "1",
            "--envs-per-actor", "4", "--batch-size", "1", "--metrics-port", "0", "--quiet"]


def _first_leg(run) -> None:
    assert main(["train", *CARTPOLE, "--total-steps", "800", "--run-dir", str(run)]) == 0


@pytest.mark.timeout(240)
def test_api_resume_with_only_a_run_directory_continues_as_the_cli_does(tmp_path):
    by_cli, by_api = tmp_path / "cli", tmp_path / "api"
    _first_leg(by_cli)
    _first_leg(by_api)
    assert main(["train", "--resume", str(by_cli), "--total-steps", "1600", "--quiet"]) == 0
    result = levelray.train({"run_dir": str(by_api), "total_steps": 1600}, resume=True)

    assert result["run_dir"] == str(by_api)
    cli_cfg = yaml.safe_load((by_cli / "config.yaml").read_text())
    api_cfg = yaml.safe_load((by_api / "config.yaml").read_text())
    assert {**cli_cfg, "run_dir": None} == {**api_cfg, "run_dir": None}
    assert api_cfg["total_steps"] == 1600 and api_cfg["preset"] == "classic_control"
    cli_ckpt, api_ckpt = RunDir(by_cli).load_latest_checkpoint(), RunDir(by_api).load_latest_checkpoint()
    assert api_ckpt["counters"]["env_steps"] == cli_ckpt["counters"]["env_steps"] == 1600
    assert api_ckpt["version"] == cli_ckpt["version"]
    cli_model, api_model = cli_ckpt["learner"]["model"], api_ckpt["learner"]["model"]
    assert cli_model.keys() == api_model.keys()
    for name in cli_model:
        np.testing.assert_array_equal(cli_model[name].numpy(), api_model[name].numpy(), err_msg=name)


@pytest.mark.timeout(120)
def test_api_resume_refuses_a_change_the_cli_refuses(tmp_path, capsys):
    run = tmp_path / "run"
    _first_leg(run)
    before = sorted(p.name for p in (run / "checkpoints").iterdir())
    with pytest.raises(SystemExit):
        main(["train", "--resume", str(run), "--seed", "5", "--quiet"])
    cli_err = capsys.readouterr().err
    with pytest.raises(levelray.ConfigError) as api_err:
        levelray.train({"run_dir": str(run), "seed": 5}, resume=True)
    assert "seed" in cli_err and "seed" in str(api_err.value)
    assert "Keys that may change on resume" in str(api_err.value)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == before
