"""Helpers shared by the benchmark scripts: timing, a table printer, and the JSON result file."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path


def time_call(fn: Callable[[], object], *, repeats: int = 5, min_time: float = 0.2) -> dict:
    """Median/min seconds per call over `repeats` rounds, each at least `min_time` long."""
    fn()  # warm-up
    per_call = []
    for _ in range(repeats):
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        per_call.append(elapsed / n)
    return {"median_s": statistics.median(per_call), "min_s": min(per_call), "max_s": max(per_call)}


def machine() -> dict:
    info = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()}
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return info


def print_table(headers: list[str], rows: list[list]) -> None:
    cells = [[str(h) for h in headers]] + [[f"{c:,.3f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for i, r in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


def write_json(path: str | os.PathLike, name: str, results: object) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": machine(),
               "results": results}
    path.write_text(json.dumps(payload, indent=2))
    print(f"wrote {path}")
