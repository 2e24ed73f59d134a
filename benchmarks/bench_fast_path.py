"""The inline backend's fast path against the present path, per env step, on this machine's device (the CPU here).

    python -m benchmarks.bench_fast_path [--seconds S] [--rounds R] [--cases maze16,maze4096,cartpole,bigfish]
        [--json PATH]

The fast path: workers act through `DevicePolicy` with the learner's own network, unrolls kept where the learner
computes. The present path: the same backend whose workers act through `HostPolicy`s, each its own copy of the network
loaded with the learner's published weights after every update (as before the fast path, and as the Ray actors still
act). Both train; env steps/s counts everything (env steps, acting, updates, weight copies). Rounds alternate
between the two paths so that a change in the machine's load falls on both; the table gives each path's median over
rounds and the ratio fast / present.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmarks.common import print_table, write_json
from levelray.actors.acting import HostPolicy
from levelray.contracts.config import RunConfig, replace_paths
from levelray.deploy.training.inline import InlineBackend

CASES = {
    "maze16": {"env.id": "maze:13x13", "learner.lstm_size": 256, "actors.envs_per_actor": 16},
    "maze4096": {"env.id": "maze:13x13", "learner.lstm_size": 256, "actors.envs_per_actor": 4096,
                 "actors.num_actors": 1, "learner.batch_size": 1, "actors.unroll_length": 5},
    "cartpole": {"env.id": "CartPole-v1", "actors.envs_per_actor": 16},
    "bigfish": {"env.id": "procgen:bigfish", "actors.envs_per_actor": 16},
}


def as_present_path(backend: InlineBackend) -> InlineBackend:
    """`backend` with its workers acting through `HostPolicy`s (seeded as the inline backend seeds its workers),
    loaded with the learner's published weights now and after every update."""
    cfg = backend.cfg
    for i, worker in enumerate(backend.workers):
        worker.policy = HostPolicy(worker.spec, cfg.learner, worker.envs.num_envs, seed=cfg.seed * 1000 + i)
    backend._shares_network = False  # noqa: SLF001  (the present path: weights copied to each worker)
    backend._broadcast()  # noqa: SLF001
    return backend


def backends(overrides: dict) -> dict[str, InlineBackend]:
    """The fast path and the present path of one run config (seed 0, no level service: domain randomisation)."""
    cfg = replace_paths(RunConfig(), {"env.num_levels": 0, "levels.strategy": "random", "seed": 0,
                                      "total_steps": 10**12, **overrides})
    return {"fast": InlineBackend(cfg), "present": as_present_path(InlineBackend(cfg))}


def env_steps_per_s(backend: InlineBackend, seconds: float) -> float:
    start_steps, start = backend.core.counters["env_steps"], time.perf_counter()
    while time.perf_counter() - start < seconds:
        backend.train_step()
    return (backend.core.counters["env_steps"] - start_steps) / (time.perf_counter() - start)


def measure(case: str, seconds: float, rounds: int) -> dict:
    paths = backends(CASES[case])
    for backend in paths.values():  # warm-up: the first updates allocate and pick kernels
        backend.train_step()
    rates: dict[str, list[float]] = {"fast": [], "present": []}
    for r in range(rounds):
        for name in (("fast", "present") if r % 2 == 0 else ("present", "fast")):
            rates[name].append(env_steps_per_s(paths[name], seconds))
    for backend in paths.values():
        backend.close()
    fast, present = statistics.median(rates["fast"]), statistics.median(rates["present"])
    return {"case": case, "device": str(paths["fast"].acting_device), "fast": fast, "present": present,
            "ratio": fast / present, "fast_rounds": rates["fast"], "present_rounds": rates["present"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="seconds a round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per path, alternating")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--json", default="benchmarks/out/bench_fast_path.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = [measure(case, args.seconds, args.rounds) for case in args.cases.split(",")]
    print_table(rows, ["case", "device", ("fast", "fast env steps/s"), ("present", "present env steps/s"),
                       ("ratio", "fast / present")])
    write_json(args.json, {"rows": rows, "seconds": args.seconds, "rounds": args.rounds, "threads": args.threads},
               benchmark="bench_fast_path")


if __name__ == "__main__":
    main()
