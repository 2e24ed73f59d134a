"""Domain randomisation, PLR and Robust PLR (PLR⊥) on an unbounded MiniGrid level space, the same budget and seeds.

    python -m benchmarks.robust_plr                    # DoorKey-6x6, 1M env steps, seeds 0-4 (~1 h on 2 cores)
    python -m benchmarks.robust_plr [--env ENV] [--total-steps N] [--seeds 0,1,2,3,4] [--parallel 2]
        [--buffer-size 500] [--arms dr,plr,robust] [--eval-episodes 100] [--eval-interval 100]
        [--threshold 0.5] [--quick] [--out-dir DIR] [--json PATH] [-- extra levelray train flags]

Protocol (Jiang et al., "Replay-Guided Adversarial Environment Design", 2021): every run trains on the whole
level space (`--num-levels 0`: any seed), so there is no training set to overfit; held-out levels are fresh
random seeds (`levelray evaluate --levels test`; with ~10^4 levels played out of 2^31, a test seed was trained
on with probability ~10^-5). Three arms, differing only in their level keys, run as the sweep
`benchmarks/sweeps/robust_plr.yaml` (`levelray sweep`: each run a Ray Tune trial on the inline backend, two at a
time, one torch thread each; the flags below override the spec's values):

- `dr`: domain randomisation, a fresh random level every episode (`levels.strategy random`);
- `plr`: PLR with a level buffer, gradient on every level; DCD's settings for its maze runs
  (`positive_value_loss` scores, rank transform, temperature 0.3, staleness 0.3, replay probability 0.5), with
  the buffer scaled to the budget (`--buffer-size`, default 500: DCD's 4000 belongs to 250M steps, and a buffer
  that does not fill within the run would leave PLR replaying almost nothing);
- `robust`: the same with `levels.robust` (PLR⊥: new levels are played to be scored, never trained on).

Per arm: mean and 95% Student-t interval over seeds of held-out return and success (final evaluation of
`--eval-episodes` sampled episodes), steps until a periodic held-out evaluation first reached `--threshold`
success, and the fraction of steps that carried gradient; per pair of arms the paired difference (same seed)
of held-out success. Prints tables, writes JSON, and `levelray report` of the sweep (its arms side by side) into
`OUT/report/`. Running it again with the same `--out-dir` continues a stopped sweep (`levelray sweep --resume`).
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
    pairwise,
    print_table,
    run_levelray,
    run_sweep,
    steps_to_threshold,
    train_flags_config,
    write_json,
)
from benchmarks.plr_vs_uniform import arm_summary
from levelray.deploy.report.stats import ci_summary

SPEC = ROOT / "benchmarks" / "sweeps" / "robust_plr.yaml"
# DCD's published MiniGrid maze results (25 blocks, 250M steps, zero-shot solved rate): the ordering to compare
DCD_SOLVED = {"dr": 0.43, "plr": 0.59, "robust": 0.68}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="minigrid:DoorKey-6x6")
    p.add_argument("--total-steps", type=int, default=1_000_000)
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--buffer-size", type=int, default=500)
    p.add_argument("--arms", default="dr,plr,robust", help="arms of the spec to run")
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--eval-interval", type=int, default=100, help="learner updates between held-out evaluations")
    p.add_argument("--threshold", type=float, default=0.5, help="held-out success for 'steps to threshold'")
    p.add_argument("--quick", action="store_true", help="a smoke test: 20k steps, 8 episodes, seeds 0,1")
    p.add_argument("--out-dir", default=None, help="the sweep's directory (default: a fresh benchmarks/out/robust_plr)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "robust_plr.json"))
    p.add_argument("train_args", nargs="*", help="extra `levelray train` flags, after --")
    return p.parse_args(argv)


def sweep_spec(args: argparse.Namespace, arms: list[str], seeds: list[int]) -> dict:
    """benchmarks/sweeps/robust_plr.yaml with this run's flags laid over it."""
    import yaml

    from levelray.deploy.sweep.spec import merge_config

    spec = yaml.safe_load(SPEC.read_text())
    base = merge_config(spec["base"], {"env": {"id": args.env}, "total_steps": args.total_steps,
                                  "levels": {"buffer_size": args.buffer_size},
                                  "eval": {"interval_updates": args.eval_interval}})
    return {**spec, "base": merge_config(base, train_flags_config(args.train_args)),
            "arms": {a: spec["arms"][a] for a in arms}, "baseline": "dr" if "dr" in arms else arms[0],
            "seeds": seeds, "evaluate": {"levels": "test", "episodes": args.eval_episodes}}


