"""Env steps/s of one env vector on one core: the env alone (uniform random actions) and with the actor's
policy (`RolloutWorker.unroll`: the env plus the network's inference at K envs, as an actor runs it).

    python -m benchmarks.bench_env [--env minigrid:DoorKey-8x8 ...] [--envs 16] [--seconds 3] [--json PATH]

Episodes end and restart on levels drawn from `--num-levels` training levels, as in training; every
number is the median of 3 rounds of `--seconds` each.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from benchmarks.common import print_table, write_json
from levelray.actors.envs import make_env_vector
from levelray.actors.rollout import RolloutWorker
from levelray.contracts.config import EnvConfig

COLUMNS = [
    ("env", "env"),
    ("K", "K"),
    ("model", "model"),
    ("env_steps_per_s", "env only steps/s", lambda x: f"{x:,.0f}"),
    ("with_policy_steps_per_s", "env + policy steps/s", lambda x: f"{x:,.0f}"),
]


def rate(step, steps_per_call: int, seconds: float, rounds: int = 3) -> float:
    step()  # warm-up
    rates = []
    for _ in range(rounds):
        n, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            step()
            n += steps_per_call
        rates.append(n / elapsed)
    return statistics.median(rates)


def measure(env_id: str, K: int, num_levels: int, seconds: float) -> dict:
    cfg = EnvConfig(id=env_id, num_levels=num_levels)
    vec = make_env_vector(cfg, K, None, seed=0)
    vec.reset()
    rng = np.random.default_rng(0)
    n = vec.spec.num_actions
    env_only = rate(lambda: vec.step(rng.integers(0, n, size=K)), K, seconds)
    worker = RolloutWorker(make_env_vector(cfg, K, None, seed=1), 20, seed=0)
    with_policy = rate(worker.unroll, 20 * K, seconds)
    return {"env": env_id, "K": K, "model": type(worker.model).__name__, "env_steps_per_s": env_only,
            "with_policy_steps_per_s": with_policy}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", nargs="+", default=["minigrid:DoorKey-8x8", "minigrid:MultiRoom-N4-S5",
                                                     "minigrid:KeyCorridorS3R3"])
    parser.add_argument("--envs", type=int, default=16, help="K: envs in the vector")
    parser.add_argument("--num-levels", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each of the 3 timed rounds")
    parser.add_argument("--json", default="benchmarks/out/bench_env.json")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as on an actor
    results = [measure(env_id, args.envs, args.num_levels, args.seconds) for env_id in args.env]
    print_table(results, COLUMNS)
    write_json(args.json, {"results": results, "envs": args.envs, "seconds": args.seconds},
               benchmark="bench_env")


if __name__ == "__main__":
    main()
