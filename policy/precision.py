"""The float type the networks compute in: bfloat16 autocast where the hardware runs it fast, float32 elsewhere.

`learner.precision` (`--precision`):

* `fp32`: everything in float32;
* `bf16`: the networks' forward passes (and so their backward) under `torch.autocast(dtype=torch.bfloat16)`,
  on any device (with a warning where bf16 is not fast: PyTorch emulates it there, slower than fp32);
* `auto` (the default): on a device with fast bf16, bf16 for the networks that measured faster in it: the
  learner's updates of `AUTO_BF16`, the actors' inference of `AUTO_BF16_INFERENCE[device type]`; fp32 otherwise.

What bf16 changes is only the arithmetic inside the networks. Parameters, gradients and the optimiser state stay
float32 (autocast casts per op, and only the ops on its bf16 list), and the networks' outputs are cast back to
float32 as they leave (`Learner._network`, `RolloutWorker.act`), so V-trace, the losses, PopArt's statistics,
replay priorities and PLR's scores are float32 arithmetic on those outputs. The model loss runs in float32.

Fast bf16 means: a CUDA device that supports it (`torch.cuda.is_bf16_supported()`: Ampere or later), or a CPU
whose flags include `avx512_bf16` or `amx_bf16` (oneDNN's native bf16 kernels; detected from the CPU, never
assumed). Which networks `auto` puts in bf16 was measured per network, update and inference apart
(`benchmarks/bench_learner`, RESULTS.md: "bf16"): the IMPALA CNN, a large convolution stack, gains
in both on a CPU with native bf16, and in the update on a GPU; the MiniGrid net's and the MLP's few small products
lose to the casts or gain too little to matter. A GPU's actor step is launch-bound: there bf16 inference only adds
the casts' kernels (RESULTS.md, "On a GPU, fourth loan": the IMPALA CNN's step 17-42% slower at 16 envs over four
loans, 1-7% faster alone from 256, and BigFish's run at 256 envs faster with it in fp32), so no network infers in
bf16 there.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path

import torch

__all__ = ["AUTO_BF16", "AUTO_BF16_INFERENCE", "PRECISIONS", "autocast", "bf16_is_fast", "compute_dtype",
           "lstm_unroll_dtype"]

log = logging.getLogger(__name__)

PRECISIONS = ("auto", "fp32", "bf16")
# The networks `auto` runs in bf16 on fast-bf16 hardware (measured: benchmarks/RESULTS.md, "bf16" and the GPU
# loans): in the learner's update, and in the actors' forward pass (per device type) at an env vector's batch
AUTO_BF16 = frozenset({"impala_cnn"})
AUTO_BF16_INFERENCE = {"cpu": frozenset({"impala_cnn"}), "cuda": frozenset()}
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux's /proc/cpuinfo; empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def bf16_is_fast(device: torch.device) -> bool:
    """Whether `device` runs bf16 matrix products natively (see the module docstring)."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        return torch.backends.mkldnn.is_available() and any(f in _cpu_flags() for f in CPU_BF16_FLAGS)
    return False


def compute_dtype(precision: str, device: torch.device, network: str, *, inference: bool = False) -> torch.dtype:
    """`torch.bfloat16` or `torch.float32` for `network` (a resolved `learner.model` kind) on `device`, in the
    learner's update or (`inference`) in an actor's forward pass."""
    if precision == "fp32":
        return torch.float32
    fast = bf16_is_fast(device)
    if precision == "bf16":
        if not fast:
            log.warning("precision bf16 on %s, which has no fast bf16 (a CUDA GPU with bf16, or a CPU with %s): "
                        "it is emulated, slower than fp32", device, " or ".join(CPU_BF16_FLAGS))
        return torch.bfloat16
    if precision == "auto":
        measured_faster = AUTO_BF16_INFERENCE.get(device.type, frozenset()) if inference else AUTO_BF16
        return torch.bfloat16 if fast and network in measured_faster else torch.float32
    raise ValueError(f"learner.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


def lstm_unroll_dtype(lstm_precision: str, device: torch.device) -> torch.dtype:
    """What a learner's LSTM core computes its unrolls in (`learner.lstm_precision`, `LSTMCore.unroll_dtype`). bf16
    is oneDNN's LSTM, measured on a CPU only: elsewhere it is refused (CUDA's bf16 LSTM depends on the cuDNN and
    PyTorch builds), and on a CPU without fast bf16 it is emulated, with a warning."""
    if lstm_precision == "fp32":
        return torch.float32
    if lstm_precision != "bf16":
        raise ValueError(f"learner.lstm_precision must be fp32 or bf16, got {lstm_precision!r}")
    if device.type != "cpu":
        raise ValueError(f"learner.lstm_precision bf16 (--lstm-precision) runs oneDNN's bf16 LSTM on a CPU; the "
                         f"learner is on {device}: use --lstm-precision fp32 there")
    if not bf16_is_fast(device):
        log.warning("lstm_precision bf16 on a CPU without %s: it is emulated, slower than fp32",
                    " or ".join(CPU_BF16_FLAGS))
    return torch.bfloat16


def autocast(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    """The autocast context for `dtype` on `device`; a no-op for float32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)