def trial_result(trial: dict, threshold: float) -> dict:
    """One run's numbers, from its run directory (`run_sweep`'s trial)."""
    records, last = trial["records"], trial["records"][-1]
    test = trial["evaluation"]["results"]["test"]
    return {
        "arm": trial["arm"], "seed": trial["seed"], "run_dir": trial["run_dir"], "env_steps": last["env_steps"],
        "train_wall_s": last["elapsed_s"], "samples_trained": last["samples_trained"],
        "trained_fraction": last["samples_trained"] / last["env_steps"], "learner_version": last["learner_version"],
        "levels_buffered": last.get("levels_buffered"), "levels_evicted": last.get("levels_evicted"),
        "training_return_last100": last.get("episode_return_mean"), "test_return": test["return_mean"],
        "test_success": test["success_rate"],
        "steps_to_threshold": steps_to_threshold(records, threshold, held_out=True),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.quick:
        args.total_steps, args.eval_episodes, args.seeds, args.eval_interval = 20_000, 8, "0,1", 10
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    out = Path(args.out_dir) if args.out_dir else ROOT / "benchmarks" / "out" / "robust_plr"
    if out.exists() and not args.out_dir:
        shutil.rmtree(out)
    spec = sweep_spec(args, arms, seeds)
    started = time.time()
    sweep = run_sweep(spec, out, args.parallel)
    wall_s = time.time() - started
    results = [trial_result(t, args.threshold) for t in sweep["trials"]]
    run_levelray([*LEVELRAY, "report", str(out), "--out", str(out / "report")], out.parent / f"{out.name}-report.log")
    summary = {a: arm_summary([r for r in results if r["arm"] == a], args.total_steps) for a in arms}
    for a in arms:
        summary[a]["trained_fraction"] = ci_summary([r["trained_fraction"] for r in results if r["arm"] == a])
    pairs = pairwise(results, arms, "test_success", sweep, "test.success_rate")
    print(f"\n{args.env}, unbounded levels, {args.total_steps:,} env steps per run, seeds {seeds}, buffer "
          f"{args.buffer_size}, {args.parallel} runs at a time, {wall_s / 60:.1f} min in all")
    print_table([[r["arm"], r["seed"], f"{r['env_steps']:,}", round(r["train_wall_s"]), round(r["trained_fraction"], 3),
                  r["test_return"], r["test_success"], r["steps_to_threshold"] or "never"] for r in results],
                ["arm", "seed", "env steps", "train s", "trained fraction", "test return", "test success",
                 f"steps to test success {args.threshold}"])
    print("\nmean ± 95% CI (Student t over seeds)")
    print_table([[a, s["n"], fmt_ci(s.get("test_return")), fmt_ci(s.get("test_success")),
                  fmt_ci(s["trained_fraction"]), f"{fmt_ci(s.get('steps_to_threshold'), ',.0f')} "
                  f"({s.get('steps_to_threshold', {}).get('reached', 0)}/{s['n']} reached)", DCD_SOLVED.get(a)]
                 for a, s in summary.items()],
                ["arm", "seeds", "test return", "test success", "trained fraction", "steps to threshold",
                 "DCD solved rate (mazes, 250M)"])
    print("\npaired difference of test success (same seed)")
    print_table([[k, fmt_ci(v)] for k, v in pairs.items()], ["arms", "difference"])
    write_json(args.json, {"results": {"env": args.env, "total_steps": args.total_steps, "seeds": seeds,
                                       "buffer_size": args.buffer_size, "wall_s": wall_s, "spec": spec,
                                       "arms": summary, "paired_test_success": pairs, "runs": results,
                                       "dcd_solved": DCD_SOLVED}},
               benchmark="robust_plr")
    return 0


if __name__ == "__main__":
    sys.exit(main())
