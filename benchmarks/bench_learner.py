"""Learner throughput: samples/s of one V-trace update (forward, backward, Adam step), fp32 against bf16, and the
actors' inference in both.

    python -m benchmarks.bench_learner [--device auto|cpu|cuda] [--json PATH] [--quick] [--seconds S]
        [--threads 1,2] [--precisions fp32,bf16] [--compile] [--lstm-sizes 0,256] [--models impala_cnn,mlp] [--maze]
        [--appo-epochs 0,1,4] [--lstm-precisions fp32,bf16] [--maze-views minigrid,dcd]

Updates: the IMPALA CNN on procgen-shaped uint8 observations at T=20 x B=32 (640 samples: the procgen preset's
batch of 2 unrolls x 16 envs) and B=128 (2,560), the MiniGrid net on MiniGrid's symbolic view at B=32, and the MLP
on CartPole-shaped observations at B=32 and B=256; each in each precision (`learner.precision`) and torch
thread count. Inference: the actors' torch forward pass (`dist_params` under `inference_mode`, as
`RolloutWorker.act`) at a batch of 16 observations (an actor's env vector), in obs/s; the MLP's actors use NumPy
and are not timed here. Adam steps: one step over each network's parameters, PyTorch's `foreach` implementation
against the `fused` one the learner uses, in µs. On the CPU the CNN update is the ceiling of procgen training on
this machine (training is learner-bound there). `--lstm-sizes`: each case also with an LSTM core of that size
(`learner.lstm_size`): the update unrolls it from the batch's `core_state`, and the inference is one recurrent step
as an actor takes it (`policy.recurrent.unroll`, T = 1, every model, the MLP included: it has no NumPy path then;
the feed-forward MLP's inference is its NumPy path, `NumpyPolicy`). Needs torch and numpy only, no Ray, so it
runs on the lent GPU machines too.

The maze rows (`MAZE_UPDATES`, with the MiniGrid net in the list; `--maze`: those alone) are the maze's net (the
MiniGrid net on the maze's 7x7 view) with LSTM-256 at our maze batch (32 envs x 20 steps, 640 samples) and at DCD's
and JaxUED's (32 envs x 256 steps, 8,192 samples, 256-step BPTT), whatever `--lstm-sizes` says: each sample is one
gradient pass, so samples/s is the sample gradient passes/s that JaxUED's maze example reaches at 36,600/s on one
core of this machine (5 PPO epochs of 8,192 samples, one jitted XLA program: `JAXUED_ANCHOR`). With
`--appo-epochs 5` the maze rows also run DCD's update (APPO, 5 passes): its samples/s is the most env steps/s the
learner lets a run train, its gradient passes/s 5x that. `--lstm-precisions fp32,bf16`: the maze rows also with the
core unrolled in bf16 (`learner.lstm_precision`). `--maze-views minigrid,dcd`: the maze rows also on DCD's 5x5
view (`--maze-view dcd`), where the net has DCD's torso: the network of JaxUED's example, the like-for-like row
beside its anchor.

Beside the wall-clock time, each update's CPU time (`update_cpu_ms`, all the process's threads): on a machine other
work loads, wall-clock figures move by tens of percent while CPU time stays within a few.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from benchmarks.common import calls_in, print_table, write_json
from levelray.contracts.config import AppoConfig, LearnerConfig
from levelray.contracts.spec import MINIGRID_OBS, EnvSpec
from levelray.learner.learner import Learner
from levelray.policy.models import build_model
from levelray.policy.numpy_policy import NumpyPolicy
from levelray.policy.precision import autocast, compute_dtype
from levelray.policy.recurrent import unroll

CASES = {
    "impala_cnn": EnvSpec((64, 64, 3), "uint8", True, num_actions=15),
    "minigrid_cnn": EnvSpec((7, 7, 4), "uint8", True, num_actions=7, obs_encoding=MINIGRID_OBS),
    "mlp": EnvSpec((4,), "float32", True, num_actions=2),
}
# the maze net on DCD's 5x5 view (`--maze-view dcd`, DCD's torso: JaxUED's network), a maze row only
MAZE_VIEWS = {"minigrid": "minigrid_cnn", "dcd": "minigrid_cnn_dcd_view"}
MAZE_CASES = {"minigrid_cnn_dcd_view": EnvSpec((5, 5, 4), "uint8", True, num_actions=7, obs_encoding=MINIGRID_OBS)}
# MiniGrid's symbolic view: small object, colour and state indices
OBS_HIGH = {"minigrid_cnn": 6, "minigrid_cnn_dcd_view": 6}
SPECS = {**CASES, **MAZE_CASES}  # every case's spec, by name
UPDATES = [("impala_cnn", 32), ("impala_cnn", 128), ("minigrid_cnn", 32), ("mlp", 32), ("mlp", 256)]
MAZE_UPDATES = [(20, 32), (256, 32)]  # (T, B) of the maze net with LSTM-256: ours, then DCD's and JaxUED's
MAZE_LSTM = 256
JAXUED_ANCHOR = 36_600  # sample gradient passes/s of JaxUED's maze example on one core here (see the module doc)
INFERENCE = ("impala_cnn", "minigrid_cnn")
INFERENCE_BATCH = 16
COLUMNS = ["model", "algorithm", "lstm", "precision", ("lstm_precision", "lstm prec."), ("torch_threads", "threads"),
           "T", "B",
           ("update_ms", "update ms"), ("update_cpu_ms", "CPU ms"), ("samples_per_s", "samples/s"),
           ("passes_per_s", "gradient passes/s"), ("warmup_s", "first 3 updates s")]
INFERENCE_COLUMNS = ["model", "lstm", "precision", ("torch_threads", "threads"), "batch", ("obs_per_s", "obs/s")]


def make_batch(spec: EnvSpec, T: int, B: int, rng: np.random.Generator, obs_high: int = 256,
               lstm_size: int = 0) -> dict:
    """Random `[T, B, ...]` learner inputs of `spec`'s shapes (uint8 observations below `obs_high`), with a random
    `core_state [2, B, lstm_size]` and zero `core_inputs` where `lstm_size` > 0."""
    if spec.obs_dtype == "uint8":
        obs = rng.integers(0, obs_high, size=(T + 1, B, *spec.obs_shape), dtype=np.uint8)
    else:
        obs = rng.normal(size=(T + 1, B, *spec.obs_shape)).astype(np.float32)
    batch = {
        "obs": obs,
        "actions": rng.integers(0, spec.num_actions, size=(T, B)),
        "rewards": rng.normal(size=(T, B)).astype(np.float32),
        "terminated": rng.random((T, B)) < 0.01,
        "truncated": np.zeros((T, B), dtype=bool),
        "behaviour_params": rng.normal(size=(T, B, spec.num_actions)).astype(np.float32),
    }
    if lstm_size:
        batch["core_state"] = rng.normal(scale=0.1, size=(2, B, lstm_size)).astype(np.float32)
        batch["core_inputs"] = np.zeros((B, spec.core_input_size), dtype=np.float32)
    return batch


def measure(model: str, device: str, T: int, B: int, seconds: float, precision: str = "fp32",
            compile_net: bool = False, lstm_size: int = 0, appo_epochs: int = 0, lstm_precision: str = "fp32") -> dict:
    """`appo_epochs` > 0: APPO's update (`learner.algorithm appo`) with that many passes over the batch, one
    minibatch each; 0: IMPALA's. samples/s counts each batch sample once, however many passes an update makes."""
    spec = SPECS[model]
    algorithm = {"algorithm": "appo", "appo": AppoConfig(epochs=appo_epochs)} if appo_epochs else {}
    config = LearnerConfig(device=device, precision=precision, compile=compile_net, lstm_size=lstm_size,
                           lstm_precision=lstm_precision if lstm_size else "fp32", **algorithm)
    learner = Learner(spec, config, seed=0)
    batch = make_batch(spec, T, B, np.random.default_rng(0), OBS_HIGH.get(model, 256), lstm_size)
    warmup = time.perf_counter()
    for _ in range(3):  # with torch.compile, the first call compiles (the backward on the second)
        learner.update(batch)
    warmup_s = time.perf_counter() - warmup
    sync = torch.cuda.synchronize if learner.device.type == "cuda" else (lambda: None)
    sync()
    n, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        learner.update(batch)
        n += 1
    sync()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {"model": model, "algorithm": f"appo x{appo_epochs}" if appo_epochs else "impala", "lstm": lstm_size,
            "lstm_precision": config.lstm_precision,
            "precision": precision + ("+compile" if compile_net else ""),
            "device": str(learner.device), "T": T, "B": B, "updates": n, "warmup_s": warmup_s,
            "update_ms": elapsed / n * 1e3, "update_cpu_ms": cpu / n * 1e3, "samples_per_s": n * T * B / elapsed,
            "passes_per_s": n * T * B * max(appo_epochs, 1) / elapsed,
            "torch_threads": torch.get_num_threads()}


