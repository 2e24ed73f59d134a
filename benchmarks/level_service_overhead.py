"""PLR's level buffer versus uniform sampling on an unbounded level space: env steps/s of `levelray train`.

    python -m benchmarks.level_service_overhead [--quick] [--envs CartPole-v1,minigrid:DoorKey-5x5] [--rounds 5]
        [--total-steps N] [--skip-fraction 0.2] [--backend ray|inline] [--out-dir DIR] [--json PATH]
        [-- extra levelray train flags]

The speed requirement this checks: with PLR (`value_l1`) on an unbounded space, env steps/s within 2% of uniform
sampling (`random`) on the same config. Both arms are `levelray train --num-levels 0` with the env's preset (no
tuning flag), differing only in `--level-strategy`:
- `random`: no level service at all (each env draws a fresh seed itself; `contracts.config.uses_level_service`);
- `value_l1`: the level service with its 4,000-level buffer: actors prefetch draws from it, the learner sends it
  scores after every update, the driver reads its stats (and the replay distribution) at every report.
So the ratio value_l1 / random is the whole framework cost of PLR over unbounded levels. CartPole-v1 (the
classic-control preset: NumPy envs, a small MLP, ~40-75k env steps/s on 2 quiet cores) is where a framework cost
shows; MiniGrid (DoorKey-5x5, the minigrid preset, ~4-6k env steps/s: the env's own Python dominates) is the kind
of env PLR is for.

Interleaving: per env, round r runs `random` then `value_l1`, the next round the other way round (ABBA...), both
with `--seed r`, one run at a time: a slow change of the machine's load hits both runs of a round about alike, the
ratio per round (paired) cancels most of it, and the alternating order cancels a steady drift.

The policy does not learn (`--learning-rate 0`, the same update work; `--learning` turns learning on): what PLR
chooses changes what the agent learns and how fast, and so its episode lengths, and episode length alone moves
env steps/s (an episode start costs a reset, a level draw and a score). With the initial policy both arms play
the same kind of episodes, the shortest (most episode starts, so the most level-service traffic per step): the
ratio is the framework's cost at its largest.

Printed per env: median and mean ± 95% CI (Student t over rounds) of env steps/s per arm, the paired ratio
value_l1/random (mean ± CI, and each round's), and whether the requirement (ratio >= 0.98) is met (CI entirely
at or above 0.98), missed (entirely below) or undecided (the CI spans 0.98: more rounds).

Env steps/s of a run (steady state): (the run's final env steps - those of the first `metrics.jsonl` record at or
after `--skip-fraction` (20%) of the env-step budget) / (the time between that record and the first record with
the final count: the driver writes one more at shutdown, later and with no new steps). Records are 1 s apart
(`--report-interval 1`). Why not env steps / wall time: the start (Ray, actors, model build, the first unrolls:
several seconds at 0 env steps, then a ramp) depends on neither arm's per-step cost and is a large, noisy share
of a short run. Why 20% of the steps: past that ramp on both envs, with most of the run left. The value_l1 buffer
fills during the run (a new level at every episode start until 20% full, then at half of them);
`levels_buffered` at both ends of the window is in the JSON. Run directories go to `--out-dir` (default a fresh
`benchmarks/out/level_service_overhead`), the results to `--json`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

from benchmarks.common import LEVELRAY, ROOT, fmt_ci, print_table, run_levelray, write_json
from levelray.deploy.report.runs import read_records
from levelray.deploy.report.stats import ci_summary

ARMS = ("random", "value_l1")
REQUIRED_RATIO = 0.98  # "within 2% of uniform sampling"
# env-step budget per run by env family (env id prefix): about 30-60 s of training on 2 quiet cores
DEFAULT_STEPS = {"CartPole-": 2_000_000, "minigrid:": 300_000}
QUICK_STEPS = {"CartPole-": 200_000, "minigrid:": 30_000}
FALLBACK_STEPS = 300_000


def budget_for(env_id: str, quick: bool, given: int | None) -> int:
    """The run's env-step budget: `given`, else the env family's default (the quick one with `quick`)."""
    if given is not None:
        return given
    table = QUICK_STEPS if quick else DEFAULT_STEPS
    return next((n for prefix, n in table.items() if env_id.startswith(prefix)), FALLBACK_STEPS // (10 if quick else 1))


def timed_records(run_dir: Path) -> list[dict]:
    """The run's `metrics.jsonl` records that carry a time and an env-step count, in file order."""
    return [r for r in read_records(run_dir)
            if isinstance(r.get("time"), int | float) and isinstance(r.get("env_steps"), int | float)]


