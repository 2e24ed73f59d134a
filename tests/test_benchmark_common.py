"""benchmarks.common: what the comparison benchmarks share with the package rather than compute on their own: the
paired differences a sweep's results.json already holds, the sweep's names of a budget's metrics, `levelray train`
flags read by the command line's own parser, and the one steps-to-threshold."""

from __future__ import annotations

from benchmarks.common import budget_names, metric_at, paired, pairwise, steps_to_threshold, train_flags_config
from levelray.deploy.report.stats import paired_ci
from levelray.deploy.sweep.results import summarise

ARMS = ["dr", "robust", "accel"]
VALUES = {("dr", 0): 0.40, ("dr", 1): 0.55, ("dr", 2): 0.47, ("robust", 0): 0.52, ("robust", 1): 0.61,
          ("robust", 2): 0.44, ("accel", 0): 0.71, ("accel", 1): 0.66}  # accel's seed 2 did not finish


def _sweep() -> tuple[list[dict], dict]:
    """(the benchmark's rows, the results.json the sweep writes for the same trials)."""
    rows = [{"arm": a, "seed": s, "solved": v} for (a, s), v in VALUES.items()]
    trials = [{"arm": a, "seed": s, "status": "done", "metrics": {"maze-suite.success_rate": v}}
              for (a, s), v in VALUES.items()] + [{"arm": "accel", "seed": 2, "status": "unfinished", "metrics": {}}]
    return rows, {"baseline": "dr", "trials": trials, **summarise(trials, ARMS, "dr")}


def test_a_comparison_with_the_baseline_is_the_sweeps_own_entry_and_the_others_the_same_statistics():
    rows, sweep = _sweep()
    by_seed = {arm: {s: v for (a, s), v in VALUES.items() if a == arm} for arm in ARMS}
    pairs = pairwise(rows, ARMS, "solved", sweep, "maze-suite.success_rate")
    assert list(pairs) == ["robust-dr", "accel-dr", "accel-robust"]
    for name, got in pairs.items():
        b, a = name.split("-")
        assert got == paired_ci(by_seed[a], by_seed[b])  # one computation, whichever reads it: equal, not close
        assert got == paired(rows, a, b, "solved")
    assert pairs["accel-dr"]["seeds"] == [0, 1] and pairs["accel-dr"]["n"] == 2

    # the baseline's comparisons are read, not recomputed: an entry the rows do not give is what comes back
    sweep["paired"]["accel"]["maze-suite.success_rate"] = {"mean": 9.0, "ci": 1.0, "n": 2}
    assert paired(rows, "dr", "accel", "solved", sweep, "maze-suite.success_rate") == {
        "mean": 9.0, "ci95": 1.0, "n": 2, "seeds": [0, 1]}
    assert paired(rows, "robust", "accel", "solved", sweep, "maze-suite.success_rate")["mean"] != 9.0
    assert paired(rows, "dr", "accel", "solved", sweep, None)["mean"] != 9.0  # a number the sweep does not name


def test_budget_names_follow_the_sweep():
    """An earlier budget names its metrics and files by itself, the last budget as the run's end (None); a spec
    without budgets has its one budget at the run's end."""
    spec = {"budgets": [4000, 8000, 12000], "budget_unit": "trained_steps"}
    assert budget_names(spec, spec["budgets"]) == [(4000, 4000), (8000, 8000), (12000, None)]
    assert budget_names({"base": {"total_steps": 3000}}, [3000]) == [(3000, None)]
    assert metric_at("test.return_mean", 4000) == "test.return_mean@4000"
    assert metric_at("test.return_mean", None) == "test.return_mean"


def test_train_flags_are_read_by_the_command_lines_parser_with_their_config_types():
    assert train_flags_config(["--level-buffer-size", "500", "--learning-rate", "0.001"]) == {
        "learner": {"learning_rate": 0.001}, "levels": {"buffer_size": 500}}
    assert train_flags_config([]) == {}


def test_steps_to_threshold_of_the_training_return_or_of_held_out_success():
    records = [
        {"env_steps": 1000, "episodes": 3, "episode_return_mean": 0.9},  # a mean of 3 episodes: not yet
        {"env_steps": 2000, "episodes": 120, "episode_return_mean": 0.7, "test_success_rate": 0.6,
         "test_env_steps": 1800},
        {"env_steps": 3000, "episodes": 150, "episode_return_mean": 0.85},
    ]
    assert steps_to_threshold(records, 0.8) == 3000
    assert steps_to_threshold(records, 0.95) is None
    assert steps_to_threshold(records, 0.5, held_out=True) == 1800  # where the evaluation played, not the record
    assert steps_to_threshold(records, 0.7, held_out=True) is None
