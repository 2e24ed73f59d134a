"""Where the learner computes, and how a host batch gets there.

Batches arrive as NumPy arrays in host memory, observations as uint8 (four times fewer bytes than float32 to
copy; the networks scale them to [0, 1] as their first op, so that runs on the device). On a CUDA device each
array is copied through page-locked (pinned) memory with `non_blocking=True`: a copy from pageable memory makes
the host wait for the transfer, one from pinned memory is queued on the stream and overlaps the host's work on
the next array (PyTorch's caching host allocator reuses the pinned blocks, so pinning costs one host memcpy, not
an allocation per batch). A dtype change happens after the copy, on the device. On the CPU the array is used in
place where it can be (`torch.from_numpy` shares its memory) and the same function runs, with nothing to copy.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["host_to_device", "pick_device"]


def pick_device(requested: str = "auto") -> torch.device:
    """`learner.device`: "auto" is CUDA when torch sees a GPU, else the CPU; a CUDA device that is not there is
    an error, not a silent fallback."""
    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {requested!r} requested but CUDA is not available")
    return torch.device(requested)


def host_to_device(x: np.ndarray | torch.Tensor, device: torch.device, dtype: torch.dtype | None = None
                   ) -> torch.Tensor:
    """`x` (any shape) as a tensor on `device`, cast to `dtype` there (None: keep its dtype). A tensor already on
    `device` (an unroll the inline backend's fast path kept there) is used as it is."""
    if isinstance(x, torch.Tensor):
        return x.to(device, dtype) if dtype is not None else x.to(device)
    t = torch.from_numpy(np.ascontiguousarray(x))
    t = t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t.to(device)
    return t if dtype is None else t.to(dtype)
