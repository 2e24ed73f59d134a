"""The learner and the actors' forward pass on one GPU: the first GPU measurement of this project.

    python -m benchmarks.gpu_learner [--device auto|cpu|cuda] [--quick] [--json PATH] [--seconds S]
        [--models impala_cnn,minigrid_cnn,mlp] [--budget S] [--inference-batches 16,4096]

Every figure so far was taken on CPUs, where training is learner-bound; this script measures what one H100 or H200
changes, against the goals: the IMPALA CNN learner at >= 20,000 samples/s in bf16, and the maze fast path at
>= 300,000 env steps/s (whose actors' forward pass and host-to-device copies are measured here; the env itself is
not). It needs torch, numpy and levelray's contracts/policy/learner only (no Ray, no env packages), so it runs on a
bare GPU machine. One JSON document (`benchmarks/common.write_json`) with these sections:

* `environment`: torch and CUDA versions, the device, bf16 support, GPU memory, SMs, TF32 switches, torch threads.
* `updates`: samples/s of one V-trace update (`Learner.update`: forward, backward, Adam step; the batch copied
  from host memory each time, as in training) at T=20: the IMPALA CNN at B=32 (the procgen preset's batch) and
  B=256, the MiniGrid net at B=32 and B=512 without and with an LSTM-256 core, plus the LSTM at DCD's T=256 x B=32,
  the MLP at B=32 and B=1024; fp32 and bf16, eager and `learner.compile` (torch.compile). `warmup_s` is the first
  3 updates (compile time included), `peak_memory_mb` the CUDA allocator's peak over the case. The learner compiles
  only the feed-forward pass (an LSTM network unrolls eagerly: `Learner._forward`), so the LSTM cases have no
  compile rows; they would repeat the eager ones. A case that fails (torch.compile, out of memory) records
  `error` and the benchmark goes on.
* `inference`: obs/s of an actor's step on the device at a batch of 16 (an env vector) and 4096 (a fast-path
  vector), or the batches `--inference-batches` lists, each in fp32 and bf16: the forward pass on uint8
  observations already on the device (one recurrent step with the state kept there for LSTM-256), a Gumbel-max
  action sample on the device and the actions' copy to the host, which waits for the GPU: what an actor's step
  costs, kernel launches and the round trip included.
* `host_to_device`: GB/s of copying a uint8 observation batch, MiniGrid-sized [4096, 7, 7, 3] (0.6 MB) and
  procgen-sized [256, 64, 64, 3] (3 MB), from pinned and pageable memory and through `learner.device.host_to_device`
  (pin, then copy: the learner's path), median of many synchronised copies; and whether a pinned non_blocking copy
  on a side stream overlaps compute on the default stream (`overlap_fraction`, 1 full, 0 none).
* `peak_memory_mb`: the CUDA allocator's peak over the whole run.

On the CPU (`--device cpu`) the same sections and keys, with CPU values or None. Each update case is timed for
`--seconds` (2.0) after its 3 warm-up updates, each inference case for a quarter of that. The run fits a lent
machine's few minutes: the eager updates run first, then inference and copies, the compiled updates last (bf16
first), and `--budget` (100 s on CUDA; raise it where there is time) skips, as `skipped` rows with an `error`, the
update cases that would start after it; a case already started runs to its end, its compile included. The JSON
file is rewritten after each part (`complete` false until the end), so a run cut short keeps what it measured.
`--quick` (0.3 s a case, B=32, no T=256, compile for the MLP only, inference at 16 and 64) is there for the test
on the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from benchmarks.bench_learner import CASES, OBS_HIGH, make_batch, measure
from benchmarks.common import calls_in, print_table, write_json
from levelray.learner.device import host_to_device, pick_device
from levelray.policy.models import build_model
from levelray.policy.precision import autocast, bf16_is_fast, compute_dtype
from levelray.policy.recurrent import unroll

LSTM = 256
# (model, lstm_size, T, B): the update cases, in the order they run (each in every precision, eager and compiled)
UPDATE_SHAPES = [("impala_cnn", 0, 20, 32), ("impala_cnn", 0, 20, 256),
                 ("minigrid_cnn", 0, 20, 32), ("minigrid_cnn", 0, 20, 512),
                 ("minigrid_cnn", LSTM, 20, 32), ("minigrid_cnn", LSTM, 20, 512), ("minigrid_cnn", LSTM, 256, 32),
                 ("mlp", 0, 20, 32), ("mlp", 0, 20, 1024)]
INFERENCE_NETS = [("impala_cnn", 0), ("minigrid_cnn", 0), ("minigrid_cnn", LSTM), ("mlp", 0)]
PRECISIONS = ("fp32", "bf16")
COPY_SHAPES = {"minigrid": (4096, 7, 7, 3), "procgen": (256, 64, 64, 3)}
BUDGET_CUDA_S = 100.0
UPDATE_COLUMNS = ["model", "lstm", "T", "B", "precision", "compile", ("update_ms", "update ms"),
                  ("samples_per_s", "samples/s"), ("warmup_s", "first 3 s"), ("peak_memory_mb", "peak MB"), "error"]
INFERENCE_COLUMNS = ["model", "lstm", "batch", "precision", ("step_ms", "step ms"), ("obs_per_s", "obs/s"),
                     ("peak_memory_mb", "peak MB"), "error"]
COPY_COLUMNS = ["data", "MB", "method", ("median_us", "median µs"), ("gb_per_s", "GB/s")]


def environment(device: torch.device) -> dict:
    """What ran: torch, CUDA, the device and its bf16, memory and SMs (CPU values or None on the CPU)."""
    info = {"device": str(device), "torch": torch.__version__, "cuda": torch.version.cuda,
            "torch_threads": torch.get_num_threads(), "torch_interop_threads": torch.get_num_interop_threads(),
            "cpus": os.cpu_count()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        # fp32 figures depend on these: TF32 tensor cores for convolutions (cuDNN's default) and matrix products
        return info | {"device_name": props.name, "bf16_supported": torch.cuda.is_bf16_supported(),
                       "memory_total_mb": props.total_memory / 2**20, "sms": props.multi_processor_count,
                       "capability": f"{props.major}.{props.minor}",
                       "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                       "tf32_cudnn": torch.backends.cudnn.allow_tf32, "cudnn": torch.backends.cudnn.version()}
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 if hasattr(os, "sysconf") else None
    return info | {"device_name": _cpu_name(), "bf16_supported": bf16_is_fast(device), "memory_total_mb": memory,
                   "sms": None, "capability": None, "tf32_matmul": None, "tf32_cudnn": None, "cudnn": None}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


class Peak:
    """The CUDA allocator's peak per case (`case_mb`, after `reset`) and over the run (`overall_mb`); None on the
    CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.overall_mb: float | None = 0.0 if self.cuda else None

    def reset(self) -> None:
        if self.cuda:
            gc.collect()  # the last case's learner, so its tensors do not count in this case's peak
            self.case_mb()
            torch.cuda.reset_peak_memory_stats()

    def case_mb(self) -> float | None:
        if not self.cuda:
            return None
        mb = torch.cuda.max_memory_allocated() / 2**20
        self.overall_mb = max(self.overall_mb, mb)
        return mb


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def update_plan(models: list[str], quick: bool) -> list[tuple[str, int, int, int, str, bool]]:
    """`(model, lstm, T, B, precision, compile)` of each update case, the eager ones first. Quick: B=32 only, and
    compile for the MLP only (torch.compile on the CPU takes tens of seconds a network)."""
    shapes = [s for s in UPDATE_SHAPES if s[0] in models and (not quick or (s[3] == 32 and s[2] == 20))]
    eager = [(*s, p, False) for s in shapes for p in PRECISIONS]
    # bf16 first: it is the goal's precision, and `--budget` may stop the compiled cases part way
    compiled = [(*s, p, True) for p in reversed(PRECISIONS) for s in shapes
                if not s[1] and (not quick or s[0] == "mlp")]  # the learner compiles no recurrent unroll
    return eager + compiled


