"""A curriculum that replays the least-played levels (the example of docs/guides/writing-a-curriculum.md).

`--level-source tests.least_played:LeastPlayed` runs it: PLR's sampler over a fixed set, whose level score is not
the episodes' but how rarely the level was played, so that replays even out the play counts.
"""

from __future__ import annotations

import numpy as np

from levelray.level_service.sampler import LevelSampler


class LeastPlayed(LevelSampler):
    """A level's score is minus its finished episodes, so the score transform (rank by default) weighs the
    least-played levels most. Draws, staleness, saving and resuming are `LevelSampler`'s: the play counts are its
    scores."""

    def _commit(self, keys: np.ndarray, scores: np.ndarray) -> None:
        plays = -self._scores  # [n] finished episodes per level, in the order of the seeds
        np.add.at(plays, keys, 1.0)  # keys [E]: each finished episode's level; its score is not used
        played = np.unique(keys)
        self._apply_commit(played, -plays[played], int(keys.size))
