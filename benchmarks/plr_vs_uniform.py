"""PLR versus uniform level sampling, the PLR paper's generalisation protocol with levelray's IMPALA.

    python -m benchmarks.plr_vs_uniform --protocol minigrid          # the 2-core result (~35-60 min)
    python -m benchmarks.plr_vs_uniform [--protocol procgen] [--quick]
        [--env ENV] [--num-levels 200] [--total-steps N] [--seeds 0,1,2,3,4] [--parallel 2]
        [--backend ray|inline] [--eval-episodes N] [--eval-greedy] [--threshold 0.8]
        [--out-dir DIR] [--json PATH] [-- extra levelray train flags]

Protocol (Jiang et al., "Prioritized Level Replay", 2021): 200 training levels (seeds 0-199), test on held-out
levels (random seeds outside the training range). For each seed of `--seeds`, two runs with the same budget,
config and seed, differing only in `--level-strategy`: `random` (uniform over the 200 levels) and `value_l1`
(PLR: rank transform, temperature β = 0.1, staleness 0.1: the paper's settings and levelray's defaults).
Each run is a `levelray train` subprocess with a held-out evaluation every `--eval-interval` updates (the
curves), then `levelray evaluate RUN --levels train,test --json` plays `--eval-episodes` episodes on
training and on held-out levels with the final checkpoint. Per arm the script prints and writes the mean and
95% Student-t confidence interval over seeds of test return, test success rate, train return, the
train-test gap, and env steps until the held-out success rate first reached `--threshold`;
`levelray report --group-by levels.strategy` draws both arms' curves with their bands into `OUT/report/`.

Protocols (`--protocol` fills defaults; every flag still overrides):
- `minigrid`: `minigrid:DoorKey-8x8`, 1.5M env steps, seeds 0-4, inline backend, two runs at a time (one
  torch thread each: half the 2 cores, levelray's own rule, `policy/threads.py`); held-out evaluation (32
  episodes) every 200 updates, threshold: held-out success 0.5.
  Inline runs are synchronous (no policy lag), so running two at once on 2 cores changes wall time only, not
  what is learned. Why this env and budget: benchmarks/RESULTS.md ("PLR vs uniform on MiniGrid") has the
  pilot runs: from 200 levels, uniform sampling learns DoorKey-6x6 in ~1M steps (both arms get there, so
  only the speed differs) but stays at ~0.03 return on DoorKey-8x8 after 1M, where PLR's one pilot run
  climbed to 0.74 by 1.5M: a sparse-reward, hard-exploration setting like the paper's MiniGrid ones, small
  enough for 2 cores. MultiRoom/ObstructedMaze need far more steps than fit here.
- `procgen`: `procgen:bigfish` easy mode, 20,000 env steps, one seed, the Ray backend. The paper's BigFish
  numbers (test return at 25M steps: 3.7 uniform, 10.9 PLR; PPO there, IMPALA here) are printed alongside;
  at 0.08% of the paper's budget the numbers only show that the pipeline runs end to end. `--backend inline`
  for the lent GPU machines, which cannot install Ray.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common import LEVELRAY, ROOT, fmt_ci, print_table, run_levelray, write_json
from levelray.deploy.report.stats import ci_summary

STRATEGIES = ("random", "value_l1")
# PLR paper (Jiang et al. 2021), Table 2, procgen easy, 200 training levels, 25M steps: mean test return
PAPER = {"procgen:bigfish": {"steps": 25_000_000, "random": 3.7, "value_l1": 10.9}}
PROTOCOLS = {
    "procgen": {"env": "procgen:bigfish", "total_steps": 20_000, "seeds": "0", "parallel": 1, "backend": "ray",
                "eval_episodes": 32, "eval_interval": 0, "threshold": None},
    "minigrid": {"env": "minigrid:DoorKey-8x8", "total_steps": 1_500_000, "seeds": "0,1,2,3,4", "parallel": 2,
                 "backend": "inline", "eval_episodes": 100, "eval_interval": 200, "threshold": 0.5},
}
# Shapes that differ from a preset's: the measured MiniGrid setting (benchmarks/RESULTS.md, "MiniGridNet
# learns"): one actor of 16 envs, batches of 2 unrolls of 20 steps
PROTOCOL_TRAIN_ARGS = {
    "procgen": ["--distribution-mode", "easy"],
    "minigrid": ["--num-actors", "1", "--envs-per-actor", "16", "--unroll-length", "20", "--batch-size", "2"],
}


def steps_to_threshold(records: list[dict], threshold: float) -> int | None:
    """Env steps of the first held-out evaluation whose success rate reached `threshold` (None: never)."""
    for rec in records:
        rate = rec.get("test_success_rate")
        if rate is not None and rate >= threshold:
            return int(rec.get("test_env_steps", rec["env_steps"]))
    return None


def arm_summary(runs: list[dict], budget: int) -> dict:
    """Mean and 95% t-interval over an arm's seeds. Steps to threshold: runs that never reached it count
    as the budget, so that mean is a lower bound whenever `reached < n`."""
    out: dict = {"n": len(runs)}
    for key in ("test_return", "test_success", "train_return", "train_success", "generalization_gap",
                "training_return_last100", "env_steps"):
        stat = ci_summary([r.get(key) for r in runs])
        if stat["n"]:
            out[key] = stat
    steps = [r["steps_to_threshold"] for r in runs if "steps_to_threshold" in r]
    if steps:
        reached = sum(s is not None for s in steps)
        out["steps_to_threshold"] = {**ci_summary([budget if s is None else s for s in steps]), "reached": reached,
                                     "lower_bound": reached < len(steps)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--protocol", choices=tuple(PROTOCOLS), default="procgen", help="defaults for the flags below")
    p.add_argument("--quick", action="store_true", help="a smoke test: tiny budget, 8 episodes, 2 seeds")
    p.add_argument("--env", default=None)
    p.add_argument("--num-levels", type=int, default=200)
    p.add_argument("--total-steps", type=int, default=None, help="env steps per run")
    p.add_argument("--seeds", default=None, help="comma-separated run seeds; each arm runs once per seed")
    p.add_argument("--parallel", type=int, default=None,
                   help="runs at once (each sizes its torch threads itself: policy/threads.py)")
    p.add_argument("--backend", choices=("ray", "inline"), default=None)
    p.add_argument("--eval-episodes", type=int, default=None, help="episodes per level set in the final evaluation")
    p.add_argument("--eval-interval", type=int, default=None, help="learner updates between held-out evaluations")
    p.add_argument("--eval-greedy", action="store_true", help="greedy evaluation (default: sampled, as the paper)")
    p.add_argument("--threshold", type=float, default=None, help="held-out success rate for 'steps to threshold'")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="level strategies to compare")
    p.add_argument("--out-dir", default=None, help="run directories (default: a fresh benchmarks/out/plr_vs_uniform)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "plr_vs_uniform.json"))
    p.add_argument("train_args", nargs="*", help="extra `levelray train` flags, after --")
    args = p.parse_args(argv)

    proto = PROTOCOLS[args.protocol]
    env_id = args.env or proto["env"]
    quick_steps = 20_000 if args.protocol == "minigrid" else 4000
    total = args.total_steps or (quick_steps if args.quick else proto["total_steps"])
    episodes = args.eval_episodes or (8 if args.quick else proto["eval_episodes"])
    seeds = [int(s) for s in (args.seeds or ("0,1" if args.quick else proto["seeds"])).split(",") if s.strip()]
    parallel = max(1, args.parallel or proto["parallel"])
    backend = args.backend or proto["backend"]
    eval_interval = proto["eval_interval"] if args.eval_interval is None else args.eval_interval
    if args.quick and eval_interval:
        eval_interval = 5
    threshold = args.threshold if args.threshold is not None else proto["threshold"]
    out = Path(args.out_dir) if args.out_dir else ROOT / "benchmarks" / "out" / "plr_vs_uniform"
    if out.exists() and not args.out_dir:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]

    common = ["--backend", backend, "--env", env_id, "--num-levels", str(args.num_levels), "--start-level", "0",
              "--total-steps", str(total), "--metrics-port", "0", "--report-interval", "5", "--quiet",
              "--tensorboard", "false", *PROTOCOL_TRAIN_ARGS[args.protocol]]
    if eval_interval:
        common += ["--eval-interval", str(eval_interval), "--eval-episodes", str(min(episodes, 32))]
    if args.quick and args.protocol == "procgen":
        common += ["--num-actors", "2", "--envs-per-actor", "4"]  # 2 actors: batches of 2 distinct unrolls
    common += args.train_args

    def one_run(strategy: str, seed: int) -> dict:
        name = f"{strategy}-seed{seed}"
        run = out / name
        start = time.time()
        run_levelray([*LEVELRAY, "train", *common, "--seed", str(seed), "--level-strategy", strategy,
                      "--run-dir", str(run)], out / f"train-{name}.log")
        train_s = time.time() - start
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        last = records[-1]
        eval_cmd = [*LEVELRAY, "evaluate", str(run), "--levels", "train,test", "--episodes", str(episodes),
                    "--seed", str(seed), "--json", "--backend", backend]
        if args.eval_greedy:
            eval_cmd.append("--greedy")
        ev = json.loads(run_levelray(eval_cmd, out / f"evaluate-{name}.log").strip().splitlines()[-1])
        tr, te = ev["results"]["train"], ev["results"]["test"]
        result = {
            "strategy": strategy, "seed": seed, "run_dir": str(run), "env_steps": last["env_steps"],
            "train_wall_s": train_s, "env_steps_per_second": last["env_steps"] / train_s,
            "training_return_last100": last.get("episode_return_mean"),
            "train_return": tr["return_mean"], "test_return": te["return_mean"],
            "train_success": tr["success_rate"], "test_success": te["success_rate"],
            "generalization_gap": ev["generalization_gap"], "eval_episodes": episodes,
        }
        if threshold is not None:
            result["steps_to_threshold"] = steps_to_threshold(records, threshold)
        return result

    started = time.time()
    jobs = [(strategy, seed) for seed in seeds for strategy in strategies]  # arms interleaved: same load for both
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        results = list(pool.map(lambda job: one_run(*job), jobs))
    wall_s = time.time() - started
    run_levelray([*LEVELRAY, "report", *(r["run_dir"] for r in results), "--out", str(out / "report"),
          "--group-by", "levels.strategy"], out / "report.log")

    arms = {s: arm_summary([r for r in results if r["strategy"] == s], total) for s in strategies}
    kind = "greedy" if args.eval_greedy else "sampled"
    print(f"\n{env_id}, {args.num_levels} training levels, {total:,} env steps per run, seeds {seeds}, backend "
          f"{backend}, {parallel} run(s) at a time, {wall_s / 60:.1f} min in all; final evaluation: {episodes} "
          f"{kind} episodes on training and on held-out levels per run")
    print_table([[r["strategy"], r["seed"], f"{r['env_steps']:,}", round(r["train_wall_s"]), r["train_return"],
                  r["test_return"], r["train_success"], r["test_success"],
                  r.get("steps_to_threshold", "n/a") or "never"] for r in results],
                ["strategy", "seed", "env steps", "train s", "train return", "test return", "train success",
                 "test success", f"steps to test success {threshold}"])
    print("\nmean ± 95% CI (Student t over seeds)")
    rows = []
    for s, a in arms.items():
        stt = a.get("steps_to_threshold")
        stt_text = "n/a" if not stt else (f"{fmt_ci(stt, ',.0f')}{' (lower bound)' if stt['lower_bound'] else ''}, "
                                          f"{stt['reached']}/{stt['n']} reached")
        paper = PAPER.get(env_id, {}).get(s)
        rows.append([s, a["n"], fmt_ci(a.get("test_return")), fmt_ci(a.get("test_success")),
                     fmt_ci(a.get("train_return")), fmt_ci(a.get("generalization_gap")), stt_text,
                     "n/a" if paper is None else f"{paper} @ {PAPER[env_id]['steps'] // 1_000_000}M"])
    print_table(rows, ["strategy", "seeds", "test return", "test success", "train return", "train-test gap",
                       f"steps to test success {threshold}", "paper test return"])
    if env_id in PAPER and total < PAPER[env_id]["steps"] // 10:
        print(f"note: {total:,} steps is {100 * total / PAPER[env_id]['steps']:.2f}% of the paper's budget; "
              "these returns show the pipeline works, not which strategy generalises better")
    print(f"figures: {out / 'report'}")
    data = {
        "protocol": args.protocol, "env": env_id, "num_levels": args.num_levels, "total_steps": total,
        "seeds": seeds, "backend": backend, "parallel": parallel, "wall_s": wall_s, "eval_greedy": args.eval_greedy,
        "eval_episodes": episodes, "eval_interval": eval_interval, "threshold": threshold,
        "train_args": common, "paper": PAPER.get(env_id),
        "runs": results, "arms": arms,
    }
    write_json(args.json, {"results": data}, benchmark="plr_vs_uniform")
    return 0


if __name__ == "__main__":
    sys.exit(main())
