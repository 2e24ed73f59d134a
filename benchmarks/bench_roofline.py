"""How close the learner's update runs to this core's arithmetic peak, and so how much faster it can get.

    python -m benchmarks.bench_roofline [--updates N] [--json PATH]

One torch thread, CPU time. First the peak: a 1024³ matrix product in float32 by torch's `@` (MKL) and by oneDNN,
and in bf16 (oneDNN's AVX512-BF16 path where the CPU has one), GFLOP/s. Then each update of `CASES` (the maze net
with LSTM-256 at our batch, with the float32 and the bf16 core, and the main job's IMPALA CNN in bf16 as
`--precision auto` runs it): its CPU time per update, split by torch.profiler's self time into the LSTM (oneDNN's
fused layer, forward and backward), the convolutions (forward and backward), the max-pool (forward, backward and the
zero fill of its input gradient), the matrix products, Adam (its kernel and the optimizer's Python) and the rest
(elementwise operations, copies, autograd's engine); with each part's floating-point work (the convolutions' and
products' from `torch.utils.flop_counter`, the LSTM's counted: 2·4N·(F + N) a step forward, twice that backward) and
what it reaches against the peak of its precision. The last columns bound what any faster kernel can give: `all at
peak` is the update with the LSTM, convolutions and products at the peak and the rest as it is; `x if free` is the
update's speed-up if that part cost nothing.

The profiler's own cost inflates the many small operations ("rest") by a few percent; the shares are what to read.
Needs torch and numpy only.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.bench_learner import MAZE_LSTM, OBS_HIGH, SPECS, make_batch
from benchmarks.common import print_table, write_json
from levelray.contracts.config import LearnerConfig
from levelray.learner.learner import Learner

# (name, model, T, B, learner.precision, learner.lstm_size, learner.lstm_precision)
CASES = [
    ("maze 7x7, fp32 core", "minigrid_cnn", 20, 32, "fp32", MAZE_LSTM, "fp32"),
    ("maze 7x7, bf16 core", "minigrid_cnn", 20, 32, "fp32", MAZE_LSTM, "bf16"),
    ("maze 7x7, fp32 core", "minigrid_cnn", 256, 32, "fp32", MAZE_LSTM, "fp32"),
    ("IMPALA CNN, bf16", "impala_cnn", 20, 32, "bf16", 0, "fp32"),
]
# aten operators by part, each with its variants (`NAME_...`: its backward, its in-place form); any other is "rest"
PARTS = {
    "lstm": ("mkldnn_rnn_layer",),
    "conv": ("mkldnn_convolution", "convolution_backward", "_convolution"),
    "pool": ("max_pool2d",),
    "matmul": ("mm", "addmm", "bmm"),
    "adam": ("_fused_adam",),
}
ARITHMETIC = ("lstm", "conv", "matmul")  # the parts whose work is floating-point products


def peak_gflops(product: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], dtype: torch.dtype, n: int = 1024,
                seconds: float = 1.0) -> float:
    """GFLOP/s of `product` of two `n` x `n` matrices in `dtype` on this thread (CPU time)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    for _ in range(3):
        product(a, b)
    calls, start = 0, time.process_time()
    while time.process_time() - start < seconds:
        product(a, b)
        calls += 1
    return 2 * n**3 * calls / (time.process_time() - start) / 1e9


def onednn_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`a @ b.T` by oneDNN's linear: torch's float32 `@` on a CPU is MKL's, which on AMD CPUs runs its AVX2 code."""
    return torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")


def peaks() -> dict[str, float]:
    """This thread's GFLOP/s: float32 by torch's `@` (MKL) and by oneDNN, bf16 (oneDNN); "fp32" is the faster
    float32 one, what a part's share of the peak is taken against."""
    found = {"fp32_mkl": peak_gflops(torch.matmul, torch.float32), "bf16": peak_gflops(torch.matmul, torch.bfloat16)}
    try:
        found["fp32_onednn"] = peak_gflops(onednn_product, torch.float32)
    except (AttributeError, RuntimeError):  # a torch without oneDNN's linear
        found["fp32_onednn"] = 0.0
    found["fp32"] = max(found["fp32_mkl"], found["fp32_onednn"])
    return found


def lstm_flops(T: int, B: int, features: int, size: int) -> float:
    """Forward and backward FLOPs of an LSTM over `[T, B, features]`: 2·4N·(F + N) a step forward (the gates'
    products; the elementwise cell is negligible beside them), twice that backward (the input and weight
    gradients)."""
    return 3 * T * B * 2 * 4 * size * (features + size)


