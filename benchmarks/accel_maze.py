"""Domain randomisation, Robust PLR (PLR⊥) and ACCEL on `maze:13x13`, tested zero-shot on the hand-designed suite.

    python -m benchmarks.accel_maze                    # 5M env steps per run, seeds 0-2, two runs at a time
    python -m benchmarks.accel_maze [--total-steps N] [--seeds 0,1,2] [--parallel 2] [--arms dr,robust,accel]
        [--buffer-size 1000] [--eval-episodes 50] [--quick] [--out-dir DIR] [--json PATH] [-- train flags]

The arms are DCD's MiniGrid comparison of ACCEL (Parker-Holder et al. 2022, `facebookresearch/dcd`'s
`60_blocks_uniform` configs), each a `levelray train` subprocess on the inline backend over the unbounded level
space (`--num-levels 0`), differing only in their level flags:

- `dr`: domain randomisation, a fresh level with 0-60 walls every episode (`--level-strategy random`);
- `robust`: PLR⊥ on the same generator, DCD's settings (`positive_value_loss`, rank, temperature 0.3,
  staleness 0.3, rho 0.5, replay probability 0.5, `--level-robust`);
- `accel`: ACCEL from empty rooms (`--maze-blocks 0`): the same PLR⊥ with DCD's ACCEL replay probability 0.8 and
  the editor (`--level-editor accel`, 5 edits a child).

The buffer is `--buffer-size` levels in every arm (DCD's 4,000 belongs to its ~160M-step runs). After training,
`levelray evaluate --levels maze-suite,maze-25,maze-50` plays `--eval-episodes` sampled episodes per suite maze
(each its own level set) and 4x that on fresh generated levels with 25 and 50 walls.

Per arm: the suite's solved rate (the mean over mazes of each maze's success rate) as mean and 95% Student-t
interval over seeds, each maze's rate, the generated sets, the fraction of steps trained on, and the buffer's
complexity (`levels_mean_walls`, `levels_mean_path_length`) at ten points of the run; per pair of arms the paired
difference (same seed) of the suite's solved rate. A run whose `result.json` is already in the output folder
is read, not run again, so arms can be added to a finished comparison.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.common import (
    LEVELRAY,
    ROOT,
    fmt_ci,
    pairwise,
    print_table,
    run_arms,
    run_levelray,
    write_json,
)
from levelray.contracts.maze import suite_names
from levelray.deploy.report.stats import ci_summary

DCD_PLR = ["--level-strategy", "positive_value_loss", "--level-score-transform", "rank", "--level-temperature", "0.3",
           "--level-staleness-coef", "0.3", "--level-rho", "0.5", "--level-robust"]
ARMS = {
    "dr": ["--maze-blocks", "0-60", "--level-strategy", "random"],
    "robust": ["--maze-blocks", "0-60", *DCD_PLR, "--level-replay-prob", "0.5"],
    "accel": ["--maze-blocks", "0", *DCD_PLR, "--level-replay-prob", "0.8", "--level-editor", "accel",
              "--level-num-edits", "5"],
}
# DCD's published zero-shot solved rates on its held-out mazes (ACCEL paper, 0-60 blocks, 20k updates, 5 seeds)
DCD_SOLVED = {"dr": 0.62, "robust": 0.71, "accel": 0.875}
GENERATED_SETS = ("maze-25", "maze-50")
CURVE_POINTS = 10


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="maze:13x13")
    p.add_argument("--total-steps", type=int, default=5_000_000)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--buffer-size", type=int, default=1000)
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--eval-episodes", type=int, default=50, help="sampled episodes per suite maze")
    p.add_argument("--quick", action="store_true", help="a smoke test: 20k steps, 4 episodes, seed 0")
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out" / "accel_maze"))
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "accel_maze.json"))
    p.add_argument("train_args", nargs="*", help="extra `levelray train` flags, after --")
    return p.parse_args(argv)


def complexity_curve(records: list[dict]) -> list[dict]:
    """`CURVE_POINTS` evenly spaced records of the buffer's complexity: env steps, mean walls and path length."""
    kept = [r for r in records if r.get("levels_mean_walls") is not None]
    if not kept:
        return []
    step = max(1, len(kept) // CURVE_POINTS)
    picks = kept[step - 1::step][-CURVE_POINTS:]
    return [{"env_steps": r["env_steps"], "walls": r["levels_mean_walls"],
             "path_length": r.get("levels_mean_path_length"), "edited": r.get("levels_edited")} for r in picks]


def one_run(args: argparse.Namespace, common: list[str], out: Path, arm: str, seed: int) -> dict:
    name = f"{arm}-seed{seed}"
    run = out / name
    cached = run / "result.json"
    if cached.exists():
        return json.loads(cached.read_text())
    start = time.time()
    run_levelray([*LEVELRAY, "train", *common, *ARMS[arm], "--seed", str(seed), "--run-dir", str(run)],
                 out / f"train-{name}.log")
    train_s = time.time() - start
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    last = records[-1]
    ev = json.loads(run_levelray([*LEVELRAY, "evaluate", str(run), "--levels", "maze-suite", "--episodes",
                                  str(args.eval_episodes), "--seed", str(seed), "--json", "--backend", "inline"],
                                 out / f"evaluate-{name}.log").strip().splitlines()[-1])
    generated = json.loads(run_levelray([*LEVELRAY, "evaluate", str(run), "--levels", ",".join(GENERATED_SETS),
                                         "--episodes", str(4 * args.eval_episodes), "--seed", str(seed), "--json",
                                         "--backend", "inline"], out / f"evaluate-generated-{name}.log")
                           .strip().splitlines()[-1])
    result = {
        "arm": arm, "seed": seed, "run_dir": str(run), "env_steps": last["env_steps"], "train_wall_s": train_s,
        "samples_trained": last["samples_trained"], "trained_fraction": last["samples_trained"] / last["env_steps"],
        "training_return_last100": last.get("episode_return_mean"), "levels_edited": last.get("levels_edited"),
        "suite_solved": ev["maze_suite"]["success_rate"],
        "mazes": {name: ev["results"][name]["success_rate"] for name in ev["maze_suite"]["mazes"]},
        **{s: generated["results"][s]["success_rate"] for s in GENERATED_SETS},
        "complexity": complexity_curve(records),
    }
    cached.write_text(json.dumps(result, indent=2))
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.quick:
        args.total_steps, args.eval_episodes, args.seeds = 20_000, 4, "0"
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    common = ["--backend", "inline", "--env", args.env, "--num-levels", "0", "--total-steps", str(args.total_steps),
              "--level-buffer-size", str(args.buffer_size), "--metrics-port", "0", "--report-interval", "10",
              "--quiet", "--tensorboard", "false", *args.train_args]
    results, wall_s = run_arms(arms, seeds, args.parallel,
                               lambda arm, seed: one_run(args, common, out, arm, seed))
    summary = {a: {key: ci_summary([r[key] for r in results if r["arm"] == a])
                   for key in ("suite_solved", *GENERATED_SETS, "trained_fraction", "train_wall_s")} for a in arms}
    pairs = pairwise(results, arms, "suite_solved")
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
    for a in arms:
        curves = [r["complexity"] for r in results if r["arm"] == a and r["complexity"]]
        if curves:
            points = min(len(c) for c in curves)
            print(f"{a:>7}: " + "  ".join(
                f"{sum(c[i]['walls'] for c in curves) / len(curves):.1f}/"
                f"{sum(c[i]['path_length'] or 0 for c in curves) / len(curves):.1f}" for i in range(points)))
    print("\npaired difference of the suite's solved rate (same seed)")
    print_table([[k, fmt_ci(v)] for k, v in pairs.items()], ["arms", "difference"])
    write_json(args.json, {"results": {"env": args.env, "total_steps": args.total_steps, "seeds": seeds,
                                       "buffer_size": args.buffer_size, "wall_s": wall_s, "train_args": common,
                                       "arms": summary, "paired_suite_solved": pairs, "runs": results,
                                       "dcd_solved": DCD_SOLVED}},
               benchmark="accel_maze")
    return 0


if __name__ == "__main__":
    sys.exit(main())