def update_case(case: tuple[str, int, int, int, str, bool], device: torch.device, seconds: float,
                peak: Peak) -> dict:
    """One row of `updates`: `bench_learner.measure` of `case` with the case's peak memory, or its `error`."""
    model, lstm, T, B, precision, compile_net = case
    row = {"model": model, "lstm": lstm, "T": T, "B": B, "precision": precision, "compile": compile_net}
    peak.reset()
    try:
        result = measure(model, str(device), T, B, seconds, precision, compile_net, lstm)
    except Exception as e:  # a failing case (torch.compile, out of memory) is a result, not the end of the run
        sync_quietly(device)
        return row | {"error": f"{type(e).__name__}: {e}"[:500], "peak_memory_mb": peak.case_mb()}
    keep = ("update_ms", "samples_per_s", "warmup_s", "updates", "torch_threads")
    return row | {k: result[k] for k in keep} | {"peak_memory_mb": peak.case_mb()}


def sync_quietly(device: torch.device) -> None:
    """Synchronise after a failure, which may have left an error of its own on the device."""
    with contextlib.suppress(Exception):
        sync(device)


def run_updates(plan: list, device: torch.device, seconds: float, peak: Peak, deadline: float) -> list[dict]:
    """The rows of `plan`'s cases; those that would start after `deadline` (perf_counter) are skipped."""
    rows = []
    for case in plan:
        if time.perf_counter() > deadline:
            model, lstm, T, B, precision, compile_net = case
            rows.append({"model": model, "lstm": lstm, "T": T, "B": B, "precision": precision,
                         "compile": compile_net, "skipped": True, "error": "skipped: past --budget"})
            continue
        rows.append(update_case(case, device, seconds, peak))
        r = rows[-1]
        print(f"  {r['model']} lstm={r['lstm']} T={r['T']} B={r['B']} {r['precision']} compile={r['compile']}: "
              f"{r.get('samples_per_s', float('nan')):,.0f} samples/s {r.get('error', '')}", flush=True)
    return rows