def steady_rate(records: list[dict], total_steps: int, skip_fraction: float) -> dict:
    """Env steps/s between the first record at or after `skip_fraction x total_steps` env steps and the last
    record (see the module docstring), with the window's ends; ValueError when the window is empty."""
    start = next((r for r in records if r["env_steps"] >= skip_fraction * total_steps), None)
    final = records[-1]["env_steps"] if records else 0
    end = next((r for r in records if r["env_steps"] >= final), None)  # the shutdown record adds no steps
    if start is None or end is None or end["time"] <= start["time"]:
        raise ValueError(f"no steady window: {len(records)} records, the last at {final} env steps; "
                         "raise --total-steps")
    steps, seconds = end["env_steps"] - start["env_steps"], end["time"] - start["time"]
    return {
        "steady_env_steps_per_s": steps / seconds,
        "window_env_steps": steps,
        "window_s": seconds,
        "window_start_env_steps": start["env_steps"],
        "levels_buffered_start": start.get("levels_buffered"),
        "levels_buffered_end": end.get("levels_buffered"),
        "levels_replay_fraction_end": end.get("levels_replay_fraction"),
        "policy_lag_mean_end": end.get("policy_lag_mean"),
    }


def train_command(env_id: str, arm: str, seed: int, total: int, backend: str, run_dir: Path,
                  extra: list[str]) -> list[str]:
    """`levelray train` on the env's preset, unbounded levels, level strategy `arm`."""
    return [*LEVELRAY, "train", "--backend", backend, "--env", env_id, "--num-levels", "0", "--start-level", "0",
            "--level-strategy", arm, "--total-steps", str(total), "--seed", str(seed), "--metrics-port", "0",
            "--report-interval", "1", "--quiet", "--tensorboard", "false", "--run-dir", str(run_dir), *extra]


def one_run(env_id: str, arm: str, seed: int, total: int, args: argparse.Namespace, out: Path) -> dict:
    """Run one arm once; its steady env steps/s and what else the JSON keeps of it."""
    name = f"{env_id.replace(':', '_').replace('/', '_')}-{arm}-r{seed}"
    run_dir = out / name
    load_start = os.getloadavg()[0]
    started = time.time()
    run_levelray(train_command(env_id, arm, seed, total, args.backend, run_dir, args.train_args),
                 out / f"train-{name}.log")
    wall_s = time.time() - started
    records = timed_records(run_dir)
    return {"env": env_id, "arm": arm, "round": seed, "run_dir": str(run_dir), "wall_s": wall_s,
            "env_steps": records[-1]["env_steps"], "load_start": load_start, "load_end": os.getloadavg()[0],
            **steady_rate(records, total, args.skip_fraction)}


def summarise(runs: list[dict]) -> dict:
    """Per arm: median and mean ± CI of steady env steps/s; the paired ratio value_l1/random per round."""
    arms = {}
    for arm in ARMS:
        rates = [r["steady_env_steps_per_s"] for r in runs if r["arm"] == arm]
        arms[arm] = {"median": statistics.median(rates), **ci_summary(rates), "values": rates}
    by_round = {(r["round"], r["arm"]): r["steady_env_steps_per_s"] for r in runs}
    rounds = sorted({r["round"] for r in runs})
    ratios = [by_round[(k, "value_l1")] / by_round[(k, "random")] for k in rounds]
    ratio = {"median": statistics.median(ratios), **ci_summary(ratios), "per_round": ratios}
    return {"arms": arms, "ratio": ratio, "verdict": verdict(ratio)}


def verdict(ratio: dict) -> str:
    """Requirement ratio >= 0.98: met (95% CI at or above), missed (CI below) or undecided (the CI spans it)."""
    if ratio["ci95"] is None:
        return "undecided (one round: no CI)"
    lo, hi = ratio["mean"] - ratio["ci95"], ratio["mean"] + ratio["ci95"]
    if lo >= REQUIRED_RATIO:
        return f"met (95% CI [{lo:.3f}, {hi:.3f}] >= {REQUIRED_RATIO})"
    if hi < REQUIRED_RATIO:
        return f"missed (95% CI [{lo:.3f}, {hi:.3f}] < {REQUIRED_RATIO})"
    return f"undecided (95% CI [{lo:.3f}, {hi:.3f}] spans {REQUIRED_RATIO}: more rounds)"


