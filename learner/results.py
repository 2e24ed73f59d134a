"""What one learner update hands back, left on the learner's device until something reads it.

On a GPU, every `.item()`, `float(tensor)` or `.cpu()` makes the host wait for all the kernels queued before it.
One per metric and per output made each update a string of such waits, during which the GPU idled while the host
queued the next kernels. So an update's metrics are `Metrics`, a mapping that holds device scalars until a value
is first read (then all of them in one copy) and computes its costlier values only then: a report reads one
update's metrics in many. Its per-step outputs are `StepOutputs`, each field copied to the host when first read:
replay reads three of them, the fast path without replay none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = ["LATER", "Metrics", "StepOutputs", "UpdateResult"]

LATER: Any = object()  # a `Metrics` value that its `later` function computes at the first read


class Metrics(Mapping[str, float]):
    """An update's metrics by name, Python numbers when read. `values`: each a host number, a device scalar (a
    0-dim tensor, never written in place after) or `LATER`, for those `later()` returns (device scalars or
    numbers) when the first value is read. Its names and their order are known without a read (`len`, `in`,
    iteration): `if metrics` waits for nothing."""

    def __init__(self, values: dict[str, Any], later: Callable[[], dict[str, Any]] | None = None):
        self._values = values
        self._later = later
        self._host: dict[str, float] | None = None

    def updated(self, extra: Mapping[str, float]) -> Metrics:
        """These metrics with `extra` (host numbers: new names after, known ones replaced in place), unread."""
        if self._host is not None:
            return Metrics({**self._host, **extra})
        return Metrics({**self._values, **extra}, self._later)

    def _read(self) -> dict[str, float]:
        if self._host is None:
            values = dict(self._values)
            if self._later is not None:
                values.update(self._later())
            self._host = on_host(values)
        return self._host

    def __getitem__(self, key: str) -> float:
        return self._read()[key]

    def __contains__(self, key: object) -> bool:
        return key in (self._host if self._host is not None else self._values)

    def __iter__(self) -> Iterator[str]:
        return iter(self._host if self._host is not None else self._values)

    def __len__(self) -> int:
        return len(self._host if self._host is not None else self._values)

    def __repr__(self) -> str:
        return repr(self._read())  # as the dict it reads as

    def __reduce__(self) -> tuple[type[Metrics], tuple[dict[str, float]]]:
        """Pickled (for another process) as read: host numbers only."""
        return Metrics, (self._read(),)


def on_host(values: dict[str, Any]) -> dict[str, Any]:
    """`values` with each tensor (a scalar) a Python float: the tensors of each device stacked and copied at once."""
    out = dict(values)
    by_device: dict[torch.device, list[str]] = {}
    for key, value in values.items():
        if isinstance(value, torch.Tensor):
            by_device.setdefault(value.device, []).append(key)
    for keys in by_device.values():
        read = torch.stack([values[k].detach().reshape(()).to(torch.float64) for k in keys]).tolist()
        out.update(zip(keys, read, strict=True))
    return out


def _on_host(slot: str) -> property:
    """A `StepOutputs` field kept in `slot`: the tensor it was given until it is first read, then that tensor's
    NumPy copy (later reads copy nothing). An array given as one stays as it is."""

    def read(outputs: StepOutputs) -> Any:
        value = getattr(outputs, slot)
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
            setattr(outputs, slot, value)
        return value

    return property(read)


class StepOutputs:
    """Per-step outputs of one update, NumPy on the host when read (tensors on the learner's device until then)."""

    advantages = _on_host("_advantages")  # [T, B] v_s - V(x_s): PLR's scores
    values = _on_host("_values")  # [T+1, B] V(x_t), reward units
    final_values = _on_host("_final_values")  # [T, B] V(final obs) at truncated steps, 0 elsewhere; reward units
    dist_params = _on_host("_dist_params")  # [T, B, P] the learner's policy distribution parameters (logits when
    # discrete)

    def __init__(self, advantages: np.ndarray | torch.Tensor, values: np.ndarray | torch.Tensor,
                 final_values: np.ndarray | torch.Tensor, dist_params: np.ndarray | torch.Tensor,
                 sampled_priorities: np.ndarray | None = None, abs_td: np.ndarray | None = None):
        self._advantages, self._values, self._final_values = advantages, values, final_values
        self._dist_params = dist_params
        # [n] the replay-sampling auxiliary loss's `AuxiliaryOutput.priorities`, one per item it trained on; None
        # without such a loss, or when it had no batch
        self.sampled_priorities = sampled_priorities
        self._abs_td = abs_td

    @property
    def abs_td(self) -> np.ndarray:
        """[T, B] |v_s - V(x_s)|: replay priorities (from `advantages`, on the host, unless given)."""
        if self._abs_td is None:
            self._abs_td = np.abs(self.advantages)
        return self._abs_td


class UpdateResult(NamedTuple):
    metrics: Metrics
    outputs: StepOutputs
