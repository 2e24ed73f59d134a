"""Domain randomisation, Robust PLR (PLR⊥) and ACCEL on `maze:13x13`, tested zero-shot on the hand-designed suite.

    python -m benchmarks.accel_maze                    # 5M env steps per run, seeds 0-2, two runs at a time
    python -m benchmarks.accel_maze [--total-steps N] [--seeds 0,1,2] [--parallel 2] [--arms dr,robust,accel]
        [--buffer-size 1000] [--eval-episodes 50] [--quick] [--out-dir DIR] [--json PATH] [-- train flags]

The arms are DCD's MiniGrid comparison of ACCEL (Parker-Holder et al. 2022, `facebookresearch/dcd`'s
`60_blocks_uniform` configs) over the unbounded level space (`num_levels: 0`), differing only in their level keys,
and run as the sweep `benchmarks/sweeps/accel_maze.yaml` (`levelray sweep`: each run a Ray Tune trial on the inline
backend, two at a time, one torch thread each; the flags below override the spec's values):

- `dr`: domain randomisation, a fresh level with 0-60 walls every episode (`levels.strategy random`);
- `robust`: PLR⊥ on the same generator, DCD's settings (`positive_value_loss`, rank, temperature 0.3,
  staleness 0.3, rho 0.5, replay probability 0.5, `levels.robust`);
- `accel`: ACCEL from empty rooms (`env.maze_blocks 0`): the same PLR⊥ with DCD's ACCEL replay probability 0.8 and
  the editor (`levels.editor accel`, 5 edits a child).

The buffer is `--buffer-size` levels in every arm (DCD's 4,000 belongs to its ~160M-step runs). After training, the
sweep's two evaluations play `--eval-episodes` sampled episodes per suite maze (`maze-suite`, each maze its own
level set) and, as the evaluation named `generated`, 4x that on fresh generated levels with 25 and 50 walls.

Per arm: the suite's solved rate (the mean over mazes of each maze's success rate) as mean and 95% Student-t
interval over seeds, each maze's rate, the generated sets, the fraction of steps trained on, and the buffer's
complexity (`levels_mean_walls`, `levels_mean_path_length`) at ten points of the run; per pair of arms the paired
difference (same seed) of the suite's solved rate. The sweep's directory is `--out-dir`: running the benchmark
again with the same spec continues it (`levelray sweep --resume`: finished runs are kept).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmarks.common import (
    ROOT,
    fmt_ci,
    load_sweep,
    pairwise,
    print_table,
    read_evaluation,
    run_sweep,
    train_flags_config,
    write_json,
)
from levelray.deploy.report.stats import ci_summary
from levelray.families.maze.level import suite_names

# DCD's published zero-shot solved rates on its held-out mazes (ACCEL paper, 0-60 blocks, 20k updates, 5 seeds)
DCD_SOLVED = {"dr": 0.62, "robust": 0.71, "accel": 0.875}
GENERATED = "generated"  # the spec's evaluation of fresh generated mazes
GENERATED_SETS = ("maze-25", "maze-50")
CURVE_POINTS = 10


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="maze:13x13")
    p.add_argument("--total-steps", type=int, default=5_000_000)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--buffer-size", type=int, default=1000)
    p.add_argument("--arms", default=",".join(DCD_SOLVED), help="arms of the spec to run")
    p.add_argument("--eval-episodes", type=int, default=50, help="sampled episodes per suite maze")
    p.add_argument("--quick", action="store_true", help="a smoke test: 20k steps, 4 episodes, seed 0")
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out" / "accel_maze"))
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "accel_maze.json"))
    p.add_argument("train_args", nargs="*", help="extra `levelray train` flags, after --")
    args = p.parse_args(argv)
    if unknown := [a for a in args.arms.split(",") if a.strip() and a.strip() not in DCD_SOLVED]:
        p.error(f"--arms: unknown {', '.join(unknown)}; the spec's arms are {', '.join(DCD_SOLVED)}")
    return args


def sweep_spec(args: argparse.Namespace, arms: list[str], seeds: list[int]) -> dict:
    """benchmarks/sweeps/accel_maze.yaml with this run's flags laid over it."""
    from levelray.deploy.sweep.spec import merge_config

    spec = load_sweep("accel_maze")
    base = merge_config(spec["base"], {"env": {"id": args.env}, "total_steps": args.total_steps,
                                       "levels": {"buffer_size": args.buffer_size}})
    return {**spec, "base": merge_config(base, train_flags_config(args.train_args)),
            "arms": {a: spec["arms"][a] for a in arms}, "baseline": "dr" if "dr" in arms else arms[0], "seeds": seeds,
            "evaluate": [{"levels": "maze-suite", "episodes": args.eval_episodes},
                         {"levels": ",".join(GENERATED_SETS), "episodes": 4 * args.eval_episodes, "name": GENERATED}]}


