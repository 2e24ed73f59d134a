"""TensorBoard event files: every numeric field of each `metrics.jsonl` record, under the same name.

`tensorboard --logdir runs/` then shows each run directory as a run. The x axis is env steps (what
comparisons between methods hold fixed); nested fields become `section/field` (`replay/size`), lists are
left to `metrics.jsonl` (level weights, histograms). Written by the driver loop, so both backends have them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def scalars(record: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers of a record, nested dicts flattened with `/`; booleans, strings, lists and None
    are skipped."""
    out: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(scalars(value, f"{name}/"))
        elif isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


class TensorBoardWriter:
    """Appends records to an event file in `directory` (a new file per process, as TensorBoard expects)."""

    SKIPPED = frozenset({"time", "env_steps"})  # the wall clock and the x axis itself

    def __init__(self, directory: str | Path):
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(directory), flush_secs=10)

    def write(self, record: dict[str, Any]) -> None:
        step = int(record.get("env_steps") or 0)
        wall = record.get("time")
        for name, value in scalars(record).items():
            if name not in self.SKIPPED:
                self._writer.add_scalar(name, value, global_step=step, walltime=wall)

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()
