"""The fair test of the model loss (issue 26): no model loss, the model loss, and a control whose model loss cannot
reach the agent, on the same seeds and env-step budgets.

    python -m benchmarks.model_loss_fair                       # every family below, 10 seeds, two runs at a time
    python -m benchmarks.model_loss_fair [--families doorkey5,doorkey8_plr,cartpole] [--seeds 0-9]
        [--arms none,muzero,detached,reanalyse] [--parallel 2] [--eval-episodes N] [--quick]
        [--out-dir DIR] [--json PATH] [-- extra levelray train flags for every run]

Arms (each a `levelray train` subprocess on the inline backend with the family's preset; they differ only in
these flags):
- `none`: `--model-loss none`;
- `muzero`: `--model-loss muzero` with its defaults (ALF's gradient scaling, min-max latents, zero-initialised
  scalar heads, its own optimiser, replay a window of the newest 50 updates' unrolls, the family's support);
- `detached`: the same, with `--model-torso-gradient false`: the model trains on the torso's features but its
  gradient stops there, so the agent is trained exactly as in `none`. `muzero` against `detached` separates "the
  representation learned something" from what merely running the model loss changes (time, the replay
  service);
- `reanalyse`: `muzero` with `--model-reanalyze-ratio 0.5` (the target network recomputes half the model
  batch's value and policy targets). DoorKey-5x5 only, as the issue asks.

Families (`metrics.jsonl` records every 2 s on MiniGrid, every 0.1 s on CartPole, whose 300k steps take seconds,
so that steps to threshold has a curve to read):
- `doorkey5`: `minigrid:DoorKey-5x5`, 200 training levels, evaluated on training and held-out levels at 400k and
  at 1M env steps: the run trains to 400k, is evaluated, then resumed (`--resume`) to 1M and evaluated again,
  the same for every arm. Threshold for steps-to-threshold: training return 0.8.
- `doorkey8_plr`: `minigrid:DoorKey-8x8` with PLR, the project's PLR protocol (`benchmarks.plr_vs_uniform
  --protocol minigrid`: 200 training levels, `value_l1`, 1 actor x 16 envs, unrolls of 20, batches of 2),
  1.5M env steps. Threshold: training return 0.5.
- `cartpole`: `CartPole-v1`, 300k env steps, evaluated on fresh seeds; success is a return of 475 or more.

Per family, budget and arm: mean and 95% Student-t interval over seeds of the held-out return and success, the
training return, and steps to threshold (over the seeds that reached it, with their count); per seed, the paired
difference of each arm from `none`, and of `muzero` from `detached`. Beside them, the diagnostics the learner
logs (`learner_model_batch_age`, `learner_feature_rms`, `learner_torso_grad_norm_vtrace`,
`learner_torso_grad_norm_model`): their mean over the second half of each run's records, then over seeds.

A finished stage writes `result-<budget>.json` into its run directory and is read, not run again: the test can be
stopped and continued (a stage cut off in its first part is started again from scratch; cut off while resuming
toward a later budget, it resumes from its newest checkpoint, as a user would).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from benchmarks.common import (
    LEVELRAY,
    ROOT,
    fmt_ci,
    paired,
    print_table,
    run_arms,
    run_levelray,
    steps_to_threshold,
    write_json,
)
from levelray.deploy.report.stats import ci_summary

MINIGRID_PLR = ["--level-strategy", "value_l1", "--num-actors", "1", "--envs-per-actor", "16", "--unroll-length",
                "20", "--batch-size", "2"]
FAMILIES = {
    "doorkey5": {"env": ["--env", "minigrid:DoorKey-5x5", "--num-levels", "200", "--start-level", "0"],
                 "budgets": (400_000, 1_000_000), "levels": "train,test", "threshold": 0.8, "success_return": None,
                 "arms": ("none", "muzero", "detached", "reanalyse"), "report_interval": 2},
    "doorkey8_plr": {"env": ["--env", "minigrid:DoorKey-8x8", "--num-levels", "200", "--start-level", "0",
                             *MINIGRID_PLR],
                     "budgets": (1_500_000,), "levels": "train,test", "threshold": 0.5, "success_return": None,
                     "arms": ("none", "muzero", "detached"), "report_interval": 2},
    "cartpole": {"env": ["--env", "CartPole-v1"], "budgets": (300_000,), "levels": "test", "threshold": 475.0,
                 "success_return": 475.0, "arms": ("none", "muzero", "detached"), "report_interval": 0.1},
}
ARMS = {
    "none": ["--model-loss", "none"],
    "muzero": ["--model-loss", "muzero"],
    "detached": ["--model-loss", "muzero", "--model-torso-gradient", "false"],
    "reanalyse": ["--model-loss", "muzero", "--model-reanalyze-ratio", "0.5"],
}
DIAGNOSTICS = ("learner_model_batch_age", "learner_feature_rms", "learner_torso_grad_norm_vtrace",
               "learner_torso_grad_norm_model")
QUICK_BUDGETS = (4_000, 8_000)


def parse_seeds(text: str) -> list[int]:
    """"0-9" or "0,1,2" (or a mix) as a list of ints."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        lo, _, hi = part.partition("-")
        seeds += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return seeds


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", default=",".join(FAMILIES))
    p.add_argument("--arms", default=",".join(ARMS), help="arms to run where the family has them")
    p.add_argument("--seeds", default="0-9")
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--eval-episodes", type=int, default=100, help="episodes per level set")
    p.add_argument("--quick", action="store_true", help="a smoke test: a few thousand steps, 4 episodes, seed 0")
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out" / "model_loss_fair"))
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "model_loss_fair.json"))
    p.add_argument("train_args", nargs="*", help="extra `levelray train` flags for every run, after --")
    args = p.parse_args(argv)
    args.families = [f.strip() for f in args.families.split(",") if f.strip()]
    args.arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [f for f in args.families if f not in FAMILIES] + [a for a in args.arms if a not in ARMS]
    if unknown:
        p.error(f"unknown families or arms: {', '.join(unknown)}; families {', '.join(FAMILIES)}, "
                f"arms {', '.join(ARMS)}")
    args.seeds = [0] if args.quick else parse_seeds(args.seeds)
    if args.quick:
        args.eval_episodes = 4
    return args


