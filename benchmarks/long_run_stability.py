"""Does a trained policy stay trained? Long runs with defaults, per arm and seed: the lowest return after the first
time the run reached its threshold, the lowest entropy, and whether it collapsed.

    python -m benchmarks.long_run_stability [--suite cartpole|doorkey|both] [--arms today,rms] [--seeds 10]
                                            [--first-seed 0] [--parallel 2] [--steps N]
                                            [--out benchmarks/out/long_run_stability]

CartPole-v1 with defaults on the Ray backend, the way users run it (2 actors x 8 envs, its policy lag of ~3;
a sweep's trials run inline, so this is a script): 10M env steps a run, threshold 475, "collapsed" = a mean return
below 200 after reaching 475. MiniGrid DoorKey-5x5 with its preset: 3M env steps, threshold 0.9 of the run's best
mean return, "collapsed" = below half of that best after reaching it. Runs go `--parallel` at a time (each its own
embedded Ray), every arm on the same seeds. A run whose directory already holds its last record is read, not run
again: an interrupted benchmark resumes where it stopped. Arms are extra `levelray train` flags (`ARMS`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.common import paired, print_table, write_json
from levelray.deploy.report.runs import read_records

ARMS = {  # "today" names the advantage scale the defaults had when the benchmark was written (sigma)
    "today": ["--advantage-scale", "sigma"],
    "rms": ["--advantage-scale", "rms"],
    "appo4": ["--algorithm", "appo", "--ppo-epochs", "4", "--advantage-scale", "sigma"],
}
SUITES = {
    "cartpole": {"flags": ["--env", "CartPole-v1", "--backend", "ray", "--num-actors", "2", "--envs-per-actor", "8"],
                 "steps": 10_000_000, "threshold": 475.0, "collapse": 200.0},
    "doorkey": {"flags": ["--env", "minigrid:DoorKey-5x5", "--backend", "ray"], "steps": 3_000_000,
                "threshold": None, "collapse": None},
}


def run_dir(out: Path, suite: str, arm: str, seed: int) -> Path:
    return out / suite / f"{arm}-seed{seed}"


def one_run(out: Path, suite: str, arm: str, seed: int, steps: int) -> Path:
    """Train one run of `steps` env steps unless its directory already holds a finished one."""
    path = run_dir(out, suite, arm, seed)
    spec = SUITES[suite]
    if path.exists() and (path / "metrics.jsonl").exists():
        records = read_records(path)
        if records and records[-1]["env_steps"] >= steps:
            return path
    cmd = [sys.executable, "-m", "levelray.deploy.cli", "train", *spec["flags"], *ARMS[arm],
           "--total-steps", str(steps), "--seed", str(seed), "--run-dir", str(path), "--overwrite",
           "--metrics-port", "0", "--report-interval", "5", "--quiet", "--tensorboard", "false"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f"{path.name}.log", "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False)
    return path


def summary(path: Path, suite: str) -> dict:
    """Per run: when it first reached its threshold, the lowest return and entropy after, and whether it
    collapsed (see the module doc)."""
    records = [r for r in read_records(path) if r.get("episode_return_mean") is not None]
    spec = SUITES[suite]
    best = max((r["episode_return_mean"] for r in records), default=0.0)
    threshold = spec["threshold"] if spec["threshold"] is not None else 0.9 * best
    collapse = spec["collapse"] if spec["collapse"] is not None else 0.5 * best
    first = next((i for i, r in enumerate(records) if r["episode_return_mean"] >= threshold), None)
    after = records[first + 1:] if first is not None else []
    return {
        "env_steps": records[-1]["env_steps"] if records else 0,
        "first_threshold_steps": records[first]["env_steps"] if first is not None else None,
        "lowest_return_after": min((r["episode_return_mean"] for r in after), default=None),
        "lowest_entropy_after": min((r.get("learner_entropy") or 0.0 for r in after), default=None),
        "collapsed": any(r["episode_return_mean"] < collapse for r in after),
        "final_return": records[-1]["episode_return_mean"] if records else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=("cartpole", "doorkey", "both"), default="cartpole")
    parser.add_argument("--arms", default="today,rms")
    parser.add_argument("--seeds", type=int, default=None, help="seeds up to N-1 (default: 10 CartPole, 5 DoorKey)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="start the seeds here, to add seeds to a benchmark run before (default 0)")
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--steps", type=int, default=None, help="env steps a run (default: the suite's)")
    parser.add_argument("--out", default="benchmarks/out/long_run_stability")
    args = parser.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        parser.error(f"--arms: unknown {', '.join(unknown)}; arms are {', '.join(ARMS)}")
    out = Path(args.out)
    suites = ["cartpole", "doorkey"] if args.suite == "both" else [args.suite]
    result = {}
    for suite in suites:
        last = args.seeds or (10 if suite == "cartpole" else 5)
        seeds = range(args.first_seed, last)
        jobs = [(arm, seed) for seed in seeds for arm in arms]
        with ThreadPoolExecutor(args.parallel) as pool:
            steps = args.steps or SUITES[suite]["steps"]
            paths = list(pool.map(one_run, *zip(*[(out, suite, arm, seed, steps) for arm, seed in jobs],
                                                  strict=True)))
        rows = [{"arm": arm, "seed": seed, **summary(path, suite)} for (arm, seed), path in zip(jobs, paths,
                                                                                             strict=True)]
        print(f"\n{suite}")
        print_table(rows)
        collapsed = {arm: sum(r["collapsed"] for r in rows if r["arm"] == arm) for arm in arms}
        print("collapsed: " + ", ".join(f"{arm} {n} of {len(seeds)}" for arm, n in collapsed.items()))
        reached = [r for r in rows if r["lowest_return_after"] is not None]  # runs that reached their threshold
        diffs = {f"{b} - {a}": paired(reached, a, b, "lowest_return_after") for a in arms[:1] for b in arms[1:]}
        result[suite] = {"runs": rows, "collapsed": collapsed, "paired_lowest_return_after": diffs}
    write_json(out / "long_run_stability.json", result, benchmark="long_run_stability")


if __name__ == "__main__":
    main()
