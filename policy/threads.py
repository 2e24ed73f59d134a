"""How many threads torch runs on in a levelray process, and how its idle threads wait: the one rule every
process entry applies (`levelray train`, `evaluate` and `report`, a benchmark's or a sweep's trial, the Ray
actors and tasks).

Two calls, in this order:
- `quiet_waits()` before torch is imported: OpenMP's idle threads sleep (`OMP_WAIT_POLICY=PASSIVE`) instead of
  spinning. OpenMP reads the variable once, when torch loads it; processes this one starts inherit it.
- `use_threads(requested)` once the run's config is known: torch's intra-op and inter-op threads.

`torch_threads(requested)` is the count, `requested` being the run's `num_threads` (0: auto):
- a positive `requested`: that many;
- inside a Ray task or actor: the CPUs Ray reserved for it (at least 1);
- `OMP_NUM_THREADS` set (by the user or a scheduler): that many;
- otherwise 1/`AUTO_RUNS` (half) of the CPUs this process may run on (its affinity mask), at least 1.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys

# Auto sizes a run so that this many runs side by side fit the CPUs they may use (see the module doc).
AUTO_RUNS = 2
WAIT_POLICY = "PASSIVE"
_interop_sized = False  # this process has sized torch's inter-op pool (`use_threads`)


def quiet_waits() -> None:
    """`OMP_WAIT_POLICY=PASSIVE` in this process's environment unless it is set: a waiting OpenMP thread then
    sleeps instead of spinning on a core another process needs. Call it before `import torch`."""
    os.environ.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)


def wait_policy_env() -> dict[str, str]:
    """The wait policy as environment variables for a process started elsewhere (a Ray actor on another node)."""
    return {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", WAIT_POLICY)}


def affinity_cpus() -> int:
    """CPUs this process may run on: its affinity mask (the machine's CPUs where the OS has no affinity call,
    as macOS)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def ray_reserved_cpus() -> int | None:
    """Inside a Ray task or actor: the CPUs Ray reserved for it, rounded down, at least 1 (an actor that asked
    for none runs on what is left over). None outside Ray's workers (a driver, a process without Ray)."""
    ray = sys.modules.get("ray")  # a Ray worker has imported Ray; nothing else needs to
    if ray is None or not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    if context.worker.mode != ray.WORKER_MODE:
        return None
    return max(1, math.floor(context.get_assigned_resources().get("CPU", 1)))


def _env_threads() -> int | None:
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def auto_threads(cpus: int) -> int:
    """Auto's count for a process that may run on `cpus` CPUs: `AUTO_RUNS` such runs side by side fit them."""
    return max(1, cpus // AUTO_RUNS)


def torch_threads(requested: int = 0) -> tuple[int, str]:
    """`(threads, why)`: the count the module doc's rule gives, and where it came from, for the start-up line."""
    if requested < 0:
        raise ValueError(f"num_threads must be 0 (auto) or a positive thread count, got {requested}")
    if requested:
        return requested, "num_threads"
    reserved = ray_reserved_cpus()
    if reserved is not None:
        return reserved, "Ray's reservation"
    env = _env_threads()
    if env is not None:
        return env, "OMP_NUM_THREADS"
    cpus = affinity_cpus()
    return auto_threads(cpus), f"auto, {cpus} CPUs usable"


def use_threads(requested: int = 0) -> int:
    """Size torch's intra-op and inter-op threads by `torch_threads(requested)`; returns the count.

    Torch sizes its inter-op pool once per process, before the pool's first work: the first call sizes it (the
    process entry's), later calls change the intra-op count only. Only one attempt is made: torch 2.13 records
    a refused size as the pool's size (`get_num_interop_threads` then reports a pool it does not have)."""
    import torch

    global _interop_sized
    threads, _why = torch_threads(requested)
    torch.set_num_threads(threads)
    if not _interop_sized:
        _interop_sized = True
        with contextlib.suppress(RuntimeError):  # torch work before this call started the pool
            torch.set_num_interop_threads(threads)
    return threads