def measure_inference(model: str, seconds: float, precision: str, lstm_size: int = 0) -> dict:
    """Observations per second through the actors' CPU forward pass at a batch of `INFERENCE_BATCH`: the policy head
    alone (the NumPy path for the feed-forward MLP), or one recurrent step with its state."""
    spec = SPECS[model]
    net = build_model(spec, "auto", lstm_size=lstm_size).eval()
    dtype = compute_dtype(precision, torch.device("cpu"), model, inference=True)
    obs = torch.from_numpy(make_batch(spec, 1, INFERENCE_BATCH, np.random.default_rng(0),
                                      OBS_HIGH.get(model, 256))["obs"][0])
    state = net.core.initial_state(INFERENCE_BATCH) if lstm_size else None
    extra = torch.zeros(1, INFERENCE_BATCH, spec.core_input_size)
    starts = torch.zeros(1, INFERENCE_BATCH, dtype=torch.bool)
    numpy_policy = NumpyPolicy(net) if NumpyPolicy.supports(net) else None

    def forward() -> None:
        nonlocal state
        if numpy_policy is not None:
            numpy_policy.dist_params(obs.numpy())
            return
        with torch.inference_mode(), autocast(torch.device("cpu"), dtype):
            if state is None:
                net.dist_params(obs).float().numpy()
                return
            dist_params, _, h, c = unroll(net, obs[None], extra, starts, state)
            dist_params.float().numpy()
            state = torch.stack([h[0], c[0]])

    n, elapsed = calls_in(forward, seconds)
    return {"model": model, "lstm": lstm_size, "precision": "fp32 (numpy)" if numpy_policy else precision,
            "batch": INFERENCE_BATCH, "calls": n, "obs_per_s": n * INFERENCE_BATCH / elapsed,
            "torch_threads": torch.get_num_threads()}


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
    parser.add_argument("--lstm-sizes", default="0", help="learner.lstm_size values, comma-separated (0: none)")
    parser.add_argument("--models", default=",".join(CASES), help="networks to measure, comma-separated")
    parser.add_argument("--maze", action="store_true", help="only the maze net with LSTM-256 (MAZE_UPDATES)")
    parser.add_argument("--appo-epochs", default="0",
                        help="the update per case: 0 IMPALA's, N > 0 APPO's with N epochs; comma-separated")
    parser.add_argument("--lstm-precisions", default="fp32",
                        help="learner.lstm_precision values for the maze rows, comma-separated")
    parser.add_argument("--maze-views", default="minigrid",
                        help="the maze rows' views (env.maze_view), comma-separated: minigrid (7x7), dcd (5x5)")
    args = parser.parse_args()
    seconds = 2.0 if args.quick else args.seconds
    threads = [1] if args.quick else [int(x) for x in args.threads.split(",")]
    precisions = args.precisions.split(",")
    lstm_sizes = [int(x) for x in args.lstm_sizes.split(",")]
    models = args.models.split(",")
    appo_epochs = [int(x) for x in args.appo_epochs.split(",")]
    maze_views = args.maze_views.split(",")
    unknown = set(maze_views) - set(MAZE_VIEWS)
    if unknown:
        parser.error(f"--maze-views takes {', '.join(MAZE_VIEWS)}; got {', '.join(sorted(unknown))}")
    updates = [] if args.maze else [(m, b) for m, b in UPDATES if (not args.quick or b <= 32) and m in models]
    maze = [(T, B) for T, B in MAZE_UPDATES if args.maze or "minigrid_cnn" in models]
    compiled = (False, True) if args.compile else (False,)
    results, inference = [], []
    for n_threads in threads:
        torch.set_num_threads(n_threads)
        for model, B in updates:
            results += [measure(model, args.device, 20, B, seconds, p, c, n, e) for n in lstm_sizes
                        for p in precisions for c in compiled for e in appo_epochs]
        results += [measure(MAZE_VIEWS[view], args.device, T, B, seconds, p, c, MAZE_LSTM, e, lp)
                    for view in maze_views for T, B in maze for p in precisions for c in compiled
                    for e in appo_epochs for lp in args.lstm_precisions.split(",")]
        inference += [measure_inference(model, seconds, p, n) for model in models for n in lstm_sizes
                      for p in precisions if not args.maze and (n or model in INFERENCE or p == precisions[0])]
        inference += [measure_inference(MAZE_VIEWS[view], seconds, p, MAZE_LSTM) for view in maze_views
                      for p in precisions if maze]
    torch.set_num_threads(threads[0])
    adam = [measure_adam(model, impl) for model in CASES for impl in ("foreach", "fused", "foreach", "fused")]
    print_table(results, COLUMNS)
    if maze:
        print(f"(JaxUED's maze example, LSTM-256: {JAXUED_ANCHOR:,} sample gradient passes/s on one core)")
    print_table(inference, INFERENCE_COLUMNS, title=f"\nactors' inference, batch {INFERENCE_BATCH}")
    print_table(adam, ["model", "adam", "tensors", "parameters", ("step_us", "µs a step")],
                title=f"\nAdam steps on the CPU, {threads[0]} thread(s)")
    write_json(args.json, {"results": results, "inference": inference, "adam": adam}, benchmark="bench_learner")


if __name__ == "__main__":
    main()