def print_env(env_id: str, total: int, runs: list[dict], summary: dict) -> None:
    print(f"\n{env_id}, --num-levels 0, {total:,} env steps per run; steady env steps/s (see the docstring)")
    print_table([[r["round"], r["arm"], f"{r['steady_env_steps_per_s']:,.0f}", f"{r['window_s']:.1f}",
                  r["levels_buffered_end"], f"{r['load_start']:.1f} -> {r['load_end']:.1f}"] for r in runs],
                ["round", "arm", "env steps/s", "window s", "buffered at end", "load 1-min"])
    rows = [[arm, f"{a['median']:,.0f}", fmt_ci(a, ",.0f"), a["n"]] for arm, a in summary["arms"].items()]
    rat = summary["ratio"]
    rows.append(["value_l1 / random (paired)", f"{rat['median']:.4f}", fmt_ci(rat, ".4f"), rat["n"]])
    print_table(rows, ["arm", "median", "mean ± 95% CI", "rounds"])
    print("ratio per round: " + ", ".join(f"{x:.4f}" for x in rat["per_round"]))
    print(f"requirement value_l1 / random >= {REQUIRED_RATIO}: {summary['verdict']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="one short round per arm per env (a smoke test)")
    p.add_argument("--envs", default="CartPole-v1,minigrid:DoorKey-5x5", help="comma-separated env ids")
    p.add_argument("--rounds", type=int, default=5, help="rounds per env (each: one random, one value_l1 run)")
    p.add_argument("--total-steps", type=int, default=None,
                   help="env steps per run, every env (default by env: CartPole 2M, MiniGrid 300k)")
    p.add_argument("--skip-fraction", type=float, default=0.2,
                   help="the steady window starts at this fraction of the env-step budget")
    p.add_argument("--backend", choices=("ray", "inline"), default="ray")
    p.add_argument("--out-dir", default=None, help="run directories (default: a fresh benchmarks/out/...)")
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "level_service_overhead.json"))
    p.add_argument("--learning", action="store_true",
                   help="let the policy learn (default: learning rate 0, see the module doc)")
    p.add_argument("train_args", nargs="*", help="extra `levelray train` flags, after --")
    args = p.parse_args(argv)
    if not args.learning:
        args.train_args = ["--learning-rate", "0", *args.train_args]
    if not 0.0 <= args.skip_fraction < 1.0:
        p.error(f"--skip-fraction must be in [0, 1), got {args.skip_fraction}")
    rounds = 1 if args.quick else args.rounds
    out = Path(args.out_dir) if args.out_dir else ROOT / "benchmarks" / "out" / "level_service_overhead"
    if out.exists() and not args.out_dir:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    envs = [e.strip() for e in args.envs.split(",") if e.strip()]

    started = time.time()
    results = {}
    for env_id in envs:
        total = budget_for(env_id, args.quick, args.total_steps)
        order = [(r, arm) for r in range(rounds) for arm in (ARMS if r % 2 == 0 else ARMS[::-1])]  # ABBA...
        runs = [one_run(env_id, arm, r, total, args, out) for r, arm in order]
        summary = summarise(runs)
        print_env(env_id, total, runs, summary)
        results[env_id] = {"total_steps": total, "runs": runs, **summary}
    wall_s = time.time() - started
    print(f"\n{wall_s / 60:.1f} min in all")
    config = {"envs": envs, "rounds": rounds, "quick": args.quick, "backend": args.backend, "arms": ARMS,
              "skip_fraction": args.skip_fraction, "train_args": args.train_args, "required_ratio": REQUIRED_RATIO,
              "command": train_command("ENV", "ARM", 0, 0, args.backend, Path("RUN"), args.train_args)[len(LEVELRAY):]}
    write_json(args.json, {"config": config, "wall_s": wall_s, "results": results},
               benchmark="level_service_overhead")
    return 0


if __name__ == "__main__":
    sys.exit(main())
