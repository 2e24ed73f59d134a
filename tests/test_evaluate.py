"""`levelray evaluate` and the held-out evaluation core, on checkpoints of real short inline runs."""

from __future__ import annotations

import time

import numpy as np
import pytest

from levelray.contracts.config import ConfigError, RunConfig, replace_paths
from levelray.deploy.cli import main
from levelray.deploy.evaluation.episodes import evaluate_policy
from levelray.deploy.evaluation.evaluate import evaluate_checkpoint
from levelray.deploy.evaluation.level_sets import level_set_seeds, parse_level_sets
from levelray.deploy.evaluation.remote import evaluate_on_ray
from levelray.deploy.rundir import checkpoint_weights, resolve_checkpoint
from levelray.deploy.training.periodic_eval import PeriodicEvaluator
from tests.support import TINY_INLINE_RUN as TINY
from tests.support import json_output


@pytest.fixture(scope="module")
def procgen_run(tmp_path_factory, one_thread):
    run = tmp_path_factory.mktemp("eval") / "bigfish"
    assert main(["train", *TINY, "--env", "procgen:bigfish", "--num-levels", "200", "--total-steps", "64",
                 "--run-dir", str(run)]) == 0
    return run


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory, one_thread):
    run = tmp_path_factory.mktemp("eval") / "cartpole"
    assert main(["train", *TINY, "--env", "CartPole-v1", "--num-levels", "20", "--start-level", "100",
                 "--total-steps", "64", "--run-dir", str(run)]) == 0
    return run


def test_procgen_train_and_held_out_levels_are_disjoint(procgen_run):
    out = evaluate_checkpoint(procgen_run, ["train", "test"], episodes=3, num_envs=3, greedy=True)
    train, test = out["results"]["train"], out["results"]["test"]
    assert out["training_levels"] == [0, 200] and out["held_out"]
    # the seeds procgen reports playing: the requested ones, training levels vs. outside the training range
    assert train["seeds"] == level_set_seeds(resolve_checkpoint(procgen_run)["cfg"], "train", 3)[:3].tolist()
    assert all(0 <= s < 200 for s in train["seeds"])
    assert all(200 <= s < 2**31 - 1 for s in test["seeds"]) and len(set(test["seeds"])) == 3
    assert not set(train["seeds"]) & set(test["seeds"])
    for r in (train, test):
        assert r["episodes"] == 3 and len(r["returns"]) == 3
        assert r["return_mean"] == pytest.approx(np.mean(r["returns"]))
        assert r["return_median"] == pytest.approx(np.median(r["returns"]))
        assert 0.0 <= r["success_rate"] <= 1.0  # procgen defines completion (prev_level_complete)
    assert out["generalization_gap"] == pytest.approx(train["return_mean"] - test["return_mean"])
    assert out["version"] == 4 and out["env_steps"] == 64


def test_greedy_evaluation_is_deterministic(procgen_run):
    ckpt = resolve_checkpoint(procgen_run)
    cfg, weights = ckpt["cfg"], checkpoint_weights(ckpt)
    seeds = np.array([1000, 1001, 1002])
    a = evaluate_policy(cfg, weights, seeds, 3, greedy=True, num_envs=2, seed=0)
    b = evaluate_policy(cfg, weights, seeds, 3, greedy=True, num_envs=3, seed=7)
    assert a["seeds"] == b["seeds"] == [1000, 1001, 1002]
    assert a["returns"] == b["returns"]


def test_cli_json_on_gymnasium_levels(cartpole_run, capsys):
    capsys.readouterr()
    assert main(["evaluate", str(cartpole_run), "--levels", "train,test,5000-5002", "--episodes", "3",
                 "--greedy", "--num-envs", "2", "--json"]) == 0
    out = json_output(capsys.readouterr().out)
    assert out["env"] == "CartPole-v1" and out["training_levels"] == [100, 120] and out["greedy"]
    res = out["results"]
    assert set(res) == {"train", "test", "5000-5002"}
    assert all(100 <= s < 120 for s in res["train"]["seeds"])
    assert all(not 100 <= s < 120 for s in res["test"]["seeds"])
    assert res["5000-5002"]["seeds"] == [5000, 5001, 5002]
    for r in res.values():
        assert r["episodes"] == 3 and r["success_rate"] is None  # CartPole defines no success
        assert all(1 <= x <= 500 for x in r["returns"])  # CartPole: +1 per step, at most 500 steps
    assert out["generalization_gap"] == pytest.approx(res["train"]["return_mean"] - res["test"]["return_mean"])
    # a checkpoint directory works as well as its run directory, and the text output names the sets
    ckpt_dir = resolve_checkpoint(cartpole_run)["path"]
    assert main(["evaluate", ckpt_dir, "--levels", "5000-5002", "--episodes", "3", "--greedy"]) == 0
    text = capsys.readouterr().out
    assert "5000-5002" in text and "version 4" in text


def test_bad_checkpoint_paths_give_clear_errors(tmp_path, capsys):
    for path, message in [
        (tmp_path / "missing", "does not exist"),
        (tmp_path, "neither a checkpoint directory"),
    ]:
        with pytest.raises(SystemExit) as exc:
            main(["evaluate", str(path)])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "CHECKPOINT" in err and message in err and "Traceback" not in err
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("env:\n  id: CartPole-v1\n")
    with pytest.raises(SystemExit):
        main(["evaluate", str(tmp_path / "run")])
    assert "has no checkpoint" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["evaluate", str(tmp_path / "run"), "--levels", "train,7-3"])
    assert "empty" in capsys.readouterr().err


