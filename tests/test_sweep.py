"""`levelray sweep`: arms x seeds of CartPole runs as Ray Tune trials on the test session's Ray.

A malformed spec is refused before anything starts, naming its place; a sweep's results.json holds the numbers that
the trials' own run directories give; `levelray report` draws a sweep directory by arm; a sweep killed midway and
resumed does not run a finished trial again and continues the unfinished one from its checkpoint; a trial with a
bad override fails alone; a trial whose process dies is restarted by Tune from its last checkpoint; a sweep with
budgets and named evaluations gives each budget's and each evaluation's numbers from the run directories, and a
trial started again after its training neither trains nor evaluates an earlier budget again; the project's specs in
benchmarks/sweeps are valid."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import threading
from pathlib import Path

import pytest
import yaml
from support import gone, sweep_process, wait_for

from levelray.contracts.config import ConfigError
from levelray.deploy.cli import main
from levelray.deploy.report.stats import mean_ci
from levelray.deploy.sweep.spec import load_spec
from levelray.deploy.sweep.trial import TrialLog

# Tiny CartPole runs: one actor of 4 envs, a record every 0.2 s, no event files.
BASE = {"env": {"id": "CartPole-v1"}, "total_steps": 3000, "report_interval_s": 0.2, "tensorboard": False,
        "actors": {"num_actors": 1, "envs_per_actor": 4}}
EVALUATE = {"levels": "test", "episodes": 4}


def spec_dict(**over) -> dict:
    spec = {"base": BASE, "arms": {"fast": {"learner": {"learning_rate": 0.003}},
                                   "slow": {"learner": {"learning_rate": 0.0003}}},
            "baseline": "slow", "seeds": [0, 1], "evaluate": EVALUATE}
    return {**spec, **over}


def write_spec(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec, sort_keys=False))  # the arms in their order: the trials run so
    return path


@pytest.mark.parametrize(("change", "named"), [
    ({"armz": {}}, "'armz'"),
    ({"arms": {"plr": {"levels": {"stratgy": "value_l1"}}}, "baseline": "plr"}, "arms.plr.levels.stratgy"),
    ({"base": {**BASE, "learner": {"learning_rate": "fast"}}}, "base.learner.learning_rate"),
    ({"base": {**BASE, "seed": 3}}, "base.seed"),
    ({"baseline": "medium"}, "baseline"),
    ({"seeds": "0-4"}, "seeds"),
    ({"evaluate": {"levels": "maze-suite", "episodes": 4}}, "maze"),
    ({"evaluate": {"levels": "test", "episodes": 0}}, "evaluate.episodes"),
    ({"evaluate": {"levels": "test", "episodes": 4, "greedly": True}}, "evaluate.greedly"),
    ({"resources": {"cpu": -1}}, "resources.cpu"),
    ({"arms": {"a/b": {}}, "baseline": "a/b"}, "a/b"),
    ({"arms": {"x": {"learner": {"clip_rho": 0}}}, "baseline": "x"}, "learner.clip_rho"),
    ({"evaluate": []}, "evaluate"),
    ({"evaluate": [EVALUATE, {"levels": "train", "episodes": 4}]}, "evaluate[1].name"),
    ({"evaluate": [EVALUATE, {**EVALUATE, "name": "g"}, {**EVALUATE, "name": "g"}]}, "evaluate[2].name"),
    ({"evaluate": [EVALUATE, {**EVALUATE, "name": "training"}]}, "evaluate[1].name"),
    ({"evaluate": [EVALUATE, {"levels": "test", "episodes": 0, "name": "g"}]}, "evaluate[1].episodes"),
    ({"budgets": [2000, 1000]}, "budgets"),
    ({"budgets": [1000, 2000]}, "base.total_steps"),
    ({"budgets": [1000, 2000], "budget_unit": "updates"}, "budget_unit"),
    ({"budget_unit": "trained_steps"}, "budget_unit"),
    ({"budgets": [1000, 5000], "budget_unit": "trained_steps"}, "total_steps 3,000"),
    ({"budgets": [1000, 2000], "budget_unit": "trained_steps",
      "base": {**BASE, "total_trained_steps": 500}}, "base.total_trained_steps"),
])
def test_a_malformed_spec_is_refused_before_anything_starts_naming_the_field(tmp_path, capsys, change, named):
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_spec(spec_dict(**change))
    spec = write_spec(tmp_path / "bad.yaml", spec_dict(**change))
    with pytest.raises(SystemExit) as exc:
        main(["sweep", str(spec), "--dir", str(tmp_path / "sweep")])
    assert exc.value.code == 2 and named in capsys.readouterr().err
    assert not (tmp_path / "sweep").exists()  # nothing claimed, no Ray started, no trial


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[1] / "benchmarks" / "sweeps").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_the_projects_comparison_specs_are_valid_specs(path):
    spec = load_spec(path)
    assert len(spec.arms) >= 2 and spec.baseline in spec.arms and len(spec.seeds) >= 1


def _stat(values: list[float]) -> dict:
    mean, half = mean_ci(values)
    return {"mean": mean, "ci": None if math.isnan(half) else half, "n": len(values)}


@pytest.mark.timeout(300)
def test_a_sweep_gives_the_numbers_of_its_trials_run_directories_and_a_report_by_arm(ray_session, tmp_path, capsys):
    from levelray.deploy.evaluation.evaluate import evaluate_checkpoint

    spec = write_spec(tmp_path / "cartpole.yaml", spec_dict())
    sweep = tmp_path / "sweep"
    assert main(["sweep", str(spec), "--dir", str(sweep), "--max-concurrent", "2"]) == 0
    out = capsys.readouterr().out
    assert "fast-seed1 done" in out and "paired: arm - slow" in out and "test.return_mean" in out
    results = json.loads((sweep / "results.json").read_text())
    assert results["complete"] and [t["status"] for t in results["trials"]] == ["done"] * 4
    assert set(results["arms"]) == {"fast", "slow"} and set(results["paired"]) == {"fast"}

    # every number again from the run directories alone: `levelray evaluate` of each trial's checkpoint
    own = {}
    for arm in ("fast", "slow"):
        for seed in (0, 1):
            run = sweep / "trials" / f"{arm}-seed{seed}"
            again = evaluate_checkpoint(run, ["test"], episodes=4, seed=seed)
            assert again["results"] == json.loads((run / "evaluate.json").read_text())["results"]
            last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
            own[arm, seed] = {"test.return_mean": again["results"]["test"]["return_mean"],
                              "test.length_mean": again["results"]["test"]["length_mean"],
                              "training.env_steps": float(last["env_steps"])}
            assert last["env_steps"] >= 3000
    for metric in ("test.return_mean", "test.length_mean", "training.env_steps"):
        for arm in ("fast", "slow"):
            assert results["arms"][arm][metric] == pytest.approx(_stat([own[arm, s][metric] for s in (0, 1)]))
        diffs = [own["fast", s][metric] - own["slow", s][metric] for s in (0, 1)]
        assert results["paired"]["fast"][metric] == pytest.approx(_stat(diffs))

    assert main(["report", str(sweep), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    groups = figures["return_bands"]["groups"]
    assert set(groups) == {"fast", "slow"} and all(len(g["runs"]) == 2 for g in groups.values())
    summary = (sweep / "report" / "summary.md").read_text()
    assert "## Arms (baseline slow)" in summary and "## Paired: arm - slow" in summary


@pytest.mark.timeout(300)
def test_budgets_and_named_evaluations_give_each_budgets_numbers_from_the_run_directories(ray_session, tmp_path,
                                                                                          capsys):
    from levelray.deploy.evaluation.evaluate import evaluate_checkpoint
    from levelray.deploy.sweep.runner import run_sweep

    base = {k: v for k, v in BASE.items() if k != "total_steps"}
    spec = spec_dict(base=base, seeds=[0], budgets=[1500, 3000],
                     evaluate=[EVALUATE, {**EVALUATE, "greedy": True, "name": "greedy"}])
    sweep = tmp_path / "sweep"
    assert main(["sweep", str(write_spec(tmp_path / "budgets.yaml", spec)), "--dir", str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "sweep budgets at 1,500 env steps: mean" in out and "sweep budgets at 3,000 env steps: mean" in out
    assert "paired: arm - slow, seed by seed at 1,500 env steps" in out
    results = json.loads((sweep / "results.json").read_text())
    assert results["complete"] and results["budgets"] == [1500, 3000]
    for arm in ("fast", "slow"):
        run = sweep / "trials" / f"{arm}-seed0"
        (trial,) = [t for t in results["trials"] if t["arm"] == arm]
        metrics = trial["metrics"]
        # each evaluation at each budget is a `levelray evaluate --json` of its own, and the metrics are its numbers
        files = {("", None): "evaluate.json", ("greedy.", None): "evaluate-greedy.json",
                 ("", 1500): "evaluate@1500.json", ("greedy.", 1500): "evaluate-greedy@1500.json"}
        for (prefix, budget), name in files.items():
            evaluation = json.loads((run / name).read_text())
            assert evaluation["greedy"] == (prefix == "greedy.")
            assert 1500 <= evaluation["env_steps"] < 3000 if budget else evaluation["env_steps"] >= 3000
            suffix = f"@{budget}" if budget else ""
            assert metrics[f"{prefix}test.return_mean{suffix}"] == evaluation["results"]["test"]["return_mean"]
        again = evaluate_checkpoint(run, ["test"], episodes=4, greedy=True, seed=0)
        assert again["results"] == json.loads((run / "evaluate-greedy.json").read_text())["results"]
        assert 1500 <= metrics["training.env_steps@1500"] < 3000 <= metrics["training.env_steps"]
        assert results["arms"][arm]["greedy.test.return_mean@1500"]["mean"] == metrics["greedy.test.return_mean@1500"]
        # one run, trained to 1,500 then resumed to 3,000 in the same process
        steps = [json.loads(line)["env_steps"] for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert all(b >= a for a, b in zip(steps, steps[1:], strict=False)) and trial["starts"] == 1
    diff = results["paired"]["fast"]["test.return_mean@1500"]["mean"]
    assert diff == pytest.approx(results["arms"]["fast"]["test.return_mean@1500"]["mean"]
                                 - results["arms"]["slow"]["test.return_mean@1500"]["mean"])
    assert main(["report", str(sweep)]) == 0
    summary = (sweep / "report" / "summary.md").read_text()
    assert "## Arms (baseline slow) at 1,500 env steps" in summary
    assert "## Paired: arm - slow at 3,000 env steps" in summary

    # a trial whose process ended after its training but before its outcome was recorded: started again, it
    # neither trains nor evaluates its earlier budget again, and evaluates its final checkpoint as it stands
    run = sweep / "trials" / "fast-seed0"
    log = run / "trial.jsonl"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines() if '"done"' not in line))
    records = (run / "metrics.jsonl").read_bytes()
    before = next(t for t in results["trials"] if t["arm"] == "fast")["metrics"]
    again = next(t for t in run_sweep(load_spec(sweep / "sweep.yaml"), sweep)["trials"] if t["arm"] == "fast")
    assert again["status"] == "done" and again["starts"] == 2 and again["metrics"] == before
    assert (run / "metrics.jsonl").read_bytes() == records


# a trial that finishes and one that checkpoints every 5 updates on its way to 60k env steps: the sweep that
# `kill_once_checkpointed` stops between them
SHORT_AND_LONG = {"short": {}, "long": {"total_steps": 60_000, "checkpoint_interval_updates": 5}}


def kill_once_checkpointed(spec: Path, sweep: Path) -> None:
    """Run the sweep `spec` in `sweep`, one trial at a time, and kill it whole once `short-seed0` has finished and
    `long-seed0` has written a checkpoint; returns when the killed trial's process has ended with it."""
    short, long = sweep / "trials" / "short-seed0", sweep / "trials" / "long-seed0"
    proc = sweep_process(str(spec), "--dir", str(sweep), "--max-concurrent", "1")
    try:
        wait_for(lambda: TrialLog(short).outcome() and any((long / "checkpoints").glob("ckpt-*")), 180,
                 "short done, long checkpointed", detail=lambda: proc.stdout.read() if proc.poll() is not None else "")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert TrialLog(long).outcome() is None, "the long trial finished before it could be killed"
    (start,) = [e for e in TrialLog(long).events() if e["event"] == "start"]
    wait_for(lambda: gone(start["pid"]), 60, "the killed sweep's trial process ended with it")


