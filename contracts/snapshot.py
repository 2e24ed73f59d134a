"""Snapshots on disk: msgpack with NumPy arrays, written atomically, read with size limits.

Services (level, replay) and checkpoints all persist through here so that a crash mid-write
never leaves a half-written file under the real name, and a file read back can never execute
code (no pickle) or allocate without bound.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np

_NDARRAY_TAG = "__ndarray__"
_BIGINT_TAG = "__bigint__"
MAX_SNAPSHOT_BYTES = 4 << 30


class SnapshotError(ValueError):
    """A snapshot file is missing, truncated, corrupt or of the wrong form."""


def _encode(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            raise TypeError("object arrays cannot be snapshotted")
        arr = np.ascontiguousarray(obj)
        return {_NDARRAY_TAG: True, "dtype": arr.dtype.str, "shape": list(arr.shape), "data": arr.tobytes()}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, int):  # beyond 64 bits, e.g. a PCG64 RNG state
        return {_BIGINT_TAG: str(obj)}
    raise TypeError(f"cannot snapshot object of type {type(obj).__name__}")


def _decode(obj: dict) -> Any:
    if _BIGINT_TAG in obj and len(obj) == 1:
        try:
            return int(obj[_BIGINT_TAG])
        except (TypeError, ValueError) as exc:
            raise SnapshotError(f"malformed integer in snapshot: {exc}") from exc
    if obj.get(_NDARRAY_TAG) is True:
        try:
            dtype = np.dtype(obj["dtype"])
            if dtype.hasobject:
                raise SnapshotError("snapshot holds an object array")
            return np.frombuffer(obj["data"], dtype=dtype).reshape(obj["shape"]).copy()
        except (KeyError, TypeError, ValueError) as exc:
            raise SnapshotError(f"malformed array in snapshot: {exc}") from exc
    return obj


def packb(obj: Any) -> bytes:
    """Serialise dicts/lists/scalars/NumPy arrays to msgpack bytes."""
    return msgpack.packb(obj, default=_encode, use_bin_type=True)


def unpackb(data: bytes, *, max_bytes: int = MAX_SNAPSHOT_BYTES) -> Any:
    """Inverse of `packb`; refuses inputs over `max_bytes` and anything malformed."""
    if len(data) > max_bytes:
        raise SnapshotError(f"snapshot is {len(data)} bytes, over the limit of {max_bytes}")
    try:
        return msgpack.unpackb(
            data,
            object_hook=_decode,
            raw=False,
            strict_map_key=False,
        )
    except SnapshotError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types for bad bytes
        raise SnapshotError(f"corrupt or truncated snapshot: {type(exc).__name__}: {exc}") from exc


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` so that readers see either the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename into `path` durable: the directory entry is only on disk after its own fsync."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(path: str | os.PathLike, obj: Any) -> None:
    """Atomically write `obj` as a msgpack snapshot."""
    atomic_write_bytes(path, packb(obj))


def load(path: str | os.PathLike, *, max_bytes: int = MAX_SNAPSHOT_BYTES) -> Any:
    """Read a snapshot written by `save`; raises SnapshotError if it is missing or damaged."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError as exc:
        raise SnapshotError(f"no snapshot at {path}") from exc
    if size > max_bytes:
        raise SnapshotError(f"snapshot {path} is {size} bytes, over the limit of {max_bytes}")
    return unpackb(path.read_bytes(), max_bytes=max_bytes)


class SnapshotSchedule:
    """When a service's periodic snapshot is due, and what failed (the level and replay services share it).

    The periodic snapshot rides on whatever call finds the interval passed. A failing write (disk full,
    volume gone) must not fail that call: it would turn PLR off / stall replay for every caller. It is
    counted (`errors`, `last_error`), logged, and tried again after the next interval; an explicit snapshot
    (at a checkpoint) still raises."""

    def __init__(self, service: str, interval_s: float):
        self.service, self.interval_s = service, float(interval_s)
        self.last = time.monotonic()
        self.errors = 0
        self.last_error: str | None = None

    def written(self) -> None:
        self.last = time.monotonic()

    def run_if_due(self, path: str | None, write: Callable[[], object]) -> None:
        if path is None or time.monotonic() - self.last < self.interval_s:
            return
        try:
            write()
        except OSError as exc:
            self.last = time.monotonic()
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            logging.getLogger(__name__).warning(
                "%s: periodic snapshot to %s failed (%s); serving on, retrying in %.0f s",
                self.service, path, self.last_error, self.interval_s)