def part_of(name: str) -> str:
    """The part of `PARTS` a profiler event (`aten::op`) belongs to."""
    op = name.removeprefix("aten::")
    return next((part for part, ops in PARTS.items() if any(op == k or op.startswith(k + "_") for k in ops)),
                "rest")


def profile_parts(update: Callable[[], object], n: int) -> dict[str, float]:
    """Self CPU ms per update of each part of `PARTS` (and "rest"), over `n` profiled updates."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            update()
    ms = dict.fromkeys([*PARTS, "rest"], 0.0)
    for event in prof.key_averages():  # autograd's engine in "rest", the optimizer's Python in "adam"
        part = "adam" if event.key.startswith("Optimizer.") else part_of(event.key)
        ms[part] += event.self_cpu_time_total / 1e3 / n
    return ms


def counted_flops(update: Callable[[], object]) -> dict[str, float]:
    """FLOPs of one update by part, as torch's flop counter sees them (convolutions and products, both passes)."""
    counter = FlopCounterMode(display=False)
    with counter:
        update()
    flops = {"conv": 0.0, "matmul": 0.0}
    for op, count in counter.get_flop_counts()["Global"].items():
        flops["conv" if "convolution" in str(op) else "matmul"] += count
    return flops


def measure(name: str, model: str, T: int, B: int, precision: str, lstm_size: int, lstm_precision: str,
            peaks: dict[str, float], updates: int) -> dict:
    spec = SPECS[model]
    learner = Learner(spec, LearnerConfig(device="cpu", precision=precision, lstm_size=lstm_size,
                                          lstm_precision=lstm_precision), seed=0)
    batch = make_batch(spec, T, B, np.random.default_rng(0), OBS_HIGH.get(model, 256), lstm_size)
    update = lambda: learner.update(batch)  # noqa: E731
    for _ in range(3):
        update()
    start = time.process_time()
    for _ in range(updates):
        update()
    update_ms = (time.process_time() - start) / updates * 1e3
    parts = profile_parts(update, updates)
    flops = counted_flops(update)
    if lstm_size:
        features = learner.model.core.cell.input_size
        flops["lstm"] = lstm_flops(T + 1, B, features, lstm_size)
    scale = update_ms / sum(parts.values())  # the profiler's overhead spread evenly
    ms = {part: t * scale for part, t in parts.items()}
    peak = {"lstm": peaks[lstm_precision], "conv": peaks[precision], "matmul": peaks[precision]}
    row = {"case": name, "T": T, "B": B, "update_ms": update_ms}
    at_peak = update_ms
    for part in [*PARTS, "rest"]:
        row[f"{part}_ms"] = ms[part]
        row[f"{part}_free_x"] = update_ms / (update_ms - ms[part]) if ms[part] < update_ms else float("inf")
        if part in ARITHMETIC and flops.get(part):
            row[f"{part}_gflops"] = flops[part] / (ms[part] / 1e3) / 1e9 if ms[part] else None
            row[f"{part}_of_peak"] = row[f"{part}_gflops"] / peak[part] if ms[part] else None
            at_peak -= ms[part] - min(ms[part], flops[part] / (peak[part] * 1e9) * 1e3)
    row["all_at_peak_ms"] = at_peak
    row["all_at_peak_x"] = update_ms / at_peak
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--updates", type=int, default=10, help="updates timed, and as many profiled, per case")
    parser.add_argument("--json", default="benchmarks/out/bench_roofline.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    found = peaks()
    print(f"peak (1024³ product, one thread): fp32 {found['fp32_mkl']:.0f} GFLOP/s by torch's @ (MKL), "
          f"{found['fp32_onednn']:.0f} by oneDNN; bf16 {found['bf16']:.0f} GFLOP/s")
    rows = [measure(*case, peaks=found, updates=max(2, args.updates // (8 if case[1] == "impala_cnn" else 1)))
            for case in CASES]
    gflops = lambda part: (f"{part}_gflops", f"{part} GFLOP/s")  # noqa: E731
    print_table(rows, ["case", "T", "B", ("update_ms", "CPU ms"), ("lstm_ms", "LSTM ms"), gflops("lstm"),
                       ("conv_ms", "conv ms"), gflops("conv"), ("pool_ms", "pool ms"), ("matmul_ms", "products ms"),
                       ("adam_ms", "Adam ms"), ("rest_ms", "rest ms"), ("all_at_peak_x", "all at peak x"),
                       ("pool_free_x", "x if pool free"), ("rest_free_x", "x if rest free")])
    write_json(args.json, {"peak_gflops": found, "cases": rows}, benchmark="bench_roofline")


if __name__ == "__main__":
    main()
