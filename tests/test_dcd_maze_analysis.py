"""The maze comparison's report: the stretches in which a run's policy never moved (no return, entropy at ln 6 of
MiniGrid's 7 actions), report by report; the generated mazes' solved rate by each level's shortest path; the
learner's entropy before each budget; the mean of each run's last three suite scores; the generated mazes'
paired differences."""

import math

import numpy as np

from benchmarks.dcd_maze import (
    ENTROPY_WINDOW,
    PATH_BINS,
    entropy_at,
    late_suite,
    path_bin_name,
    solved_by_path,
    spells_text,
    still_spells,
    summarise,
)
from levelray.families.maze.level import level_for_id, parse_blocks, suite_names


def _record(trained: int, ret: float, entropy: float) -> dict:
    return {"samples_trained": trained, "episode_return_mean": ret, "learner_entropy": entropy}


def test_still_spells_are_the_runs_of_reports_with_no_return_at_entropy_ln_6():
    ln6 = math.log(6)
    records = [_record(1_000_000, 0.30, 1.70), _record(2_000_000, 0.00, ln6 + 0.01), _record(3_000_000, 0.01, ln6),
               _record(4_000_000, 0.40, 1.60),
               _record(5_000_000, 0.00, 1.95),  # no return, but acting at random (ln 7): it moves
               _record(6_000_000, 0.20, ln6),   # entropy ln 6 with returns: it moves
               _record(7_000_000, 0.02, ln6 - 0.02)]
    spells = still_spells(records)
    assert spells == [(2_000_000, 3_000_000), (7_000_000, 7_000_000)]
    assert spells_text(spells) == "2.0-3.0, 7.0" and spells_text([]) == "-"


def _reference_path(level) -> int:
    """Moves from agent to goal by relaxing a distance grid until it settles (0: unreachable)."""
    free, dist = ~level.walls, np.full(level.walls.shape, np.inf)
    dist[level.agent[1], level.agent[0]] = 0
    while True:
        padded = np.pad(dist, 1, constant_values=np.inf)
        nearest = np.minimum.reduce([padded[:-2, 1:-1], padded[2:, 1:-1], padded[1:-1, :-2], padded[1:-1, 2:]])
        grown = np.where(free, np.minimum(dist, nearest + 1), np.inf)
        if np.array_equal(grown, dist):
            goal = dist[level.goal[1], level.goal[0]]
            return 0 if np.isinf(goal) else int(goal)
        dist = grown


def test_generated_mazes_solved_rate_is_split_by_each_levels_shortest_path():
    rng = np.random.default_rng(7)
    results, expected = {}, {path_bin_name(*b): [] for b in PATH_BINS}
    for walls in (25, 50):
        seeds = rng.integers(0, 2**31, size=60).tolist()
        returns = rng.choice([0.0, 0.8], size=60).tolist()
        results[f"maze-{walls}"] = {"seeds": seeds, "returns": returns}
        for seed, ret in zip(seeds, returns, strict=True):
            path = _reference_path(level_for_id(seed, 13, 13, parse_blocks(str(walls))))
            for low, high in PATH_BINS:
                if low <= path < high:
                    expected[path_bin_name(low, high)].append(ret > 0)
    rates = solved_by_path({"env": "maze:13x13", "results": results})
    assert all(expected.values())  # every range holds levels, so each rate is tested
    assert rates == {name: float(np.mean(solved)) for name, solved in expected.items()}


def test_entropy_at_a_budget_is_the_mean_over_the_reports_in_the_window_up_to_it():
    rng = np.random.default_rng(3)
    trained = np.sort(rng.integers(1, 9_000_000, size=40))
    entropy = rng.uniform(0.0, 1.9, size=40)
    records = [{"samples_trained": int(t), "learner_entropy": float(e)} for t, e in zip(trained, entropy, strict=True)]
    records.insert(5, {"samples_trained": 3_900_000})  # a report without the learner's numbers yet
    budgets = [4_000_000, 8_000_000, 20_000_000]
    got = entropy_at(records, budgets)
    for budget in budgets[:2]:
        inside = (trained > budget - ENTROPY_WINDOW) & (trained <= budget)
        assert math.isclose(got[budget], float(entropy[inside].mean()))
    assert 20_000_000 not in got  # no report within its window


def test_late_suite_is_the_mean_of_a_runs_last_three_suite_scores_and_skips_a_run_that_has_not_reached_them():
    budgets = [4, 8, 12, 16, 20]
    finished = {b: {"suite_solved": v} for b, v in zip(budgets, [0.9, 0.9, 0.1, 0.4, 0.25], strict=True)}
    running = {b: {"suite_solved": 0.5} for b in budgets[:4]}
    results = [{"arm": "dr", "seed": 0, "budgets": finished}, {"arm": "sfl", "seed": 0, "budgets": running}]
    assert late_suite(results, budgets) == [{"arm": "dr", "seed": 0, "late_suite": 0.25}]


def test_generated_mazes_are_paired_seed_by_seed_at_the_last_budget_over_the_seeds_both_arms_reached_it():
    rng = np.random.default_rng(3)
    budgets, bins = [4, 8], [path_bin_name(*b) for b in PATH_BINS]
    solved = {(arm, seed): rng.uniform(size=2) for arm in ("dr", "robust") for seed in range(4)}

    def result(arm: str, seed: int) -> dict:
        last = 8 if (arm, seed) != ("robust", 3) else 4  # robust's seed 3 still training: not paired
        evaluation = {"suite_solved": 0.5, "mazes": dict.fromkeys(suite_names(), 0.5),
                      "maze-25": solved[arm, seed][0], "maze-50": solved[arm, seed][1],
                      "by_path": dict.fromkeys(bins, 0.5)}
        return {"arm": arm, "seed": seed, "budgets": {b: evaluation for b in budgets if b <= last},
                "entropy": {}, "trained_fraction": 1.0}

    summary = summarise([result(a, s) for a, s in solved], ["dr", "robust"], budgets)
    t_975_df2 = 4.302652729911275  # Student's t, 97.5th percentile, 2 degrees of freedom
    for i, name in enumerate(("maze-25", "maze-50")):
        diffs = np.array([solved["robust", s][i] - solved["dr", s][i] for s in range(3)], dtype=np.float64)
        entry = summary["paired_generated"]["robust-dr"][name]
        assert (entry["n"], entry["seeds"]) == (3, [0, 1, 2])
        assert math.isclose(entry["mean"], diffs.mean(), rel_tol=1e-12)
        assert math.isclose(entry["ci95"], t_975_df2 * diffs.std(ddof=1) / math.sqrt(3), rel_tol=1e-9)
