"""The curriculum pilot of issue 59: what DCD's evaluation limit changes, and the share of env steps each curriculum
(SFL's candidate plays most) spends untrained, before the full comparison (`benchmarks.dcd_maze --spec
curriculum_maze`) spends its hours.

    python -m benchmarks.curriculum_pilot                 # runs (or continues) benchmarks/sweeps/curriculum_pilot.yaml
    python -m benchmarks.curriculum_pilot --analyse --out-dir DIR    # reports a sweep directory as it is
        [--parallel 2] [--json PATH]

Per run and budget: the suite's solved rate evaluated at DCD's test limit (the family's, 450 steps at 13x13: the
spec's unnamed evaluation) and at the training limit (250: `limit250`), and the generated 25- and 50-wall mazes;
per arm the trained share of env steps (`samples_trained / env_steps`: the rest is Robust PLR's and ACCEL's new
levels played without gradient, and SFL's candidate plays). Over all runs and budgets, the limit's effect paired
by run (450 - 250, mean ± 95% interval), per maze and over the suite.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from benchmarks.accel_maze import GENERATED, GENERATED_SETS
from benchmarks.common import ROOT, budget_names, fmt_ci, load_sweep, print_table, run_sweep, write_json
from levelray.deploy.report.runs import load_run
from levelray.deploy.report.stats import ci_summary
from levelray.deploy.sweep.metrics import evaluation_file
from levelray.deploy.sweep.trial import trial_dir
from levelray.families.maze.level import suite_names

TRAINING_LIMIT = "limit250"  # the spec's evaluation of the suite at the training limit


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out" / "curriculum_pilot"))
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--analyse", action="store_true", help="report the sweep directory as it is; run nothing")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "curriculum_pilot.json"))
    return p.parse_args(argv)


def run_result(run: Path, arm: str, seed: int, names: list[tuple[int, int | None]]) -> dict:
    """One run's evaluations at each budget it reached (both limits and the generated mazes) and its shares."""
    records = load_run(run)["records"] if (run / "metrics.jsonl").exists() else []
    last = records[-1] if records else {}
    out = {"arm": arm, "seed": seed, "env_steps": last.get("env_steps", 0),
           "samples_trained": last.get("samples_trained", 0), "budgets": {}}
    out["trained_share"] = out["samples_trained"] / out["env_steps"] if out["env_steps"] else None
    for budget, earlier in names:
        files = {key: run / evaluation_file(name, earlier)
                 for key, name in (("450", None), ("250", TRAINING_LIMIT), ("generated", GENERATED))}
        if not all(f.exists() for f in files.values()):
            continue
        ev = {key: json.loads(f.read_text()) for key, f in files.items()}
        out["budgets"][budget] = {
            "env_steps": ev["450"]["env_steps"],
            **{f"suite_{limit}": ev[limit]["maze_suite"]["success_rate"] for limit in ("450", "250")},
            **{f"mazes_{limit}": {m: ev[limit]["results"][m]["success_rate"] for m in suite_names()}
               for limit in ("450", "250")},
            "limits": sorted({ev[limit]["results"][m]["max_episode_steps"] for limit in ("450", "250")
                              for m in suite_names()}),
            **{s: ev["generated"]["results"][s]["success_rate"] for s in GENERATED_SETS}}
    return out


def limit_effect(results: list[dict]) -> dict:
    """450 - 250 over every (run, budget) evaluated at both, per maze and over the suite, with each side's mean."""
    pairs = [b for r in results for b in r["budgets"].values()]
    suite = {"450": ci_summary([b["suite_450"] for b in pairs]), "250": ci_summary([b["suite_250"] for b in pairs]),
             "difference": ci_summary([b["suite_450"] - b["suite_250"] for b in pairs])}
    mazes = {m: {"450": ci_summary([b["mazes_450"][m] for b in pairs]),
                 "250": ci_summary([b["mazes_250"][m] for b in pairs]),
                 "difference": ci_summary([b["mazes_450"][m] - b["mazes_250"][m] for b in pairs])}
             for m in suite_names()}
    return {"evaluations": len(pairs), "suite": suite, "mazes": mazes}


def print_report(results: list[dict], effect: dict, arms: list[str], budgets: list[int]) -> None:
    print_table([[r["arm"], r["seed"], f"{b:,}", f"{r['budgets'][b]['env_steps']:,}", r["budgets"][b]["suite_450"],
                  r["budgets"][b]["suite_250"], round(r["budgets"][b]["suite_450"] - r["budgets"][b]["suite_250"], 3),
                  *(r["budgets"][b][s] for s in GENERATED_SETS)]
                 for r in results for b in budgets if b in r["budgets"]],
                ["arm", "seed", "trained", "env steps", "suite@450", "suite@250", "450 - 250", *GENERATED_SETS],
                title="each run at each budget: the suite at DCD's test limit and at the training limit")
    print()
    print_table([[a, fmt_ci(ci_summary([r["trained_share"] for r in results if r["arm"] == a
                                        and budgets[-1] in r["budgets"]])),
                  *(fmt_ci(ci_summary([r["budgets"][b]["suite_450"] for r in results
                                       if r["arm"] == a and b in r["budgets"]])) for b in budgets)]
                 for a in arms],
                ["arm", "trained share (finished runs)", *(f"suite@450, {b / 1e6:g}M" for b in budgets)],
                title="per arm, mean ± 95% CI over seeds")
    print()
    print_table([[m, fmt_ci(effect["mazes"][m]["450"], ".2f"), fmt_ci(effect["mazes"][m]["250"], ".2f"),
                  fmt_ci(effect["mazes"][m]["difference"], ".3f")] for m in suite_names()]
                + [["suite", fmt_ci(effect["suite"]["450"]), fmt_ci(effect["suite"]["250"]),
                    fmt_ci(effect["suite"]["difference"])]],
                ["maze", "at 450", "at 250", "450 - 250 (paired)"],
                title=f"the limit's effect over all {effect['evaluations']} evaluations (runs x budgets)")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = Path(args.out_dir)
    if args.analyse:
        spec = yaml.safe_load((out / "sweep.yaml").read_text())
    else:
        spec = load_sweep("curriculum_pilot")
        run_sweep(spec, out, args.parallel)
    arms, budgets = list(spec["arms"]), list(spec["budgets"])
    names = budget_names(spec, budgets)
    results = [run_result(trial_dir(out, arm, seed), arm, seed, names)
               for seed in spec["seeds"] for arm in arms if trial_dir(out, arm, seed).exists()]
    effect = limit_effect(results)
    print_report(results, effect, arms, budgets)
    write_json(args.json, {"results": {"spec": spec, "runs": results, "limit_effect": effect}},
               benchmark="curriculum_pilot")
    return 0


if __name__ == "__main__":
    sys.exit(main())