def test_level_sets():
    assert parse_level_sets("train, test,10-20") == ["train", "test", "10-20"]
    for bad in ("", "valid", "3-", "train,train"):
        with pytest.raises(ConfigError):
            parse_level_sets(bad)
    cfg = replace_paths(RunConfig(), {"env.start_level": 1000, "env.num_levels": 500})
    train = level_set_seeds(cfg, "train", 10, seed=3)
    assert sorted(train.tolist()) == list(range(1000, 1500))  # every training level once, shuffled
    test = level_set_seeds(cfg, "test", 5000, seed=3)
    assert len(np.unique(test)) == 5000 and not ((test >= 1000) & (test < 1500)).any()
    assert test.min() >= 0 and test.max() < 2**31 - 1
    assert (level_set_seeds(cfg, "test", 50, seed=3) == level_set_seeds(cfg, "test", 50, seed=3)).all()
    assert level_set_seeds(cfg, "7-9", 2).tolist() == [7, 8, 9]


def test_periodic_evaluator_inline(cartpole_run):
    ckpt = resolve_checkpoint(cartpole_run)
    cfg, weights = ckpt["cfg"], checkpoint_weights(ckpt)
    cfg = replace_paths(cfg, {"eval.interval_updates": 10, "eval.episodes": 3, "eval.num_envs": 2})
    ev = PeriodicEvaluator(cfg, use_ray=False)
    assert all(not 100 <= s < 120 for s in ev.seeds)
    ev.maybe_start(9, weights)
    assert ev.poll() is None
    ev.maybe_start(12, weights, env_steps=192)  # crossed 10
    res = ev.poll()
    assert res["test_version"] == 12 and res["test_episodes"] == 3 and res["test_return_mean"] >= 1
    assert res["test_env_steps"] == 192 and res["test_success_rate"] is None
    assert ev.poll() is None
    ev.maybe_start(19, weights)
    assert ev.poll() is None
    off = RunConfig()
    assert not PeriodicEvaluator(off, use_ray=False).enabled  # interval 0: never evaluates
    PeriodicEvaluator(off, use_ray=False).maybe_start(10_000, weights)


@pytest.mark.timeout(180)
def test_ray_evaluation_matches_inline(cartpole_run, ray_session):
    ckpt = resolve_checkpoint(cartpole_run)
    cfg, weights = ckpt["cfg"], checkpoint_weights(ckpt)
    seeds = np.arange(300, 305)
    on_ray = evaluate_on_ray(cfg, weights, seeds, 5, greedy=True, num_envs=2, seed=0)  # 3 tasks
    inline = evaluate_policy(cfg, weights, seeds, 5, greedy=True, num_envs=2, seed=0)
    assert on_ray["seeds"] == inline["seeds"] == seeds.tolist()
    assert on_ray["returns"] == inline["returns"]
    cfg = replace_paths(cfg, {"eval.interval_updates": 5, "eval.episodes": 4, "eval.num_envs": 2})
    ev = PeriodicEvaluator(cfg, use_ray=True)
    ev.maybe_start(5, ray_session.put(weights))
    assert ev.running
    ev.maybe_start(10, weights)  # one evaluation at a time: ignored while the first runs
    deadline = time.time() + 120
    while (res := ev.poll()) is None:
        assert time.time() < deadline
        time.sleep(0.1)
    assert res["test_version"] == 5 and res["test_episodes"] == 4 and not ev.running


@pytest.mark.timeout(180)
def test_a_failed_evaluation_is_reported_and_the_next_one_runs(cartpole_run, ray_session):
    """Before: an evaluation that raised (a crashed Ray task, weights the env's network cannot take) ended
    training. After: `poll()` reports it as `test_error` once, and the next interval evaluates as usual."""
    ckpt = resolve_checkpoint(cartpole_run)
    cfg, weights = ckpt["cfg"], checkpoint_weights(ckpt)
    cfg = replace_paths(cfg, {"eval.interval_updates": 5, "eval.episodes": 2, "eval.num_envs": 2})
    broken = {k: v[..., :1] for k, v in weights.items()}  # wrong shapes: the policy cannot be built
    ev = PeriodicEvaluator(cfg, use_ray=False)
    ev.maybe_start(5, broken)
    failed = ev.poll()
    assert failed["test_version"] == 5 and failed["eval_failures"] == 1 and "Error" in failed["test_error"]
    ev.maybe_start(10, weights)
    assert ev.poll()["test_episodes"] == 2

    # on Ray: the evaluation tasks raise on the worker (a real task failure). Killing them with `ray.cancel`
    # raced with a 2-episode CartPole evaluation that had already finished (then nothing failed).
    ev = PeriodicEvaluator(cfg, use_ray=True)
    ev.maybe_start(5, ray_session.put(broken))
    failed = wait_for_result(ev)
    assert failed["test_version"] == 5 and "test_error" in failed and ev.failures == 1
    ev.maybe_start(10, ray_session.put(weights))
    assert wait_for_result(ev)["test_episodes"] == 2


def wait_for_result(ev: PeriodicEvaluator, timeout: float = 120) -> dict:
    deadline = time.time() + timeout
    while (res := ev.poll()) is None:
        assert time.time() < deadline, "no evaluation result"
        time.sleep(0.1)
    return res
