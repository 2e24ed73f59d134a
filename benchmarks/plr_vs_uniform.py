"""PLR versus uniform level sampling, the PLR paper's generalisation protocol with levelray's IMPALA.

    python -m benchmarks.plr_vs_uniform --protocol minigrid          # the 2-core result (~50-100 min)
    python -m benchmarks.plr_vs_uniform [--protocol procgen] [--quick]
        [--env ENV] [--num-levels 200] [--total-steps N] [--seeds 0,1,2,3,4] [--parallel 2]
        [--eval-episodes N] [--eval-greedy] [--threshold 0.8] [--strategies random,value_l1]
        [--out-dir DIR] [--json PATH] [-- extra levelray train flags]

Protocol (Jiang et al., "Prioritized Level Replay", 2021): 200 training levels (seeds 0-199), test on held-out
levels (random seeds outside the training range). For each seed of `--seeds`, two runs with the same budget,
config and seed, differing only in `levels.strategy`: `random` (uniform over the 200 levels) and `value_l1`
(PLR: rank transform, temperature β = 0.1, staleness 0.1: the paper's settings and levelray's defaults). The
protocol is a sweep spec, `benchmarks/sweeps/plr_vs_uniform_<protocol>.yaml` (`levelray sweep`: each run a Ray Tune
trial on the inline backend with one torch thread; the flags below override the spec's values): each run trains
with a held-out evaluation every `--eval-interval` updates (the curves), then its final checkpoint plays
`--eval-episodes` episodes on training and on held-out levels (`levelray evaluate --levels train,test`). Per arm
the script prints and writes the mean and 95% Student-t confidence interval over seeds of test return, test success
rate, train return, the train-test gap, and env steps until the held-out success rate first reached `--threshold`;
`levelray report --group-by levels.strategy` of the sweep draws both arms' curves with their bands into
`OUT/report/`. Running it again with the same `--out-dir` continues a stopped sweep.

Protocols (`--protocol` picks the spec and fills defaults; every flag still overrides):
- `minigrid` (`plr_vs_uniform_minigrid.yaml`): `minigrid:DoorKey-8x8`, 1.5M env steps, seeds 0-9, two runs at a
  time; held-out evaluation (32 episodes) every 200 updates, threshold: held-out success 0.5. Inline runs are
  synchronous (no policy lag), so running two at once on 2 cores changes wall time only, not what is learned. Why
  this env and budget: benchmarks/RESULTS.md ("PLR vs uniform on MiniGrid") has the pilot runs: from 200 levels,
  uniform sampling learns DoorKey-6x6 in ~1M steps (both arms get there, so only the speed differs) but stays at
  ~0.03 return on DoorKey-8x8 after 1M, where PLR's one pilot run climbed to 0.74 by 1.5M: a sparse-reward,
  hard-exploration setting like the paper's MiniGrid ones, small enough for 2 cores. MultiRoom/ObstructedMaze need
  far more steps than fit here.
- `procgen` (`plr_vs_uniform_procgen.yaml`): `procgen:bigfish` easy mode, 20,000 env steps, one seed. The paper's
  BigFish numbers (test return at 25M steps: 3.7 uniform, 10.9 PLR; PPO there, IMPALA here) are printed alongside;
  at 0.08% of the paper's budget the numbers only show that the pipeline runs end to end.
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
    load_sweep,
    print_table,
    run_levelray,
    run_sweep,
    steps_to_threshold,
    train_flags_config,
    write_json,
)
from levelray.deploy.report.stats import ci_summary

STRATEGIES = ("random", "value_l1")
# PLR paper (Jiang et al. 2021), Table 2, procgen easy, 200 training levels, 25M steps: mean test return
PAPER = {"procgen:bigfish": {"steps": 25_000_000, "random": 3.7, "value_l1": 10.9}}
# Each protocol's spec (benchmarks/sweeps/<spec>.yaml) and the defaults the spec does not hold
PROTOCOLS = {
    "procgen": {"spec": "plr_vs_uniform_procgen", "parallel": 1, "threshold": None, "quick_steps": 4000,
                # 2 actors: batches of 2 distinct unrolls
                "quick_train": {"actors": {"num_actors": 2, "envs_per_actor": 4}}},
    "minigrid": {"spec": "plr_vs_uniform_minigrid", "parallel": 2, "threshold": 0.5, "quick_steps": 20_000,
                 "quick_train": {}},
}


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


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--protocol", choices=tuple(PROTOCOLS), default="procgen", help="the spec and defaults")
    p.add_argument("--quick", action="store_true", help="a smoke test: tiny budget, 8 episodes, 2 seeds")
    p.add_argument("--env", default=None)
    p.add_argument("--num-levels", type=int, default=200)
    p.add_argument("--total-steps", type=int, default=None, help="env steps per run")
    p.add_argument("--seeds", default=None, help="comma-separated run seeds; each arm runs once per seed")
    p.add_argument("--parallel", type=int, default=None, help="runs at once (each with one torch thread)")
    p.add_argument("--eval-episodes", type=int, default=None, help="episodes per level set in the final evaluation")
    p.add_argument("--eval-interval", type=int, default=None, help="learner updates between held-out evaluations")
    p.add_argument("--eval-greedy", action="store_true", help="greedy evaluation (default: sampled, as the paper)")
    p.add_argument("--threshold", type=float, default=None, help="held-out success rate for 'steps to threshold'")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="level strategies to compare")
    p.add_argument("--out-dir", default=None, help="the sweep's directory (default: a fresh "
                                                   "benchmarks/out/plr_vs_uniform)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "plr_vs_uniform.json"))
    p.add_argument("train_args", nargs="*", help="extra `levelray train` flags, after --")
    return p.parse_args(argv)


def sweep_spec(args: argparse.Namespace) -> dict:
    """The protocol's spec with this run's flags laid over it; its arms are the strategies (named as the spec's arm
    of that strategy, or by the strategy)."""
    from levelray.deploy.sweep.spec import merge_config

    proto = PROTOCOLS[args.protocol]
    spec = load_sweep(proto["spec"])
    base = spec["base"]
    interval = base.get("eval", {}).get("interval_updates", 0) if args.eval_interval is None else args.eval_interval
    if args.quick and interval:
        interval = 5
    episodes = args.eval_episodes or (8 if args.quick else spec["evaluate"]["episodes"])
    over = {"env": {"id": args.env or base["env"]["id"], "num_levels": args.num_levels},
            "total_steps": args.total_steps or (proto["quick_steps"] if args.quick else base["total_steps"])}
    if interval or "eval" in base:  # the held-out curve: at most 32 episodes each time
        over["eval"] = {"interval_updates": interval, **({"episodes": min(episodes, 32)} if interval else {})}
    base = merge_config(merge_config(base, over), proto["quick_train"] if args.quick else {})
    named = {keys.get("levels", {}).get("strategy"): name for name, keys in spec["arms"].items()}
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    arms = {named.get(s, s): merge_config(spec["arms"].get(named.get(s), {}), {"levels": {"strategy": s}})
            for s in strategies}
    seeds = [int(s) for s in (args.seeds or ("0,1" if args.quick else ",".join(map(str, spec["seeds"])))).split(",")
             if s.strip()]
    return {**spec, "base": merge_config(base, train_flags_config(args.train_args)), "arms": arms,
            "baseline": next(iter(arms)), "seeds": seeds,
            "evaluate": {"levels": "train,test", "episodes": episodes, "greedy": args.eval_greedy}}


def trial_result(trial: dict, threshold: float | None) -> dict:
    """One run's numbers, from its run directory (`run_sweep`'s trial)."""
    records, ev = trial["records"], trial["evaluation"]
    last, (tr, te) = records[-1], (ev["results"]["train"], ev["results"]["test"])
    result = {
        "strategy": ev["level_strategy"], "seed": trial["seed"], "run_dir": trial["run_dir"],
        "env_steps": last["env_steps"], "train_wall_s": last["elapsed_s"],
        "env_steps_per_second": last["env_steps"] / last["elapsed_s"],
        "training_return_last100": last.get("episode_return_mean"),
        "train_return": tr["return_mean"], "test_return": te["return_mean"],
        "train_success": tr["success_rate"], "test_success": te["success_rate"],
        "generalization_gap": ev["generalization_gap"], "eval_episodes": ev["episodes"],
    }
    if threshold is not None:
        result["steps_to_threshold"] = steps_to_threshold(records, threshold, held_out=True)
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    proto = PROTOCOLS[args.protocol]
    spec = sweep_spec(args)
    env_id, total, seeds = spec["base"]["env"]["id"], spec["base"]["total_steps"], spec["seeds"]
    episodes, eval_interval = spec["evaluate"]["episodes"], spec["base"].get("eval", {}).get("interval_updates", 0)
    parallel = max(1, args.parallel or proto["parallel"])
    threshold = args.threshold if args.threshold is not None else proto["threshold"]
    out = Path(args.out_dir) if args.out_dir else ROOT / "benchmarks" / "out" / "plr_vs_uniform"
    if out.exists() and not args.out_dir:
        shutil.rmtree(out)

    started = time.time()
    results = [trial_result(t, threshold) for t in run_sweep(spec, out, parallel)["trials"]]
    wall_s = time.time() - started
    run_levelray([*LEVELRAY, "report", str(out), "--out", str(out / "report"), "--group-by", "levels.strategy"],
                 out.parent / f"{out.name}-report.log")

    strategies = list(dict.fromkeys(r["strategy"] for r in results))
    arms = {s: arm_summary([r for r in results if r["strategy"] == s], total) for s in strategies}
    kind = "greedy" if args.eval_greedy else "sampled"
    print(f"\n{env_id}, {args.num_levels} training levels, {total:,} env steps per run, seeds {seeds}, inline "
          f"backend, {parallel} run(s) at a time, {wall_s / 60:.1f} min in all; final evaluation: {episodes} "
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
        "seeds": seeds, "backend": "inline", "parallel": parallel, "wall_s": wall_s, "eval_greedy": args.eval_greedy,
        "eval_episodes": episodes, "eval_interval": eval_interval, "threshold": threshold,
        "train_args": args.train_args, "spec": spec, "paper": PAPER.get(env_id),
        "runs": results, "arms": arms,
    }
    write_json(args.json, {"results": data}, benchmark="plr_vs_uniform")
    return 0


if __name__ == "__main__":
    sys.exit(main())