@pytest.mark.timeout(420)
def test_a_killed_sweep_resumes_without_rerunning_finished_trials_and_a_bad_override_fails_alone(ray_session,
                                                                                               tmp_path):
    # one trial at a time, seed by seed: `short` finishes, then `long` is killed after its first checkpoint;
    # `broken` asks for an env that does not exist, which only its trial finds out
    arms = {**SHORT_AND_LONG, "broken": {"env": {"id": "NoSuchEnv-v0"}}}
    spec = write_spec(tmp_path / "resume.yaml", spec_dict(arms=arms, baseline="short", seeds=[0]))
    sweep = tmp_path / "sweep"
    short, long = sweep / "trials" / "short-seed0", sweep / "trials" / "long-seed0"
    kill_once_checkpointed(spec, sweep)
    short_metrics = (short / "metrics.jsonl").read_bytes()
    run_id = json.loads((long / "run.json").read_text())["run_id"]

    resumed = sweep_process("--resume", str(sweep))
    output, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 1, output  # `broken` failed
    results = json.loads((sweep / "results.json").read_text())
    status = {t["name"]: t for t in results["trials"]}
    assert status["short-seed0"]["status"] == "done" and status["short-seed0"]["starts"] == 1
    assert (short / "metrics.jsonl").read_bytes() == short_metrics  # never run again
    assert status["long-seed0"]["status"] == "done" and status["long-seed0"]["starts"] == 2
    starts = [e for e in TrialLog(long).events() if e["event"] == "start"]
    assert starts[0]["resumed_from"] is None and starts[1]["resumed_from"].startswith("ckpt-")
    assert json.loads((long / "run.json").read_text())["run_id"] == run_id  # the same run, continued
    records = [json.loads(line) for line in (long / "metrics.jsonl").read_text().splitlines()]
    steps = [r["env_steps"] for r in records]
    assert steps[-1] >= 60_000 and all(b >= a for a, b in zip(steps, steps[1:], strict=False))
    assert status["broken-seed0"]["status"] == "failed" and "NoSuchEnv-v0" in status["broken-seed0"]["error"]
    assert "broken-seed0: failed" in output and "NoSuchEnv-v0" in output
    assert results["arms"]["long"]["training.env_steps"]["n"] == 1 and results["arms"]["broken"] == {}
    assert "long" in results["paired"] and results["paired"]["broken"] == {}


