"""A learner A/B on the maze: each arm of a sweep against its baseline arm, seed by seed, on what the curriculum
comparison measures and on how often a run's policy stopped moving.

    python -m benchmarks.maze_learner_ab --out-dir DIR [--json PATH]

DIR is a `levelray sweep` directory of a spec like `benchmarks/sweeps/maze_collapse.yaml` (domain randomisation on
`maze:13x13`, every arm the same but for a learner setting, evaluated on the suite and on generated 25- and
50-wall mazes at each budget of trained steps). Per arm and budget: the suite's solved rate and the generated
mazes' as mean ± 95% Student-t interval over seeds and the paired difference from the baseline (same seed); the
runs that spent any report in a never-moving stretch (`benchmarks.dcd_maze.still_spells`: no return, entropy at
ln 6) and the trained steps spent there; each run's env steps/s. It reads the runs as they are, finished or not.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from benchmarks.accel_maze import GENERATED_SETS
from benchmarks.common import fmt_ci, paired, print_table, write_json
from benchmarks.dcd_maze import evaluated_at, spells_text, sweep_results
from levelray.deploy.report.stats import ci_summary

MEASURES = ("suite_solved", *GENERATED_SETS)


def still_steps(run: dict) -> float:
    """Trained steps between the first and the last report of each never-moving stretch, summed."""
    return float(sum(last - first for first, last in run["still_spells"]))


def compare(results: list[dict], arms: list[str], baseline: str, budgets: list[int]) -> dict:
    """`{arm: {"runs", "still_runs", "still_steps", measure: {budget: {"arm": ci, "paired": ci}}}}` from
    `dcd_maze.trial_result`s; "paired" is arm - baseline seed by seed (absent for the baseline itself)."""
    out: dict = {}
    for arm in arms:
        runs = [r for r in results if r["arm"] == arm]
        entry: dict = {"runs": len(runs), "still_runs": sum(bool(r["still_spells"]) for r in runs),
                       "still_steps": ci_summary([still_steps(r) for r in runs])}
        for measure in MEASURES:
            entry[measure] = {}
            for budget in budgets:
                rows = evaluated_at(results, budget, measure)
                entry[measure][budget] = {"arm": ci_summary([r[measure] for r in rows if r["arm"] == arm])}
                if arm != baseline:
                    entry[measure][budget]["paired"] = paired(rows, baseline, arm, measure)
        out[arm] = entry
    return out


def print_comparison(results: list[dict], comparison: dict, baseline: str, budgets: list[int]) -> None:
    print_table([[r["arm"], r["seed"], f"{r['samples_trained']:,}", round(r["env_steps"] / r["wall_s"])
                  if r["wall_s"] else None, spells_text(r["still_spells"]),
                  *(r["budgets"].get(b, {}).get(m) for b in budgets for m in MEASURES)] for r in results],
                ["arm", "seed", "trained", "env steps/s", "never moved (M)",
                 *(f"{m}@{b / 1e6:g}M" for b in budgets for m in MEASURES)], title="runs")
    print()
    print_table([[arm, f"{c['still_runs']} of {c['runs']}", fmt_ci(c["still_steps"], ",.0f")]
                 for arm, c in comparison.items()],
                ["arm", "runs that never moved for a report or more", "trained steps never moving, per run"],
                title="never-moving stretches")
    for measure in MEASURES:
        print()
        print_table([[arm, *(fmt_ci(c[measure][b]["arm"]) for b in budgets),
                      *(fmt_ci(c[measure][b].get("paired")) for b in budgets)] for arm, c in comparison.items()],
                    ["arm", *(f"{b / 1e6:g}M" for b in budgets),
                     *(f"vs {baseline} at {b / 1e6:g}M (paired)" for b in budgets)],
                    title=f"{measure}: mean ± 95% CI over seeds, and the paired difference from {baseline}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", required=True, help="the sweep directory")
    p.add_argument("--json", help="where to write the comparison (default: DIR/learner_ab.json)")
    args = p.parse_args(argv)
    out = Path(args.out_dir)
    spec = yaml.safe_load((out / "sweep.yaml").read_text())
    arms, budgets = list(spec["arms"]), list(spec["budgets"])
    results = sweep_results(out, spec)
    comparison = compare(results, arms, spec["baseline"], budgets)
    print_comparison(results, comparison, spec["baseline"], budgets)
    write_json(args.json or str(out / "learner_ab.json"),
               {"results": {"spec": spec, "comparison": comparison, "runs": results}}, benchmark="maze_learner_ab")
    return 0


if __name__ == "__main__":
    sys.exit(main())