def sample_actions(logits: torch.Tensor) -> torch.Tensor:
    """Gumbel-max: one sample of the categorical of each row of `logits [N, A]`, int64 `[N]` on their device (no
    `torch.distributions`: its checks cost host round trips)."""
    u = torch.rand(logits.shape, device=logits.device).clamp_(min=1e-20)  # log(0) would give -inf noise
    return (logits.float() - (-u.log()).log()).argmax(-1)


def actor_step(model: str, lstm: int, batch: int, precision: str, device: torch.device) -> Callable[[], np.ndarray]:
    """An actor's step on `device` for `batch` envs: the forward pass on observations already there (uint8, float32
    for the MLP), one recurrent step with its state kept there when `lstm`, actions sampled there and copied to the
    host, `[batch]` int64."""
    spec = CASES[model]
    net = build_model(spec, model, lstm_size=lstm).to(device).eval()
    dtype = compute_dtype(precision, device, model, inference=True)
    obs = make_batch(spec, 0, batch, np.random.default_rng(0), OBS_HIGH.get(model, 256))["obs"][0]
    obs = torch.from_numpy(obs).to(device)  # [batch, *obs_shape]
    if not lstm:
        def step() -> np.ndarray:
            with torch.inference_mode():
                with autocast(device, dtype):
                    logits = net.dist_params(obs)
                return sample_actions(logits).cpu().numpy()
        return step
    state = net.core.initial_state(batch, device)  # [2, batch, lstm]
    extra = torch.zeros(1, batch, spec.core_input_size, device=device)
    starts = torch.zeros(1, batch, dtype=torch.bool, device=device)

    def recurrent_step() -> np.ndarray:
        nonlocal state
        with torch.inference_mode():
            with autocast(device, dtype):
                logits, _, h, c = unroll(net, obs[None], extra, starts, state)
            state = torch.stack([h[0], c[0]])
            return sample_actions(logits[0]).cpu().numpy()
    return recurrent_step


