"""The learner's client of the level service on Ray (`learner.service.RemoteLevels`): feedback queued by the
training thread reaches a real level service actor, complete and in order, from the client's own sending
thread."""

from __future__ import annotations

import numpy as np
import pytest

from levelray.contracts.config import LevelConfig
from levelray.contracts.levels import LevelFeedback
from levelray.learner.service import RemoteLevels
from levelray.level_service.service import LevelService, LevelServiceCore
from tests.support import wait_for

SEEDS = np.arange(6)
CONFIG = LevelConfig(strategy="value_l1")


def _feedbacks(count: int, rng: np.random.Generator) -> list[LevelFeedback]:
    """`count` consecutive fragments of 4 env columns' episodes (8 steps each): an episode that does not end
    in one fragment goes on in the next, so its score depends on the fragments arriving in order."""
    levels = rng.choice(SEEDS, size=4)
    out = []
    for _ in range(count):
        seeds = np.empty((8, 4), dtype=np.int64)
        dones = rng.random((8, 4)) < 0.2
        for t in range(8):
            seeds[t] = levels
            levels = np.where(dones[t], rng.choice(SEEDS, size=4), levels)
        out.append(LevelFeedback(seeds=seeds, dones=dones, actor_ids=np.arange(4, dtype=np.int64),
                                 advantages=rng.normal(size=(8, 4)).astype(np.float32)))
    return out


def _scores(state: dict) -> np.ndarray:
    return np.asarray(state["scores"], dtype=np.float64)


@pytest.mark.timeout(120)
def test_queued_feedback_reaches_the_service_in_order_from_the_sending_thread(ray_session):
    feedbacks = _feedbacks(12, np.random.default_rng(0))
    reference = LevelServiceCore(SEEDS, CONFIG, rng=0)
    for feedback in feedbacks:
        reference.update_with_rollouts(feedback)
    assert _scores(reference.state_dict()).any()

    service = LevelService.remote(SEEDS, CONFIG, rng=0)
    client = RemoteLevels(service)
    try:
        for feedback in feedbacks[:6]:
            client.update_with_rollouts(feedback)
        # no flush: the sender thread sends within its interval
        wait_for(lambda: ray_session.get(service.stats.remote())["num_update_calls"] > 0, timeout=10)
        for feedback in feedbacks[6:]:
            client.update_with_rollouts(feedback)
    finally:
        client.close()  # sends what is still queued
    state = ray_session.get(service.state_dict.remote())
    np.testing.assert_array_equal(_scores(state), _scores(reference.state_dict()))
    assert client.failures == 0
    assert not client._sender.is_alive()
