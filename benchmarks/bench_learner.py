"""Learner throughput: samples/s of one V-trace update (forward, backward, Adam step).

    python -m benchmarks.bench_learner [--device auto|cpu|cuda] [--json PATH] [--quick]

IMPALA CNN on procgen-shaped uint8 observations, batch of 32 unrolls x 20 steps (B=32, T=20), and the
MLP on CartPole-shaped observations. On the CPU the CNN figure is the ceiling for procgen training
on this machine (training is learner-bound there). Needs torch and numpy only, no Ray, so it runs
on the lent GPU machines too.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from benchmarks.common import print_table, write_json
from levelray.contracts.config import LearnerConfig
from levelray.contracts.spec import EnvSpec
from levelray.learner.learner import Learner

CASES = {
    "impala_cnn": EnvSpec((64, 64, 3), "uint8", True, num_actions=15),
    "mlp": EnvSpec((4,), "float32", True, num_actions=2),
}
COLUMNS = ["model", "device", "T", "B", ("update_ms", "update ms"), ("samples_per_s", "samples/s")]


def make_batch(spec: EnvSpec, T: int, B: int, rng: np.random.Generator, obs_high: int = 256) -> dict:
    """Random `[T, B, ...]` learner inputs of `spec`'s shapes (uint8 observations below `obs_high`)."""
    if spec.obs_dtype == "uint8":
        obs = rng.integers(0, obs_high, size=(T + 1, B, *spec.obs_shape), dtype=np.uint8)
    else:
        obs = rng.normal(size=(T + 1, B, *spec.obs_shape)).astype(np.float32)
    return {
        "obs": obs,
        "actions": rng.integers(0, spec.num_actions, size=(T, B)),
        "rewards": rng.normal(size=(T, B)).astype(np.float32),
        "terminated": rng.random((T, B)) < 0.01,
        "truncated": np.zeros((T, B), dtype=bool),
        "behaviour_params": rng.normal(size=(T, B, spec.num_actions)).astype(np.float32),
    }


def measure(model: str, device: str, T: int, B: int, seconds: float) -> dict:
    spec = CASES[model]
    learner = Learner(spec, LearnerConfig(device=device), seed=0)
    batch = make_batch(spec, T, B, np.random.default_rng(0))
    for _ in range(3):
        learner.update(batch)
    sync = torch.cuda.synchronize if learner.device.type == "cuda" else (lambda: None)
    sync()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        learner.update(batch)
        n += 1
    sync()
    elapsed = time.perf_counter() - start
    return {"model": model, "device": str(learner.device), "T": T, "B": B, "updates": n,
            "update_ms": elapsed / n * 1e3, "samples_per_s": n * T * B / elapsed,
            "torch_threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", default="benchmarks/out/bench_learner.json")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    seconds = 2.0 if args.quick else args.seconds
    results = [measure("impala_cnn", args.device, 20, 32, seconds), measure("mlp", args.device, 20, 32, seconds)]
    if not args.quick:
        results.append(measure("mlp", args.device, 20, 256, seconds))
    print_table(results, COLUMNS)
    write_json(args.json, {"results": results}, benchmark="bench_learner")


if __name__ == "__main__":
    main()