def inference_case(model: str, lstm: int, batch: int, precision: str, device: torch.device, seconds: float,
                   peak: Peak) -> dict:
    """One row of `inference`: obs/s of `actor_step` over `seconds` after 5 warm-up steps, or its `error`. Each
    step ends in the actions' copy to the host, which waits for the device: no other synchronisation is needed."""
    row = {"model": model, "lstm": lstm, "batch": batch, "precision": precision}
    peak.reset()
    try:
        step = actor_step(model, lstm, batch, precision, device)
        n, elapsed = calls_in(step, seconds)
    except Exception as e:  # as in `update_case`
        sync_quietly(device)
        return row | {"error": f"{type(e).__name__}: {e}"[:500], "peak_memory_mb": peak.case_mb()}
    return row | {"calls": n, "step_ms": elapsed / n * 1e3, "obs_per_s": n * batch / elapsed,
                  "peak_memory_mb": peak.case_mb()}


def copy_methods(x: np.ndarray, device: torch.device) -> dict[str, Callable[[], object]]:
    """The ways a host batch `x` reaches `device`: from pinned memory, from pageable memory, and the learner's
    `host_to_device` (a host copy into a pinned block, then the transfer). On the CPU, a clone of its memory."""
    if device.type != "cuda":
        return {"clone": lambda: torch.from_numpy(x).clone()}
    pageable = torch.from_numpy(x)
    pinned = pageable.pin_memory()
    dst = torch.empty(x.shape, dtype=torch.uint8, device=device)
    return {"pinned": lambda: dst.copy_(pinned, non_blocking=True),
            "pageable": lambda: dst.copy_(pageable, non_blocking=True),
            "host_to_device": lambda: host_to_device(x, device)}


def time_copy(copy: Callable[[], object], nbytes: int, device: torch.device, seconds: float,
              min_copies: int = 50) -> dict:
    """Median µs and GB/s (1e9 bytes) of `copy`, each copy timed alone between two synchronisations (so the
    launch is in it, as in a learner's step), over at least `min_copies` copies and `seconds`."""
    copy()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_copies or time.perf_counter() - start < seconds:
        sync(device)
        t0 = time.perf_counter()
        copy()
        sync(device)
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    return {"copies": len(times), "median_us": median * 1e6, "gb_per_s": nbytes / median / 1e9}


def copy_rows(device: torch.device, seconds: float) -> list[dict]:
    """The `host_to_device.copies` rows: every `COPY_SHAPES` batch (random uint8) by every `copy_methods`."""
    rows = []
    for name, shape in COPY_SHAPES.items():
        x = np.random.default_rng(0).integers(0, 256, size=shape, dtype=np.uint8)
        for method, copy in copy_methods(x, device).items():
            rows.append({"data": name, "shape": list(shape), "MB": x.nbytes / 1e6, "method": method,
                         **time_copy(copy, x.nbytes, device, seconds)})
    return rows


def _interleave(first: Callable[[], object], n_first: int, second: Callable[[], object], n_second: int) -> None:
    """Issue `n_first` calls of `first` and `n_second` of `second`, spread evenly through each other, so that
    neither runs alone at the end."""
    k = max(n_first, n_second)
    for i in range(k):
        if (i + 1) * n_first // k > i * n_first // k:
            first()
        if (i + 1) * n_second // k > i * n_second // k:
            second()


