"""Prioritized trajectory replay: the buffer (`PrioritizedReplay`, pure NumPy) and the service around it.

``from replay_service import PrioritizedReplay`` works without Ray; the service (`ReplayServiceCore`, its
Ray-free core, and the `ReplayService` actor) lives in ``replay_service.service`` (imports Ray).
"""

from levelray.replay_service.prioritized import NotReadyError, PrioritizedReplay, Sample
from levelray.replay_service.sumtree import SumMinTree

__all__ = ["NotReadyError", "PrioritizedReplay", "Sample", "SumMinTree"]
