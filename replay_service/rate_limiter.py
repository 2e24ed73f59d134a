"""Reverb-style rate limiting: minimum size and sample-to-insert ratio with an error buffer.

Semantics follow Reverb's ``RateLimiter`` / ``SampleToInsertRatio`` exactly:

* ``inserts``, ``samples`` and ``deletes`` count items (a batch of n counts n). ``size`` is
  ``inserts - deletes``; every item evicted (FIFO) or removed (``max_use``) is a delete.
* ``can_sample(n)``: false while ``inserts - deletes < min_size_to_sample``; otherwise
  ``inserts * samples_per_insert - samples - n >= min_diff``.
* ``can_insert(n)``: true while ``inserts + n - deletes <= min_size_to_sample``; otherwise
  ``(inserts + n) * samples_per_insert - samples <= max_diff``.
* ``error_buffer`` as a number gives ``min_diff, max_diff = offset -/+ error_buffer`` with
  ``offset = samples_per_insert * min_size_to_sample``; as a pair it is ``(min_diff, max_diff)``
  used without offset. ``max_diff - min_diff`` must be at least ``2 * max(1, samples_per_insert)``.

The replay core does not block: a call the limiter refuses raises ``RateLimitedError`` (a
``NotReadyError``) and changes nothing; the service turns a refused sample into ``None``.
"""

from __future__ import annotations

import math
import sys
from typing import Any

__all__ = ["NotReadyError", "RateLimitedError", "RateLimiter"]


class NotReadyError(ValueError):
    """Sampling (or inserting) is not possible right now: empty buffer, below ``min_size``, not
    enough remaining uses under ``max_use``, or refused by the rate limiter. Retry later."""


class RateLimitedError(NotReadyError):
    """The rate limiter refused the call (see ``RateLimiter``)."""


class RateLimiter:
    """``RateLimiter(samples_per_insert, min_size_to_sample, error_buffer)`` as Reverb's
    ``SampleToInsertRatio``. ``RateLimiter.min_size(n)`` gives Reverb's ``MinSize``."""

    def __init__(
        self,
        samples_per_insert: float,
        min_size_to_sample: int,
        error_buffer: float | tuple[float, float],
    ) -> None:
        spi = float(samples_per_insert)
        if not (math.isfinite(spi) and spi > 0):
            raise ValueError(f"samples_per_insert must be a finite number > 0, got {samples_per_insert!r}")
        if isinstance(min_size_to_sample, bool) or int(min_size_to_sample) != min_size_to_sample:
            raise ValueError(f"min_size_to_sample must be an integer >= 1, got {min_size_to_sample!r}")
        min_size = int(min_size_to_sample)
        if min_size < 1:
            raise ValueError(f"min_size_to_sample must be an integer >= 1, got {min_size_to_sample!r}")
        if isinstance(error_buffer, int | float) and not isinstance(error_buffer, bool):
            offset = spi * min_size
            min_diff, max_diff = offset - float(error_buffer), offset + float(error_buffer)
        else:
            try:
                min_diff, max_diff = (float(x) for x in error_buffer)  # type: ignore[union-attr]
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"error_buffer must be a number or a (min_diff, max_diff) pair, got {error_buffer!r}"
                ) from exc
        if math.isnan(min_diff) or math.isnan(max_diff):
            raise ValueError(f"error_buffer must not be NaN, got {error_buffer!r}")
        if max_diff - min_diff < 2 * max(1.0, spi):
            raise ValueError(
                "error_buffer must be >= max(1.0, samples_per_insert) (a range of at least "
                f"2 * max(1, samples_per_insert)); got {error_buffer!r} with samples_per_insert={spi}: "
                "smaller values could block samples and/or inserts completely"
            )
        if min_diff > spi * min_size:
            raise ValueError(
                "error_buffer range lies above samples_per_insert * min_size_to_sample: this deadlocks "
                "as soon as min_size_to_sample items have been inserted"
            )
        self._init(spi, min_size, min_diff, max_diff)

    def _init(self, spi: float, min_size: int, min_diff: float, max_diff: float) -> None:
        self.samples_per_insert = spi
        self.min_size_to_sample = min_size
        self.min_diff = min_diff
        self.max_diff = max_diff
        self.inserts = 0
        self.samples = 0
        self.deletes = 0

    @classmethod
    def min_size(cls, min_size_to_sample: int) -> RateLimiter:
        """Reverb's ``MinSize``: block sampling below ``min_size_to_sample`` items, nothing else."""
        if int(min_size_to_sample) < 1:
            raise ValueError(f"min_size_to_sample must be an integer >= 1, got {min_size_to_sample!r}")
        self = cls.__new__(cls)
        self._init(1.0, int(min_size_to_sample), -sys.float_info.max, sys.float_info.max)
        return self

    @property
    def size(self) -> int:
        return self.inserts - self.deletes

    def can_sample(self, num_samples: int) -> bool:
        if num_samples <= 0:
            raise ValueError(f"num_samples must be > 0, got {num_samples!r}")
        if self.inserts - self.deletes < self.min_size_to_sample:
            return False
        diff = self.inserts * self.samples_per_insert - self.samples - num_samples
        return diff >= self.min_diff

    def can_insert(self, num_inserts: int) -> bool:
        if num_inserts <= 0:
            raise ValueError(f"num_inserts must be > 0, got {num_inserts!r}")
        if self.inserts + num_inserts - self.deletes <= self.min_size_to_sample:
            return True
        diff = (num_inserts + self.inserts) * self.samples_per_insert - self.samples
        return diff <= self.max_diff

    # Bookkeeping (called by the replay after the operation succeeded).
    def insert(self, n: int = 1) -> None:
        self.inserts += int(n)

    def sample(self, n: int = 1) -> None:
        self.samples += int(n)

    def delete(self, n: int = 1) -> None:
        self.deletes += int(n)

    def state_dict(self) -> dict[str, Any]:
        return {
            "samples_per_insert": self.samples_per_insert,
            "min_size_to_sample": self.min_size_to_sample,
            "min_diff": self.min_diff,
            "max_diff": self.max_diff,
            "inserts": self.inserts,
            "samples": self.samples,
            "deletes": self.deletes,
        }

    @classmethod
    def from_state_dict(cls, d: dict[str, Any]) -> RateLimiter:
        try:
            self = cls.__new__(cls)
            self._init(
                float(d["samples_per_insert"]),
                int(d["min_size_to_sample"]),
                float(d["min_diff"]),
                float(d["max_diff"]),
            )
            self.inserts, self.samples, self.deletes = int(d["inserts"]), int(d["samples"]), int(d["deletes"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed rate limiter state: {exc!r}") from exc
        return self

    def __repr__(self) -> str:
        return (
            f"RateLimiter(samples_per_insert={self.samples_per_insert}, "
            f"min_size_to_sample={self.min_size_to_sample}, min_diff={self.min_diff}, "
            f"max_diff={self.max_diff}, inserts={self.inserts}, samples={self.samples}, "
            f"deletes={self.deletes})"
        )
