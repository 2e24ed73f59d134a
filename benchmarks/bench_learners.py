"""One learner against several (`--num-learners`): env steps/s and samples trained/s of `levelray train` on Ray.

    python -m benchmarks.bench_learners [--env CartPole-v1] [--learners 1,2] [--rounds 3] [--total-steps N]
        [--out-dir DIR] [--json PATH] [-- extra levelray train flags]

Each round runs every learner count once (the order alternating round by round), with the env's preset and
`--seed r`, one run at a time; rates are the steady ones of `benchmarks.level_service_overhead` (from 20% of the
budget on, from `metrics.jsonl` records 1 s apart). `samples_trained` counts the steps every update trained on,
the union of the ranks' batches, so samples/s compares the learners' work directly.

On one machine the ranks share its cores with the actors: a second learner can only take CPU from the first and
from the actors, and adds an all-reduce per update. What several learners buy needs cores (or GPUs) of their own;
this measures what they cost where they have none.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from benchmarks.common import LEVELRAY, ROOT, fmt_ci, print_table, run_levelray, write_json
from benchmarks.level_service_overhead import steady_rate, timed_records
from levelray.deploy.report.stats import ci_summary


def one_run(args: argparse.Namespace, learners: int, seed: int, out: Path) -> dict:
    run = out / f"learners{learners}-r{seed}"
    cmd = [*LEVELRAY, "train", "--env", args.env, "--num-learners", str(learners), "--total-steps",
           str(args.total_steps), "--seed", str(seed), "--metrics-port", "0", "--report-interval", "1", "--quiet",
           "--tensorboard", "false", "--run-dir", str(run), *args.train_args]
    started = time.time()
    run_levelray(cmd, out / f"train-learners{learners}-r{seed}.log")
    records = timed_records(run)
    rate = steady_rate(records, args.total_steps, 0.2)
    start = next(r for r in records if r["env_steps"] == rate["window_start_env_steps"])
    end = next(r for r in records if r["env_steps"] == rate["window_start_env_steps"] + rate["window_env_steps"])
    return {"learners": learners, "round": seed, "wall_s": time.time() - started, **rate,
            "samples_trained_per_s": (end["samples_trained"] - start["samples_trained"]) / rate["window_s"],
            "updates": records[-1]["learner_version"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--learners", default="1,2")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--total-steps", type=int, default=1_000_000)
    p.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "out" / "bench_learners"))
    p.add_argument("--json", default=str(ROOT / "benchmarks" / "out" / "bench_learners.json"))
    p.add_argument("train_args", nargs="*", help="extra `levelray train` flags, after --")
    args = p.parse_args(argv)
    counts = [int(n) for n in args.learners.split(",")]
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for r in range(args.rounds):
        for n in counts if r % 2 == 0 else counts[::-1]:
            runs.append(one_run(args, n, r, out))
    rows = []
    for n in counts:
        mine = [x for x in runs if x["learners"] == n]
        rows.append({"learners": n, "rounds": len(mine),
                     "env_steps_per_s": ci_summary([x["steady_env_steps_per_s"] for x in mine]),
                     "samples_trained_per_s": ci_summary([x["samples_trained_per_s"] for x in mine]),
                     "updates": ci_summary([float(x["updates"]) for x in mine])})
    print(f"\n{args.env}, {args.total_steps:,} env steps per run; mean ± 95% CI over rounds")
    print_table([[row["learners"], row["rounds"], fmt_ci(row["env_steps_per_s"], ",.0f"),
                  fmt_ci(row["samples_trained_per_s"], ",.0f"), fmt_ci(row["updates"], ",.0f")] for row in rows],
                ["learners", "rounds", "env steps/s", "samples trained/s", "updates"])
    write_json(args.json, {"results": {"env": args.env, "total_steps": args.total_steps, "summary": rows,
                                       "runs": runs, "train_args": args.train_args}}, benchmark="bench_learners")
    return 0


if __name__ == "__main__":
    sys.exit(main())
