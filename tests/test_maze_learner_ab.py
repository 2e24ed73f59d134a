"""The maze learner A/B's comparison: each arm against the baseline seed by seed, and the runs that stopped moving."""

import pytest

from benchmarks.maze_learner_ab import compare, still_steps


def _run(arm: str, seed: int, suite: float, spells: list[tuple[int, int]]) -> dict:
    return {"arm": arm, "seed": seed, "still_spells": spells,
            "budgets": {4_000_000: {"suite_solved": suite, "maze-25": 2 * suite, "maze-50": suite / 2}}}


def test_compare_pairs_each_arm_with_the_baseline_by_seed_and_counts_the_runs_that_never_moved():
    results = [_run("base", 0, 0.10, []), _run("base", 1, 0.20, [(1_000_000, 1_500_000)]), _run("base", 2, 0.30, []),
               _run("x", 0, 0.15, []), _run("x", 1, 0.20, []), _run("x", 2, 0.40, [(2_000_000, 2_000_000)]),
               _run("x", 3, 0.90, [])]  # seed 3 has no baseline run: in x's mean, not in the pairs
    got = compare(results, ["base", "x"], "base", [4_000_000])
    assert got["base"]["still_runs"] == 1 and got["base"]["still_steps"]["mean"] == pytest.approx(500_000 / 3)
    assert got["x"]["still_runs"] == 1 and got["x"]["runs"] == 4  # a one-report stretch counts, 0 steps long
    assert "paired" not in got["base"]["suite_solved"][4_000_000]
    pair = got["x"]["suite_solved"][4_000_000]["paired"]
    assert pair["n"] == 3 and pair["mean"] == pytest.approx((0.05 + 0.0 + 0.10) / 3)
    assert got["x"]["maze-25"][4_000_000]["paired"]["mean"] == pytest.approx(2 * (0.05 + 0.0 + 0.10) / 3)
    assert got["x"]["suite_solved"][4_000_000]["arm"]["mean"] == pytest.approx((0.15 + 0.2 + 0.4 + 0.9) / 4)
    assert still_steps(results[1]) == 500_000