def overlap(device: torch.device, target_s: float = 0.05, repeats: int = 5) -> dict:
    """Whether pinned non_blocking copies of the procgen batch on a side stream overlap fp32 2048 x 2048 matrix
    products on the default stream: seconds of (a) the products alone, (b) the copies alone, each about `target_s`,
    (c) both issued together (medians of `repeats`), and `overlap_fraction = (a + b - c) / min(a, b)`: 1 when the
    shorter hides entirely under the longer, 0 when they run one after the other."""
    if device.type != "cuda":
        return {"overlap_fraction": None, "note": "no copy to a device on the CPU: nothing to overlap"}
    a = torch.randn(2048, 2048, device=device)
    out = torch.empty_like(a)
    src = torch.from_numpy(np.zeros(COPY_SHAPES["procgen"], dtype=np.uint8)).pin_memory()
    dst = torch.empty(src.shape, dtype=torch.uint8, device=device)
    side = torch.cuda.Stream(device)

    def matmul() -> None:
        torch.mm(a, a, out=out)

    def copy() -> None:
        with torch.cuda.stream(side):
            dst.copy_(src, non_blocking=True)

    def timed(fn: Callable[[], None]) -> float:
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        return time.perf_counter() - t0

    timed(lambda: _interleave(matmul, 5, copy, 5))  # warm-up: cuBLAS's handle, the streams
    n_mm = max(1, round(target_s / (timed(lambda: _interleave(matmul, 20, copy, 0)) / 20)))
    n_cp = max(1, round(target_s / (timed(lambda: _interleave(matmul, 0, copy, 20)) / 20)))
    alone_mm = statistics.median(timed(lambda: _interleave(matmul, n_mm, copy, 0)) for _ in range(repeats))
    alone_cp = statistics.median(timed(lambda: _interleave(matmul, 0, copy, n_cp)) for _ in range(repeats))
    both = statistics.median(timed(lambda: _interleave(matmul, n_mm, copy, n_cp)) for _ in range(repeats))
    return {"matmuls": n_mm, "copies": n_cp, "copy_mb": src.numel() / 1e6, "compute_s": alone_mm,
            "copy_s": alone_cp, "both_s": both,
            "overlap_fraction": (alone_mm + alone_cp - both) / min(alone_mm, alone_cp)}


def host_to_device_section(device: torch.device, seconds: float) -> dict:
    """`host_to_device`: `copy_rows` and `overlap`, or the `error` that stopped them (the rest of the run goes on)."""
    try:
        return {"copies": copy_rows(device, seconds), "overlap": overlap(device)}
    except Exception as e:  # as in `update_case`
        sync_quietly(device)
        return {"copies": [], "overlap": {"overlap_fraction": None}, "error": f"{type(e).__name__}: {e}"[:500]}


def warm_up(device: torch.device) -> None:
    """Start CUDA's context, cuBLAS and cuDNN before the first case, so that its `warmup_s` is its own."""
    if device.type == "cuda":
        x = torch.randn(8, 3, 16, 16, device=device)
        torch.nn.functional.conv2d(x, torch.randn(4, 3, 3, 3, device=device)).sum().item()
        (x.flatten(1) @ x.flatten(1).T).sum().item()


def positive_ints(text: str) -> tuple[int, ...]:
    """`--inference-batches`' comma-separated positive integers."""
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, comma-separated, such as 16,256,4096; "
                                         f"got {text!r}")
    return values


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto (CUDA when torch sees a GPU), cpu or cuda")
    parser.add_argument("--quick", action="store_true",
                        help="0.3 s a case, B=32 only, compile for the MLP only, inference at 16 and 64")
    parser.add_argument("--json", default="benchmarks/out/gpu_learner.json")
    parser.add_argument("--seconds", type=float, default=None,
                        help="timed seconds a case after 3 warm-up updates (2.0; 0.3 with --quick)")
    parser.add_argument("--models", default=",".join(CASES), help="networks to measure, comma-separated")
    parser.add_argument("--budget", type=float, default=None,
                        help=f"seconds after which no further update case starts ({BUDGET_CUDA_S:.0f} on CUDA "
                             f"without --quick, else none)")
    parser.add_argument("--inference-batches", type=positive_ints, default=None,
                        help="actor-step batches, comma-separated (16,4096; 16,64 with --quick)")
    parser.add_argument("--compiled-only", action="store_true",
                        help="only the torch.compile update cases (a second run for those a --budget skipped)")
    args = parser.parse_args()
    unknown = set(args.models.split(",")) - set(CASES)
    if unknown:
        parser.error(f"--models: no network {', '.join(sorted(unknown))} (there are {', '.join(CASES)})")
    args.inference_batches = args.inference_batches or ((16, 64) if args.quick else (16, 4096))
    return args