@pytest.mark.timeout(300)
def test_a_trial_whose_process_dies_is_restarted_from_its_last_checkpoint(ray_session, tmp_path):
    from levelray.deploy.sweep.runner import run_sweep

    arms = {"only": {"total_steps": 50_000, "checkpoint_interval_updates": 5}}
    spec = load_spec(spec_dict(arms=arms, baseline="only", seeds=[0], max_failures=1))
    trial = tmp_path / "trials" / "only-seed0"
    killed: list[int] = []

    def kill_after_first_checkpoint():
        def ready():
            starts = [e for e in TrialLog(trial).events() if e["event"] == "start"]
            return starts and any((trial / "checkpoints").glob("ckpt-*")) and starts[0]["pid"]
        pid = wait_for(ready, 180, "the trial's first checkpoint")
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)

    killer = threading.Thread(target=kill_after_first_checkpoint, daemon=True)
    killer.start()
    results = run_sweep(spec, tmp_path)
    killer.join(timeout=5)
    assert killed, "the trial was never killed"
    (record,) = results["trials"]
    assert record["status"] == "done" and record["starts"] == 2, record
    first, second = [e for e in TrialLog(trial).events() if e["event"] == "start"]
    assert first["pid"] == killed[0] and second["pid"] != killed[0]
    assert second["resumed_from"].startswith("ckpt-")
    assert record["metrics"]["training.env_steps"] >= 50_000