def curve_records(records: list[dict], key: str) -> list[dict]:
    """`CURVE_POINTS` evenly spaced records among those that hold `key` (the last one among them)."""
    kept = [r for r in records if r.get(key) is not None]
    step = max(1, len(kept) // CURVE_POINTS)
    return kept[step - 1::step][-CURVE_POINTS:]


def complexity_curve(records: list[dict], x: str = "env_steps") -> list[dict]:
    """`CURVE_POINTS` evenly spaced records of the buffer's complexity: the counter `x` (env steps, or
    samples_trained), mean walls and path length."""
    return [{x: r[x], "walls": r["levels_mean_walls"],
             "path_length": r.get("levels_mean_path_length"), "edited": r.get("levels_edited")}
            for r in curve_records(records, "levels_mean_walls")]


def print_complexity(results: list[dict], arms: list[str], x: str | None = None) -> None:
    """Each arm's `complexity` curve, seed mean, a point per tenth: "walls/path", after the mean of counter `x`
    in millions when given."""
    for a in arms:
        curves = [r["complexity"] for r in results if r["arm"] == a and r["complexity"]]
        if curves:
            n = len(curves)
            points = [(f"{sum(c[i][x] for c in curves) / n / 1e6:.1f}M " if x else "")
                      + f"{sum(c[i]['walls'] for c in curves) / n:.1f}/"
                      f"{sum(c[i]['path_length'] or 0 for c in curves) / n:.1f}"
                      for i in range(min(len(c) for c in curves))]
            print(f"{a:>7}: " + "  ".join(points))


def trial_result(trial: dict) -> dict:
    """One run's numbers, from its run directory (`run_sweep`'s trial)."""
    records, ev = trial["records"], trial["evaluation"]
    generated, last = read_evaluation(trial, GENERATED), trial["records"][-1]
    return {
        "arm": trial["arm"], "seed": trial["seed"], "run_dir": trial["run_dir"], "env_steps": last["env_steps"],
        "train_wall_s": last["elapsed_s"], "samples_trained": last["samples_trained"],
        "trained_fraction": last["samples_trained"] / last["env_steps"],
        "training_return_last100": last.get("episode_return_mean"), "levels_edited": last.get("levels_edited"),
        "suite_solved": ev["maze_suite"]["success_rate"],
        "mazes": {name: ev["results"][name]["success_rate"] for name in ev["maze_suite"]["mazes"]},
        **{s: generated["results"][s]["success_rate"] for s in GENERATED_SETS},
        "complexity": complexity_curve(records),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.quick:
        args.total_steps, args.eval_episodes, args.seeds = 20_000, 4, "0"
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    spec = sweep_spec(args, arms, seeds)
    started = time.time()
    sweep = run_sweep(spec, Path(args.out_dir), args.parallel)
    results = [trial_result(t) for t in sweep["trials"]]
    wall_s = time.time() - started
    summary = {a: {key: ci_summary([r[key] for r in results if r["arm"] == a])
                   for key in ("suite_solved", *GENERATED_SETS, "trained_fraction", "train_wall_s")} for a in arms}
    pairs = pairwise(results, arms, "suite_solved", sweep, "maze-suite.success_rate")
    mazes = suite_names()
    print(f"\n{args.env}, {args.total_steps:,} env steps per run, seeds {seeds}, buffer {args.buffer_size}, "
          f"{args.parallel} runs at a time, {wall_s / 60:.1f} min in all")
    print_table([[r["arm"], r["seed"], round(r["train_wall_s"]), round(r["trained_fraction"], 3),
                  r["levels_edited"], r["suite_solved"], *(r[s] for s in GENERATED_SETS)] for r in results],
                ["arm", "seed", "train s", "trained fraction", "edited", "suite solved", *GENERATED_SETS])
    print("\nmean ± 95% CI (Student t over seeds)")
    print_table([[a, s["suite_solved"]["n"], fmt_ci(s["suite_solved"]), *(fmt_ci(s[g]) for g in GENERATED_SETS),
                  fmt_ci(s["trained_fraction"]), DCD_SOLVED[a]] for a, s in summary.items()],
                ["arm", "seeds", "suite solved", *GENERATED_SETS, "trained fraction", "DCD solved (its mazes)"])
    print("\neach suite maze: success rate, mean over seeds")
    print_table([[m, *(sum(r["mazes"][m] for r in results if r["arm"] == a) / max(1, summary[a]["suite_solved"]["n"])
                       for a in arms)] for m in mazes], ["maze", *arms])
    print("\nthe buffer's complexity (mean walls / mean shortest path), seed mean, at the run's tenths")
    print_complexity(results, arms)
    print("\npaired difference of the suite's solved rate (same seed)")
    print_table([[k, fmt_ci(v)] for k, v in pairs.items()], ["arms", "difference"])
    write_json(args.json, {"results": {"env": args.env, "total_steps": args.total_steps, "seeds": seeds,
                                       "buffer_size": args.buffer_size, "wall_s": wall_s, "spec": spec,
                                       "arms": summary, "paired_suite_solved": pairs, "runs": results,
                                       "dcd_solved": DCD_SOLVED}},
               benchmark="accel_maze")
    return 0


if __name__ == "__main__":
    sys.exit(main())
