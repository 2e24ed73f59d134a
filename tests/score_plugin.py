"""A level score of one's own (the example of docs/guides/writing-a-curriculum.md), named by
`--level-strategy tests.score_plugin:return_error`."""

from __future__ import annotations

import numpy as np

from levelray.policy.level_scores import Episode


def return_error(episode: Episode) -> float:
    """The mean |G_t - V(x_t)| over the episode, G_t the discounted return from step t to its end: how far the
    acting network's values are from what followed (value_l1 at gae_lambda 1)."""
    returns = np.empty(len(episode.rewards))  # [L]
    g = 0.0
    for t in range(len(episode.rewards) - 1, -1, -1):
        g = episode.rewards[t] + episode.discount * g
        returns[t] = g
    return float(np.mean(np.abs(returns - episode.values)))
