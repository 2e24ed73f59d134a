"""Learner throughput: samples/s of one V-trace update (forward, backward, Adam step), fp32 against bf16, and the
actors' inference in both.

    python -m benchmarks.bench_learner [--device auto|cpu|cuda] [--json PATH] [--quick] [--seconds S]
        [--threads 1,2] [--precisions fp32,bf16] [--compile]

Updates: the IMPALA CNN on procgen-shaped uint8 observations at T=20 x B=32 (640 samples: the procgen preset's
batch of 2 unrolls x 16 envs) and B=128 (2,560), the MiniGrid net on MiniGrid's symbolic view at B=32, and the MLP
on CartPole-shaped observations at B=32 and B=256; each in each precision (`learner.precision`) and torch
thread count. Inference: the actors' torch forward pass (`dist_params` under `inference_mode`, as
`RolloutWorker.act`) at a batch of 16 observations (an actor's env vector), in obs/s; the MLP's actors use NumPy
and are not timed here. Adam steps: one step over each network's parameters, PyTorch's `foreach` implementation
against the `fused` one the learner uses, in µs. On the CPU the CNN update is the ceiling of procgen training on
this machine (training is learner-bound there). Needs torch and numpy only, no Ray, so it runs on the lent GPU
machines too.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from benchmarks.common import print_table, write_json
from levelray.contracts.config import LearnerConfig
from levelray.contracts.spec import MINIGRID_OBS, EnvSpec
from levelray.learner.learner import Learner
from levelray.policy.models import build_model
from levelray.policy.precision import autocast, compute_dtype

CASES = {
    "impala_cnn": EnvSpec((64, 64, 3), "uint8", True, num_actions=15),
    "minigrid_cnn": EnvSpec((7, 7, 4), "uint8", True, num_actions=7, obs_encoding=MINIGRID_OBS),
    "mlp": EnvSpec((4,), "float32", True, num_actions=2),
}
OBS_HIGH = {"minigrid_cnn": 6}  # MiniGrid's symbolic view: small object, colour and state indices
UPDATES = [("impala_cnn", 32), ("impala_cnn", 128), ("minigrid_cnn", 32), ("mlp", 32), ("mlp", 256)]
INFERENCE = ("impala_cnn", "minigrid_cnn")
INFERENCE_BATCH = 16
COLUMNS = ["model", "precision", ("torch_threads", "threads"), "T", "B", ("update_ms", "update ms"),
           ("samples_per_s", "samples/s"), ("warmup_s", "first 3 updates s")]
INFERENCE_COLUMNS = ["model", "precision", ("torch_threads", "threads"), "batch", ("obs_per_s", "obs/s")]


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


def measure(model: str, device: str, T: int, B: int, seconds: float, precision: str = "fp32",
            compile_net: bool = False) -> dict:
    spec = CASES[model]
    learner = Learner(spec, LearnerConfig(device=device, precision=precision, compile=compile_net), seed=0)
    batch = make_batch(spec, T, B, np.random.default_rng(0), OBS_HIGH.get(model, 256))
    warmup = time.perf_counter()
    for _ in range(3):  # with torch.compile, the first call compiles (the backward on the second)
        learner.update(batch)
    warmup_s = time.perf_counter() - warmup
    sync = torch.cuda.synchronize if learner.device.type == "cuda" else (lambda: None)
    sync()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        learner.update(batch)
        n += 1
    sync()
    elapsed = time.perf_counter() - start
    return {"model": model, "precision": precision + ("+compile" if compile_net else ""),
            "device": str(learner.device), "T": T, "B": B, "updates": n, "warmup_s": warmup_s,
            "update_ms": elapsed / n * 1e3, "samples_per_s": n * T * B / elapsed,
            "torch_threads": torch.get_num_threads()}


def measure_inference(model: str, seconds: float, precision: str) -> dict:
    """Observations per second through the actors' CPU forward pass at a batch of `INFERENCE_BATCH`."""
    spec = CASES[model]
    net = build_model(spec, model).eval()
    dtype = compute_dtype(precision, torch.device("cpu"), model, inference=True)
    obs = torch.from_numpy(make_batch(spec, 1, INFERENCE_BATCH, np.random.default_rng(0),
                                      OBS_HIGH.get(model, 256))["obs"][0])

    def forward() -> None:
        with torch.inference_mode(), autocast(torch.device("cpu"), dtype):
            net.dist_params(obs).float().numpy()

    for _ in range(5):
        forward()
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        forward()
        n += 1
    elapsed = time.perf_counter() - start
    return {"model": model, "precision": precision, "batch": INFERENCE_BATCH, "calls": n,
            "obs_per_s": n * INFERENCE_BATCH / elapsed, "torch_threads": torch.get_num_threads()}


def measure_adam(model: str, implementation: str, steps: int = 300) -> dict:
    """µs per `torch.optim.Adam` step over `model`'s parameters (random gradients), `foreach` or `fused`."""
    params = [p.detach().clone().requires_grad_() for p in build_model(CASES[model], model).parameters()]
    for p in params:
        p.grad = torch.randn_like(p)
    optimizer = torch.optim.Adam(params, lr=1e-4, **{implementation: True})
    for _ in range(10):
        optimizer.step()
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    return {"model": model, "adam": implementation, "tensors": len(params),
            "parameters": sum(p.numel() for p in params), "step_us": (time.perf_counter() - start) / steps * 1e6,
            "torch_threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", default="benchmarks/out/bench_learner.json")
    parser.add_argument("--quick", action="store_true", help="2 s a case, the smaller batches, 1 thread")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", default="1,2", help="torch thread counts, comma-separated")
    parser.add_argument("--precisions", default="fp32,bf16", help="learner.precision values, comma-separated")
    parser.add_argument("--compile", action="store_true",
                        help="also each case with learner.compile (torch.compile; its compile time is in the first 3 "
                             "updates)")
    args = parser.parse_args()
    seconds = 2.0 if args.quick else args.seconds
    threads = [1] if args.quick else [int(x) for x in args.threads.split(",")]
    precisions = args.precisions.split(",")
    updates = [(m, b) for m, b in UPDATES if not args.quick or b <= 32]
    results, inference = [], []
    for n_threads in threads:
        torch.set_num_threads(n_threads)
        for model, B in updates:
            results += [measure(model, args.device, 20, B, seconds, p, c) for p in precisions
                        for c in ((False, True) if args.compile else (False,))]
        inference += [measure_inference(model, seconds, p) for model in INFERENCE for p in precisions]
    torch.set_num_threads(threads[0])
    adam = [measure_adam(model, impl) for model in CASES for impl in ("foreach", "fused", "foreach", "fused")]
    print_table(results, COLUMNS)
    print_table(inference, INFERENCE_COLUMNS, title=f"\nactors' inference, batch {INFERENCE_BATCH}")
    print_table(adam, ["model", "adam", "tensors", "parameters", ("step_us", "µs a step")],
                title=f"\nAdam steps on the CPU, {threads[0]} thread(s)")
    write_json(args.json, {"results": results, "inference": inference, "adam": adam}, benchmark="bench_learner")


if __name__ == "__main__":
    main()
