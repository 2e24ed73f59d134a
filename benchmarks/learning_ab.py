"""Does a flag change what is learned? Two or more arms that differ only in one `levelray train` flag, several
seeds per arm, the same env-step budget, held-out evaluation.

    python -m benchmarks.learning_ab --flag=FLAG --arms A,B [--group-by CONFIG.KEY] [--quick] [--seeds 5]
                                     [--families minigrid,cartpole] [--parallel 1]
                                     [--out-dir DIR] [--json PATH] [-- extra levelray train flags for every arm]

    # the model loss: python -m benchmarks.model_loss_benefit, the same as
    python -m benchmarks.learning_ab --flag=--model-loss --arms none,muzero --group-by model_loss.loss
    # bf16 against fp32
    python -m benchmarks.learning_ab --flag=--precision --arms fp32,bf16 --group-by learner.precision --seeds 10

Per family, the arms differ only in `FLAG ARM`; every other key is the family's preset, and each seed s is
`seed: s` for every arm. Each family is one sweep (`levelray sweep`: each run a Ray Tune trial on the inline
backend with one torch thread, `--parallel` at a time), written to OUT/<family>.yaml: every run the same env-step
budget, then `levelray evaluate` of its final checkpoint (the spec's `evaluate`):

- minigrid: `minigrid:DoorKey-5x5`, training levels 0-199, evaluated on training levels and on held-out seeds
  (`levels: train,test`); success is MiniGrid's (reached the goal). Threshold: training return 0.8.
- cartpole: `CartPole-v1` (no level set: `test` is fresh seeds); success is an episode return >= 475,
  threshold the same.

The specs of the tables in benchmarks/RESULTS.md are in benchmarks/sweeps/ (`model_loss_benefit_<family>.yaml`,
`bf16_<family>.yaml`): what this script writes for their commands.

Reported per arm: mean and 95% Student-t CI over seeds (`deploy.report.stats.mean_ci`) of the test return, the test
success rate and the final training return (last 100 episodes); steps to threshold is the first `env_steps`
in `metrics.jsonl`, once 100 episodes have finished, at which the training return (mean of the last 100
episodes) reached the threshold, with the number of seeds that reached it (the mean and CI are over those seeds
only: a seed that never got there is counted in `reached`, not averaged in as the budget). The arms share
seeds, so each later arm is also compared with the first one seed by seed: the paired difference of the test
return and the test success, mean and 95% CI. `levelray report --group-by CONFIG.KEY` of each family's sweep draws
the arms as mean curves with t-bands into OUT/<family>/report/. Prints the tables and writes JSON.

A run of 5 seeds (minigrid 400k and cartpole 300k env steps per run) took 30-60 min for the model loss's two arms
on the quiet 2-core machine (RESULTS.md); it needs the machine to itself (the arms must see the same CPU).
`--quick` is a smoke run of the pipeline (2 seeds, a few thousand steps): its numbers say nothing about the arms.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from benchmarks.common import (
    LEVELRAY,
    ROOT,
    fmt_ci,
    paired,
    print_table,
    run_levelray,
    run_sweep,
    steps_to_threshold,
    train_flags_config,
    write_json,
)
from levelray.deploy.report.stats import ci_summary

# Each family's base config (a spec's `base`, its `total_steps` apart), level sets, budgets, threshold for steps to
# threshold (training return) and the return that counts as a success where the env has no success of its own
FAMILIES = {
    "minigrid": {"base": {"env": {"id": "minigrid:DoorKey-5x5", "num_levels": 200, "start_level": 0}},
                 "levels": "train,test", "steps": 400_000, "quick_steps": 4_000, "threshold": 0.8,
                 "success_return": None},
    "cartpole": {"base": {"env": {"id": "CartPole-v1"}}, "levels": "test", "steps": 300_000, "quick_steps": 4_000,
                 "threshold": 475.0, "success_return": 475.0},
}


def sweep_spec(args: argparse.Namespace, family: str, total: int, seeds: int, episodes: int) -> dict:
    """One family's sweep: the arms `FLAG ARM` over the family's base, `seeds` seeds each."""
    from levelray.deploy.sweep.spec import merge_config

    fam = FAMILIES[family]
    base = {**fam["base"], "total_steps": total, "report_interval_s": 1, "tensorboard": False}
    if args.quick:
        base["actors"] = {"num_actors": 1, "envs_per_actor": 4}
    return {"name": f"{args.name}-{family}", "base": merge_config(base, train_flags_config(args.train_args)),
            "arms": {arm: train_flags_config([args.flag, arm]) for arm in args.arms}, "baseline": args.arms[0],
            "seeds": list(range(seeds)), "evaluate": {"levels": fam["levels"], "episodes": episodes}}


def trial_result(trial: dict, family: str) -> dict:
    """One run's numbers, from its run directory (`run_sweep`'s trial)."""
    fam, records, ev = FAMILIES[family], trial["records"], trial["evaluation"]
    test = ev["results"]["test"]
    if fam["success_return"] is not None:
        success = sum(r >= fam["success_return"] for r in test["returns"]) / len(test["returns"])
    else:
        success = test["success_rate"]
    last = records[-1]
    return {
        "family": family, "arm": trial["arm"], "seed": trial["seed"], "run_dir": trial["run_dir"],
        "env_steps": last["env_steps"], "train_wall_s": last["elapsed_s"],
        "training_return_last100": last.get("episode_return_mean"),
        "test_return": test["return_mean"], "test_success": success,
        "train_levels_return": ev["results"]["train"]["return_mean"] if "train" in ev["results"] else None,
        "held_out": ev.get("held_out"), "steps_to_threshold": steps_to_threshold(records, fam["threshold"]),
        "model_value_loss_last": last.get("learner_model_value_loss"),
    }


def summarise(runs: list[dict], family: str, arm: str) -> dict:
    mine = [r for r in runs if r["family"] == family and r["arm"] == arm]
    reached = [r["steps_to_threshold"] for r in mine if r["steps_to_threshold"] is not None]
    return {
        "family": family, "arm": arm, "seeds": len(mine),
        "test_return": ci_summary([r["test_return"] for r in mine]),
        "test_success": ci_summary([r["test_success"] for r in mine]),
        "training_return": ci_summary([r["training_return_last100"] for r in mine]),
        "steps_to_threshold": ci_summary([float(s) for s in reached]),
        "reached_threshold": len(reached),
        "train_wall_s": ci_summary([r["train_wall_s"] for r in mine]),
    }


def parse(argv: list[str] | None, defaults: dict | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--flag", help="the `levelray train` flag the arms set, e.g. --precision")
    p.add_argument("--arms", help="the flag's value in each arm, comma-separated; the first is the baseline")
    p.add_argument("--group-by", help="the config key the flag sets, for `levelray report --group-by`")
    p.add_argument("--name", default="learning_ab", help="names the default --out-dir and --json")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 seeds, 4000 steps, 1 actor x 4 envs")
    p.add_argument("--seeds", type=int, default=None, help="seeds per arm (default 5; 2 --quick)")
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--total-steps", type=int, default=None, help="env steps per run (default: per family)")
    p.add_argument("--eval-episodes", type=int, default=None, help="episodes per level set (default 50; 4 --quick)")
    p.add_argument("--parallel", type=int, default=1,
                   help="runs at once, each with one torch thread (inline runs are synchronous, so this changes "
                        "wall time, not what is learned)")
    p.add_argument("--out-dir", default=None, help="the sweeps' directory, one per family (default: a fresh "
                                                   "benchmarks/out/NAME)")
    p.add_argument("--json", default=None, help="default: benchmarks/out/NAME.json")
    p.add_argument("train_args", nargs="*", help="extra `levelray train` flags for every arm, after --")
    p.set_defaults(**(defaults or {}))
    args = p.parse_args(argv)
    missing = [f"--{k.replace('_', '-')}" for k in ("flag", "arms", "group_by") if not getattr(args, k)]
    if missing:
        p.error(f"{', '.join(missing)} required (e.g. --flag=--precision --arms fp32,bf16 "
                "--group-by learner.precision)")
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if len(args.arms) < 2 or len(set(args.arms)) != len(args.arms):
        p.error(f"--arms: two or more distinct values, comma-separated; got {args.arms}")
    args.families = [f.strip() for f in args.families.split(",") if f.strip()]
    unknown = [f for f in args.families if f not in FAMILIES]
    if unknown:
        p.error(f"--families: unknown {', '.join(unknown)}; expected some of {', '.join(FAMILIES)}")
    return args


def main(argv: list[str] | None = None, defaults: dict | None = None) -> int:
    """Run the comparison; `defaults` presets arguments (`benchmarks.model_loss_benefit` sets the flag)."""
    args = parse(argv, defaults)
    arms, families = args.arms, args.families

    seeds = args.seeds or (2 if args.quick else 5)
    episodes = args.eval_episodes or (4 if args.quick else 50)
    out = Path(args.out_dir) if args.out_dir else ROOT / "benchmarks" / "out" / args.name
    if out.exists() and not args.out_dir:
        shutil.rmtree(out)
    runs, budgets, sweeps = [], {}, {}
    start = time.time()
    for family in families:
        total = args.total_steps or (FAMILIES[family]["quick_steps"] if args.quick else FAMILIES[family]["steps"])
        budgets[family] = total
        spec = sweep_spec(args, family, total, seeds, episodes)
        sweeps[family] = run_sweep(spec, out / family, max(1, args.parallel))
        runs += [trial_result(t, family) for t in sweeps[family]["trials"]]
        run_levelray([*LEVELRAY, "report", str(out / family), "--group-by", args.group_by, "--out",
                      str(out / family / "report")], out / f"{family}-report.log")

    summary = [summarise(runs, f, a) for f in families for a in arms]
    rows = [[s["family"], s["arm"], s["seeds"], f"{budgets[s['family']]:,}", fmt_ci(s["test_return"]),
             fmt_ci(s["test_success"], ".2f"), fmt_ci(s["training_return"]),
             f"{fmt_ci(s['steps_to_threshold'], ',.0f')} ({s['reached_threshold']}/{s['seeds']})",
             fmt_ci(s["train_wall_s"], ".0f")] for s in summary]
    print(f"\n{args.flag} {' vs '.join(arms)}, inline backend, {seeds} seeds per arm, {episodes} evaluation "
          f"episodes per level set; mean ± 95% t-CI over seeds; {time.time() - start:.0f} s in all")
    print_table(rows, ["family", args.flag, "seeds", "env steps", "test return", "test success",
                       "train return (last 100)", "steps to threshold (reached)", "train s"])
    if args.quick:
        print("note: --quick is a smoke run of the pipeline; its numbers say nothing about the arms")
    # the sweep's own paired differences from its baseline (arms[0]), but for a success the env does not report
    success = {f: "test.success_rate" if FAMILIES[f]["success_return"] is None else None for f in families}
    pairs = [{"family": f, "arms": f"{b} - {arms[0]}",
              "test_return": paired(mine, arms[0], b, "test_return", sweeps[f], "test.return_mean"),
              "test_success": paired(mine, arms[0], b, "test_success", sweeps[f], success[f])}
             for f in families for mine in [[r for r in runs if r["family"] == f]] for b in arms[1:]]
    print("\npaired difference (same seed), mean ± 95% t-CI")
    print_table([[d["family"], d["arms"], d["test_return"]["n"], fmt_ci(d["test_return"]),
                  fmt_ci(d["test_success"], ".2f")] for d in pairs],
                ["family", "arms", "seeds", "test return", "test success"])
    data = {"flag": args.flag, "arms": arms, "backend": "inline", "seeds": seeds, "eval_episodes": episodes,
            "budgets": budgets,
            "thresholds": {f: FAMILIES[f]["threshold"] for f in families}, "quick": args.quick,
            "train_args": args.train_args, "summary": summary, "paired": pairs, "runs": runs}
    write_json(args.json or ROOT / "benchmarks" / "out" / f"{args.name}.json", {"results": data},
               benchmark=args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
