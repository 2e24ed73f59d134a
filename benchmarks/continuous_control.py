"""Does the continuous_control preset learn, and what does its action-bound term do? Pendulum-v1, several seeds.

    python -m benchmarks.continuous_control [--quick] [--seeds 3] [--total-steps 2000000] [--arms preset,no_bound]
                                            [--backend ray|inline] [--out-dir DIR] [--json PATH]
                                            [-- extra levelray train flags for every arm]

Arms: `preset` is `levelray train --env Pendulum-v1` with no tuning flag (the continuous_control preset);
`no_bound` adds only `--action-bound-weight 0`, the one change that this benchmark is about (README: "any other
gymnasium id"). Each seed s is `--seed s` in both arms; runs go one at a time, interleaved by seed, because a
Ray run uses the whole machine. After training, `levelray evaluate RUN --levels test` plays the final checkpoint
on fresh seeds (sampled actions, as in training, and `--greedy`: the Gaussian mean).

Reported per arm: mean and 95% Student-t CI over seeds (`deploy.report.stats.mean_ci`) of the final training return
(last 100 episodes), the best training return any report showed, the evaluation returns, the mean
|excess of the Gaussian mean outside the box| term at the end (`learner_loss_action_bound`), and steps to a
training return of -400 (Pendulum: a random policy scores about -1,200, a swing-up-and-hold policy about
-150 to -250), with how many seeds got there. Prints a table and writes JSON; `levelray report --group-by
learner.action_bound_weight` draws both arms' mean curves with t-bands into OUT/report/.

Full run: 3 seeds x 2 arms x 2M env steps on the Ray backend; each run took ~2.5 min on this 2-core machine
(benchmarks/RESULTS.md), ~16 min in all with evaluations. `--quick` is a smoke run of the pipeline (a few
thousand steps): its numbers say nothing about learning.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from benchmarks.common import LEVELRAY, ROOT, fmt_ci, print_table, run_levelray, steps_to_threshold, write_json
from levelray.deploy.report.runs import read_records
from levelray.deploy.report.stats import ci_summary

ENV = "Pendulum-v1"
ARMS = {"preset": [], "no_bound": ["--action-bound-weight", "0"]}
THRESHOLD = -400.0


def evaluate(run: Path, seed: int, episodes: int, greedy: bool, log: Path) -> float:
    cmd = [*LEVELRAY, "evaluate", str(run), "--levels", "test", "--episodes", str(episodes), "--seed", str(seed),
           "--json", "--backend", "inline", *(["--greedy"] if greedy else [])]
    return float(json.loads(run_levelray(cmd, log).strip().splitlines()[-1])["results"]["test"]["return_mean"])


def run_one(arm: str, seed: int, args, out: Path, episodes: int) -> dict:
    run = out / arm / f"seed{seed}"
    cmd = [*LEVELRAY, "train", "--env", ENV, "--backend", args.backend, "--seed", str(seed), *ARMS[arm],
           "--total-steps", str(args.total_steps), "--metrics-port", "0", "--report-interval", "2",
           "--tensorboard", "false", "--quiet", "--run-dir", str(run), *args.train_args]
    start = time.time()
    run_levelray(cmd, out / f"train-{arm}-seed{seed}.log")
    wall = time.time() - start
    records = read_records(run)
    returns = [r["episode_return_mean"] for r in records
               if r.get("episode_return_mean") is not None and (r.get("episodes") or 0) >= 100]
    last = records[-1]
    return {
        "arm": arm, "seed": seed, "run_dir": str(run), "env_steps": last["env_steps"], "train_wall_s": wall,
        "training_return_last100": last.get("episode_return_mean"),
        "best_training_return": max(returns) if returns else None,
        "eval_return": evaluate(run, seed, episodes, False, out / f"evaluate-{arm}-seed{seed}.log"),
        "eval_return_greedy": evaluate(run, seed, episodes, True, out / f"evaluate-greedy-{arm}-seed{seed}.log"),
        "action_bound_loss_last": last.get("learner_loss_action_bound"),
        "policy_lag_mean_last": last.get("policy_lag_mean"),
        "steps_to_threshold": steps_to_threshold(records, THRESHOLD),
    }


def summarise(runs: list[dict], arm: str) -> dict:
    mine = [r for r in runs if r["arm"] == arm]
    reached = [r["steps_to_threshold"] for r in mine if r["steps_to_threshold"] is not None]

    def stat(key: str) -> dict:
        return ci_summary([r[key] for r in mine if r[key] is not None])

    return {
        "arm": arm, "seeds": len(mine), "training_return": stat("training_return_last100"),
        "best_training_return": stat("best_training_return"), "eval_return": stat("eval_return"),
        "eval_return_greedy": stat("eval_return_greedy"), "action_bound_loss": stat("action_bound_loss_last"),
        "steps_to_threshold": ci_summary([float(s) for s in reached]), "reached_threshold": len(reached),
        "train_wall_s": stat("train_wall_s"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smoke run: 2 seeds, 4000 steps, 4 evaluation episodes")
    p.add_argument("--seeds", type=int, default=None, help="seeds per arm (default 3; 2 --quick)")
    p.add_argument("--total-steps", type=int, default=None, help="env steps per run (default 2M; 4000 --quick)")
    p.add_argument("--eval-episodes", type=int, default=None, help="evaluation episodes (default 32; 4 --quick)")
    p.add_argument("--arms", default=",".join(ARMS), help=f"some of {', '.join(ARMS)}")
    p.add_argument("--backend", choices=("inline", "ray"), default="ray")
    p.add_argument("--out-dir", default=None, help="run directories (default: a fresh benchmarks/out/continuous)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "continuous_control.json"))
    p.add_argument("train_args", nargs="*", help="extra `levelray train` flags for every arm, after --")
    args = p.parse_args(argv)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    if unknown := [a for a in arms if a not in ARMS]:
        p.error(f"--arms: unknown {', '.join(unknown)}; expected some of {', '.join(ARMS)}")
    seeds = args.seeds or (2 if args.quick else 3)
    args.total_steps = args.total_steps or (4_000 if args.quick else 2_000_000)
    episodes = args.eval_episodes or (4 if args.quick else 32)
    out = Path(args.out_dir) if args.out_dir else ROOT / "benchmarks" / "out" / "continuous"
    if out.exists() and not args.out_dir:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)

    start = time.time()
    runs = [run_one(arm, seed, args, out, episodes) for seed in range(seeds) for arm in arms]
    run_levelray([*LEVELRAY, "report", *(r["run_dir"] for r in runs), "--group-by", "learner.action_bound_weight",
                  "--out", str(out / "report")], out / "report.log")
    summary = [summarise(runs, arm) for arm in arms]
    rows = [[s["arm"], s["seeds"], fmt_ci(s["training_return"], ",.0f"), fmt_ci(s["best_training_return"], ",.0f"),
             fmt_ci(s["eval_return"], ",.0f"), fmt_ci(s["eval_return_greedy"], ",.0f"),
             fmt_ci(s["action_bound_loss"], ".3g"),
             f"{fmt_ci(s['steps_to_threshold'], ',.0f')} ({s['reached_threshold']}/{s['seeds']})",
             fmt_ci(s["train_wall_s"], ".0f")] for s in summary]
    print(f"\n{ENV}, backend {args.backend}, {args.total_steps:,} env steps per run, {seeds} seeds per arm, "
          f"{episodes} evaluation episodes; mean ± 95% t-CI over seeds; {time.time() - start:.0f} s in all")
    print_table(rows, ["arm", "seeds", "train return (last 100)", "best train return", "eval return",
                       "eval return (greedy)", "bound term at end", f"steps to {THRESHOLD:.0f} (reached)",
                       "train s"])
    if args.quick:
        print("note: --quick is a smoke run of the pipeline; its numbers say nothing about learning")
    data = {"env": ENV, "backend": args.backend, "seeds": seeds, "total_steps": args.total_steps,
            "eval_episodes": episodes, "threshold": THRESHOLD, "quick": args.quick, "train_args": args.train_args,
            "summary": summary, "runs": runs}
    write_json(args.json, {"results": data}, benchmark="continuous_control")
    return 0


if __name__ == "__main__":
    sys.exit(main())