def budgets_of(family: str, quick: bool) -> tuple[int, ...]:
    budgets = FAMILIES[family]["budgets"]
    return QUICK_BUDGETS[:len(budgets)] if quick else budgets


def diagnostics(records: list[dict]) -> dict[str, float | None]:
    """Each of `DIAGNOSTICS`: its mean over the second half of the records that carry it (None: never logged)."""
    out: dict[str, float | None] = {}
    for key in DIAGNOSTICS:
        values = [r[key] for r in records if isinstance(r.get(key), int | float)]
        out[key] = statistics.fmean(values[len(values) // 2:]) if values else None
    return out


def evaluate(run: Path, family: str, seed: int, episodes: int, log: Path) -> tuple[float, float]:
    """(held-out return, held-out success) of the run's latest checkpoint."""
    fam = FAMILIES[family]
    ev = json.loads(run_levelray([*LEVELRAY, "evaluate", str(run), "--levels", fam["levels"], "--episodes",
                                  str(episodes), "--seed", str(seed), "--json", "--backend", "inline"], log)
                    .strip().splitlines()[-1])
    test = ev["results"]["test"]
    if fam["success_return"] is None:
        return test["return_mean"], test["success_rate"]
    returns = test["returns"]
    return test["return_mean"], sum(r >= fam["success_return"] for r in returns) / len(returns)


def one_run(args: argparse.Namespace, out: Path, family: str, arm: str, seed: int) -> list[dict]:
    """Every budget's result of one (family, arm, seed) run, training and resuming as needed."""
    fam, run = FAMILIES[family], out / family / f"{arm}-seed{seed}"
    results, started = [], False
    for budget in budgets_of(family, args.quick):
        cached = run / f"result-{budget}.json"
        if cached.exists():
            results.append(json.loads(cached.read_text()))
            started = True
            continue
        common = ["--backend", "inline", *fam["env"], *ARMS[arm], "--total-steps", str(budget), "--metrics-port",
                  "0", "--report-interval", str(fam["report_interval"]), "--tensorboard", "false", "--quiet",
                  *args.train_args]
        if args.quick:
            common += ["--envs-per-actor", "4"]
        name = f"{arm}-seed{seed}-{budget}"
        if started:  # a later budget: continue the same run
            cmd = [*LEVELRAY, "train", "--resume", str(run), "--total-steps", str(budget)]
        else:
            if run.exists():  # cut off before its first result: start again
                shutil.rmtree(run)
            cmd = [*LEVELRAY, "train", *common, "--seed", str(seed), "--run-dir", str(run)]
        began = time.time()
        run_levelray(cmd, out / family / f"train-{name}.log")
        train_s = time.time() - began
        started = True
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        test_return, test_success = evaluate(run, family, seed, args.eval_episodes,
                                             out / family / f"evaluate-{name}.log")
        last = records[-1]
        result = {"family": family, "arm": arm, "seed": seed, "budget": budget, "env_steps": last["env_steps"],
                  "test_return": test_return, "test_success": test_success,
                  "training_return": last.get("episode_return_mean"),
                  "steps_to_threshold": steps_to_threshold(records, fam["threshold"]),
                  "train_s": train_s, **diagnostics(records)}
        cached.write_text(json.dumps(result, indent=2))
        results.append(result)
    return results


def summarise(results: list[dict], family: str, budget: int, arms: list[str]) -> tuple[list[dict], list[dict]]:
    """(per-arm summaries, paired differences) of one family at one budget."""
    mine = [r for r in results if r["family"] == family and r["budget"] == budget]
    summary = []
    for arm in arms:
        rows = [r for r in mine if r["arm"] == arm]
        reached = [float(r["steps_to_threshold"]) for r in rows if r["steps_to_threshold"] is not None]
        summary.append({"family": family, "budget": budget, "arm": arm, "seeds": len(rows),
                        **{k: ci_summary([r[k] for r in rows if r[k] is not None])
                           for k in ("test_return", "test_success", "training_return", *DIAGNOSTICS)},
                        "steps_to_threshold": ci_summary(reached), "reached": len(reached)})
    pairs = [(a, b) for a, b in [("none", x) for x in arms if x != "none"] + [("detached", "muzero")]
             if a in arms and b in arms]
    diffs = [{"family": family, "budget": budget, "arms": f"{b} - {a}",
              "test_return": paired(mine, a, b, "test_return"), "test_success": paired(mine, a, b, "test_success")}
             for a, b in pairs]
    return summary, diffs


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = Path(args.out_dir)
    results, summaries, diffs, wall = [], [], [], 0.0
    for family in args.families:
        (out / family).mkdir(parents=True, exist_ok=True)
        arms = [a for a in args.arms if a in FAMILIES[family]["arms"]]
        runs, seconds = run_arms(arms, args.seeds, args.parallel,
                                 lambda arm, seed, family=family: one_run(args, out, family, arm, seed))
        wall += seconds
        results += [r for run in runs for r in run]
        for budget in budgets_of(family, args.quick):
            s, d = summarise(results, family, budget, arms)
            summaries += s
            diffs += d
    print(f"\nseeds {args.seeds}, {args.eval_episodes} evaluation episodes per level set, {args.parallel} runs at a "
          f"time, {wall / 60:.1f} min; mean ± 95% t-CI over seeds")
    print_table([[s["family"], f"{s['budget']:,}", s["arm"], s["seeds"], fmt_ci(s["test_return"]),
                  fmt_ci(s["test_success"], ".2f"), fmt_ci(s["training_return"]),
                  f"{fmt_ci(s['steps_to_threshold'], ',.0f')} ({s['reached']}/{s['seeds']})"] for s in summaries],
                ["family", "env steps", "arm", "seeds", "held-out return", "held-out success", "train return",
                 "steps to threshold (reached)"])
    print("\npaired difference (same seed), mean ± 95% t-CI")
    print_table([[d["family"], f"{d['budget']:,}", d["arms"], d["test_return"]["n"], fmt_ci(d["test_return"]),
                  fmt_ci(d["test_success"], ".2f")] for d in diffs],
                ["family", "env steps", "arms", "seeds", "held-out return", "held-out success"])
    print("\ndiagnostics: mean over each run's second half, then mean ± 95% t-CI over seeds")
    print_table([[s["family"], f"{s['budget']:,}", s["arm"], *(fmt_ci(s[k], ".3g") for k in DIAGNOSTICS)]
                 for s in summaries if s["arm"] != "none"],
                ["family", "env steps", "arm", "batch age (updates)", "feature RMS", "torso grad V-trace",
                 "torso grad model"])
    write_json(args.json, {"results": {"seeds": args.seeds, "eval_episodes": args.eval_episodes,
                                       "train_args": args.train_args, "wall_s": wall, "summary": summaries,
                                       "paired": diffs, "runs": results}}, benchmark="model_loss_fair")
    return 0


if __name__ == "__main__":
    sys.exit(main())
