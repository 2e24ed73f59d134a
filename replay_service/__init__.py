"""Prioritized trajectory replay: a pure NumPy core (no Ray) and a thin Ray actor shell.

``from replay_service import PrioritizedReplay`` works without Ray; the actor lives in
``replay_service.service`` (imports Ray).
"""

from levelray.replay_service.core import PrioritizedReplay, Sample
from levelray.replay_service.rate_limiter import NotReadyError, RateLimitedError, RateLimiter
from levelray.replay_service.sumtree import SumMinTree

__all__ = [
    "NotReadyError",
    "PrioritizedReplay",
    "RateLimitedError",
    "RateLimiter",
    "Sample",
    "SumMinTree",
]