def print_results(doc: dict) -> None:
    print_table(list(doc["environment"].items()), ["key", "value"], title="\nenvironment")
    print_table(doc["updates"], UPDATE_COLUMNS, title="\nlearner updates")
    print_table(doc["inference"], INFERENCE_COLUMNS,
                title="\nactor steps on the device (forward, Gumbel-max sample, actions to the host)")
    print_table(doc["host_to_device"].get("copies", []), COPY_COLUMNS,
                title="\nuint8 observation batches to the device")
    print(f"\ncopy/compute overlap: {doc['host_to_device'].get('overlap')}")
    print(f"peak memory: {doc['peak_memory_mb']} MB; {doc['wall_s']:.0f} s")


def eager_inference_and_copies(doc: dict, plan: list, models: list[str], batches: tuple[int, ...],
                               device: torch.device, seconds: float, peak: Peak, deadline: float, path: str) -> None:
    """The eager update cases, the actor steps and the copies into `doc`, written to `path` after each part."""
    doc["updates"] = run_updates([c for c in plan if not c[5]], device, seconds, peak, deadline)
    write_json(path, doc, benchmark="gpu_learner")  # the run so far, should a later case hang
    # an actor's step takes well under a millisecond on a GPU: a quarter of a case's time is hundreds of steps
    doc["inference"] = [inference_case(m, n, b, p, device, seconds / 4, peak) for m, n in INFERENCE_NETS
                        if m in models for b in batches for p in PRECISIONS]
    write_json(path, doc, benchmark="gpu_learner")
    doc["host_to_device"] = host_to_device_section(device, min(seconds, 0.3))
    write_json(path, doc, benchmark="gpu_learner")


def main() -> None:
    args = parse_args()
    device = pick_device(args.device)
    seconds = args.seconds if args.seconds is not None else 0.3 if args.quick else 2.0
    budget = args.budget if args.budget is not None else (
        BUDGET_CUDA_S if device.type == "cuda" and not args.quick else math.inf)
    models = args.models.split(",")
    start = time.perf_counter()
    peak = Peak(device)
    warm_up(device)
    plan = update_plan(models, args.quick)
    doc = {"environment": environment(device),
           "settings": {"quick": args.quick, "seconds": seconds, "models": models,
                        "inference_batches": list(args.inference_batches),
                        "budget_s": budget if budget < math.inf else None},
           "updates": [], "inference": [], "host_to_device": {}, "peak_memory_mb": None, "complete": False}
    print(f"{doc['environment']['device_name']}: {len(plan)} update cases, {seconds} s each", flush=True)
    if not args.compiled_only:
        eager_inference_and_copies(doc, plan, models, args.inference_batches, device, seconds, peak, start + budget,
                                   args.json)
    doc["updates"] += run_updates([c for c in plan if c[5]], device, seconds, peak, start + budget)
    peak.reset()
    doc |= {"peak_memory_mb": peak.overall_mb, "wall_s": time.perf_counter() - start, "complete": True}
    print_results(doc)
    write_json(args.json, doc, benchmark="gpu_learner")


if __name__ == "__main__":
    main()
