"""CartPole on Ray with and without PopArt: does the value head fit, and does the policy collapse?

    python -m benchmarks.cartpole_value_scale [--seeds 5] [--learning-rate 1e-3] [--arms popart,plain]
                                              [--json benchmarks/results/cartpole_value_scale.json]

The configuration of `tests/test_ray_system.py` (2 actors x 8 envs, 4 unrolls per submit, 8 unrolls per
update, ~3 versions of policy lag), run to mean return 475 or 3M env steps, once per seed and arm, one
run after the other on one embedded Ray. Per run: env steps and seconds to 475, the median explained
variance of the value head after the first 100k steps, and whether the policy collapsed (final mean
return below 20: one action always, the pole falls in ~9 steps).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from benchmarks.common import print_table, write_json

ARMS = {"popart": True, "plain": False}


def one_run(run_dir: str, *, seed: int, value_normalization: bool, learning_rate: float) -> dict:
    from levelray.contracts.config import RunConfig, replace_paths
    from levelray.deploy.report.runs import read_records
    from levelray.deploy.rundir import RunDir
    from levelray.deploy.training.driver import train

    cfg = replace_paths(RunConfig(), {
        "env.id": "CartPole-v1", "env.num_levels": 0,
        "actors.num_actors": 2, "actors.envs_per_actor": 8, "actors.unrolls_per_submit": 4,
        "learner.batch_size": 8, "learner.learning_rate": learning_rate,
        "learner.value_normalization": value_normalization,
        "metrics_port": 0, "report_interval_s": 0.5,
        "total_steps": 3_000_000, "stop_at_return": 475.0, "seed": seed,
        "run_dir": run_dir,
    })
    train(cfg, RunDir.start(run_dir), quiet=True)
    records = read_records(run_dir)
    reached = next((r for r in records if (r.get("episode_return_mean") or 0) >= 475), None)
    ev = [r["learner_explained_variance"] for r in records
          if r["env_steps"] > 100_000 and r.get("learner_explained_variance") is not None]
    return {
        "seed": seed,
        "steps_to_475": reached["env_steps"] if reached else None,
        "seconds_to_475": round(reached["elapsed_s"], 1) if reached else None,
        "median_explained_variance": round(statistics.median(ev), 3) if ev else None,
        "collapsed": (records[-1].get("episode_return_mean") or 0) < 20,
        "env_steps": records[-1]["env_steps"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--arms", default="popart,plain")
    parser.add_argument("--json", default="benchmarks/results/cartpole_value_scale.json")
    args = parser.parse_args()
    import ray

    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    root = Path(tempfile.mkdtemp(prefix="levelray-value-scale-"))
    rows = []
    for seed in range(args.seeds):  # arms interleaved, so machine load hits both alike
        for arm in args.arms.split(","):
            row = one_run(str(root / f"{arm}-{seed}"), seed=seed, value_normalization=ARMS[arm],
                          learning_rate=args.learning_rate)
            rows.append({"arm": arm, **row})
            print(rows[-1], flush=True)
    print_table(rows, ["arm", "seed", ("steps_to_475", "steps to 475"), ("seconds_to_475", "s to 475"),
                       ("median_explained_variance", "median EV"), "collapsed"],
                title=f"CartPole-v1 on Ray, lr {args.learning_rate:g}")
    write_json(args.json, {"learning_rate": args.learning_rate, "runs": rows}, benchmark="cartpole_value_scale")


if __name__ == "__main__":
    main()
