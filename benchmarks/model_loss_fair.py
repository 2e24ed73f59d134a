"""The fair test of the model loss: no model loss, the model loss, and a control whose model loss cannot reach the
agent, on the same seeds and env-step budgets.

    python -m benchmarks.model_loss_fair                       # every family below, 10 seeds, two runs at a time
    python -m benchmarks.model_loss_fair [--families doorkey5,doorkey8_plr,cartpole] [--seeds 0-9]
        [--arms none,muzero,detached,reanalyse] [--parallel 2] [--eval-episodes N] [--quick]
        [--out-dir DIR] [--json PATH] [-- extra levelray train flags for every run]

Each family is a sweep spec in benchmarks/sweeps/ (`levelray sweep`: each run a Ray Tune trial on the inline backend
with the family's preset, two at a time, one torch thread each); its arms differ only in the model-loss keys:
- `none`: `model_loss.loss none`;
- `muzero`: `model_loss.loss muzero` with its defaults (ALF's gradient scaling, min-max latents, zero-initialised
  scalar heads, its own optimiser, replay a window of the newest 50 updates' unrolls, the family's support);
- `detached`: the same, with `model_loss.torso_gradient false`: the model trains on the torso's features but its
  gradient stops there, so the agent is trained exactly as in `none`. `muzero` against `detached` separates "the
  representation learned something" from what merely running the model loss changes (time, the replay
  service);
- `reanalyse`: `muzero` with `model_loss.reanalyze_ratio 0.5` (the target network recomputes half the model
  batch's value and policy targets). DoorKey-5x5 only: the one family where it is compared.

Families (`metrics.jsonl` records every 2 s on MiniGrid, every 0.1 s on CartPole, whose 300k steps take seconds,
so that steps to threshold has a curve to read):
- `doorkey5` (`model_loss_fair_doorkey5.yaml`): `minigrid:DoorKey-5x5`, 200 training levels, evaluated on
  training and held-out levels at 400k and at 1M env steps: the spec's `budgets` train each run to 400k, evaluate
  it, then resume it to 1M and evaluate it again, the same for every arm. Threshold for steps-to-threshold:
  training return 0.8.
- `doorkey8_plr` (`model_loss_fair_doorkey8_plr.yaml`): `minigrid:DoorKey-8x8` with PLR, the project's PLR
  protocol (`benchmarks.plr_vs_uniform --protocol minigrid`: 200 training levels, `value_l1`, 1 actor x 16 envs,
  unrolls of 20, batches of 2), 1.5M env steps. Threshold: training return 0.5.
- `cartpole` (`model_loss_fair_cartpole.yaml`): `CartPole-v1`, 300k env steps, evaluated on fresh seeds; success
  is a return of 475 or more.

Per family, budget and arm: mean and 95% Student-t interval over seeds of the held-out return and success, the
training return, and steps to threshold (over the seeds that reached it, with their count); per seed, the paired
difference of each arm from `none`, and of `muzero` from `detached`. Beside them, the diagnostics the learner
logs (`learner_model_batch_age`, `learner_feature_rms`, `learner_torso_grad_norm_vtrace`,
`learner_torso_grad_norm_model`): their mean over the second half of each run's records, then over seeds.

Each family's sweep directory is `--out-dir`/<family>: running the benchmark again with the same flags continues a
stopped sweep (`levelray sweep --resume`: finished runs are kept, an interrupted one continues from its newest
checkpoint, a budget already evaluated is not run again).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from benchmarks.common import (
    ROOT,
    budget_names,
    fmt_ci,
    load_sweep,
    metric_at,
    paired,
    print_table,
    read_evaluation,
    records_until,
    run_sweep,
    steps_to_threshold,
    train_flags_config,
    write_json,
)
from levelray.deploy.report.stats import ci_summary

# Each family's spec (benchmarks/sweeps/<spec>.yaml), its threshold for steps to threshold (training return) and the
# return that counts as a success where the env has no success of its own
FAMILIES = {
    "doorkey5": {"spec": "model_loss_fair_doorkey5", "threshold": 0.8, "success_return": None},
    "doorkey8_plr": {"spec": "model_loss_fair_doorkey8_plr", "threshold": 0.5, "success_return": None},
    "cartpole": {"spec": "model_loss_fair_cartpole", "threshold": 475.0, "success_return": 475.0},
}
ARMS = ("none", "muzero", "detached", "reanalyse")
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


def budgets_of(spec: dict, quick: bool) -> list[int]:
    """The env-step budgets a family's runs are evaluated at: its spec's `budgets`, else its `total_steps`."""
    budgets = spec.get("budgets") or [spec["base"]["total_steps"]]
    return list(QUICK_BUDGETS[:len(budgets)]) if quick else budgets


def sweep_spec(args: argparse.Namespace, family: str) -> dict | None:
    """The family's spec with this run's arms, seeds, episodes and train flags laid over it (None: the family has
    none of the arms)."""
    from levelray.deploy.sweep.spec import merge_config

    spec = load_sweep(FAMILIES[family]["spec"])
    budgets = budgets_of(spec, args.quick)
    over = train_flags_config(args.train_args)
    if args.quick:
        over = merge_config({"actors": {"envs_per_actor": 4}}, over)
    base = merge_config({k: v for k, v in spec["base"].items() if k != "total_steps"}, over)
    arms = [a for a in args.arms if a in spec["arms"]]
    if not arms:
        return None
    out = {**spec, "base": base if len(budgets) > 1 else {**base, "total_steps": budgets[0]},
           "arms": {a: spec["arms"][a] for a in arms}, "baseline": "none" if "none" in arms else arms[0],
           "seeds": args.seeds, "evaluate": {**spec["evaluate"], "episodes": args.eval_episodes}}
    if len(budgets) > 1:
        out["budgets"] = budgets
    return out


def diagnostics(records: list[dict]) -> dict[str, float | None]:
    """Each of `DIAGNOSTICS`: its mean over the second half of the records that carry it (None: never logged)."""
    out: dict[str, float | None] = {}
    for key in DIAGNOSTICS:
        values = [r[key] for r in records if isinstance(r.get(key), int | float)]
        out[key] = statistics.fmean(values[len(values) // 2:]) if values else None
    return out


def budget_results(trial: dict, family: str, names: list[tuple[int, int | None]]) -> list[dict]:
    """Every budget's result of one (family, arm, seed) trial, from its run directory (`run_sweep`'s trial);
    `names`: `budget_names`."""
    fam, out = FAMILIES[family], []
    for budget, earlier in names:
        records = records_until(trial["records"], trial["metrics"][metric_at("training.env_steps", earlier)])
        test = read_evaluation(trial, None, earlier)["results"]["test"]
        success = test["success_rate"] if fam["success_return"] is None else (
            sum(r >= fam["success_return"] for r in test["returns"]) / len(test["returns"]))
        last = records[-1]
        out.append({"family": family, "arm": trial["arm"], "seed": trial["seed"], "budget": budget,
                    "env_steps": last["env_steps"], "test_return": test["return_mean"], "test_success": success,
                    "training_return": last.get("episode_return_mean"),
                    "steps_to_threshold": steps_to_threshold(records, fam["threshold"]),
                    "train_s": last["elapsed_s"], **diagnostics(records)})
    return out


def summarise(results: list[dict], family: str, budget: tuple[int, int | None], arms: list[str],
              sweep: dict) -> tuple[list[dict], list[dict]]:
    """(per-arm summaries, paired differences) of one family at one budget (`budget_names`' pair); `sweep`: the
    family's results.json, whose differences from its baseline are read where the sweep has the number."""
    (budget, earlier), fam = budget, FAMILIES[family]
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
    success = metric_at("test.success_rate", earlier) if fam["success_return"] is None else None  # else derived
    diffs = [{"family": family, "budget": budget, "arms": f"{b} - {a}",
              "test_return": paired(mine, a, b, "test_return", sweep, metric_at("test.return_mean", earlier)),
              "test_success": paired(mine, a, b, "test_success", sweep, success)}
             for a, b in pairs]
    return summary, diffs


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    out = Path(args.out_dir)
    results, summaries, diffs, wall = [], [], [], 0.0
    for family in args.families:
        spec = sweep_spec(args, family)
        if spec is None:
            continue
        names, arms = budget_names(spec, spec.get("budgets") or [spec["base"]["total_steps"]]), list(spec["arms"])
        started = time.time()
        sweep = run_sweep(spec, out / family, args.parallel)
        results += [r for t in sweep["trials"] for r in budget_results(t, family, names)]
        wall += time.time() - started
        for budget in names:
            s, d = summarise(results, family, budget, arms, sweep)
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