# Robust PLR on CartPole's unbounded seeds: half the windows replay, the rest are played without gradient
ROBUST = {"strategy": "value_l1", "robust": True, "replay_prob": 0.5, "buffer_size": 8}


@pytest.mark.timeout(300)
def test_budgets_in_trained_steps_train_each_arm_to_the_same_samples_trained(ray_session, tmp_path, capsys):
    """`budget_unit: trained_steps`: every arm is trained to each budget of samples trained (Robust PLR receiving
    more env steps than domain randomisation to get there) and evaluated at each; an arm whose env-step cap comes
    first fails, saying so."""
    base = {**BASE, "env": {"id": "CartPole-v1", "num_levels": 0}, "total_steps": 50_000}
    arms = {"dr": {"levels": {"strategy": "random"}}, "robust": {"levels": ROBUST},
            "capped": {"levels": ROBUST, "total_steps": 1100}}
    spec = spec_dict(base=base, arms=arms, baseline="dr", seeds=[0], budgets=[500, 1000],
                     budget_unit="trained_steps")
    sweep = tmp_path / "sweep"
    assert main(["sweep", str(write_spec(tmp_path / "trained.yaml", spec)), "--dir", str(sweep),
                 "--max-concurrent", "2"]) == 1  # a trial failed
    out = capsys.readouterr().out
    assert "sweep trained at 500 trained steps: mean" in out and "/1,000 trained steps" in out
    results = json.loads((sweep / "results.json").read_text())
    assert results["budget_unit"] == "trained_steps"
    status = {t["arm"]: t for t in results["trials"]}
    assert status["capped"]["status"] == "failed" and "raise total_steps" in status["capped"]["error"]
    for arm in ("dr", "robust"):
        run, metrics = sweep / "trials" / f"{arm}-seed0", status[arm]["metrics"]
        assert status[arm]["status"] == "done"
        for budget, name in ((500, "evaluate@500.json"), (1000, "evaluate.json")):
            evaluated = json.loads((run / name).read_text())
            assert budget <= evaluated["samples_trained"] < 2 * budget < evaluated["env_steps"] * 2
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        last = records[-1]
        assert metrics["training.env_steps"] == last["env_steps"]
        if arm == "dr":
            assert last["samples_trained"] == last["env_steps"]
        else:  # the new levels' steps were received and not trained on
            assert last["env_steps"] > 1.3 * last["samples_trained"]
