"""The learner's inbound queue: one batch by default, so a learner-bound run's actors wait instead of running
ahead with a stale policy (measured: README's main job at a policy lag of ~16 versions with a 32-unroll queue,
~3 with one batch; benchmarks/RESULTS.md, "bf16")."""

from __future__ import annotations

import threading
import time

import pytest

from levelray.contracts.config import LearnerConfig
from levelray.learner.service import inbound_queue_size
from tests.test_fuzz import cartpole_learner_service, valid_unroll


def test_the_queue_holds_one_batch_unless_its_size_is_given():
    assert inbound_queue_size(LearnerConfig(), 2) == 2
    assert inbound_queue_size(LearnerConfig(batch_size=8), 8) == 8
    assert inbound_queue_size(LearnerConfig(queue_size=32), 2) == 32
    assert LearnerConfig().queue_size is None and LearnerConfig(queue_size="none").queue_size is None


@pytest.mark.timeout(120)
def test_submissions_block_once_a_batch_waits_for_a_busy_learner(ray_session):
    """A learner mid-update (its update lock held) has taken one batch and has one more queued; an actor's next
    `submit_batch` waits until the learner frees a place, then returns with the weights."""
    service = cartpole_learner_service(batch_size=2)
    returned: list[int] = []

    def submit(n: int) -> None:
        for _ in range(n):
            unroll = valid_unroll()
            unroll["policy_version"] = 0
            service.submit_batch([unroll])
            returned.append(1)

    try:
        assert service.queue.maxsize == 2
        with service.update_lock:  # the learner is "training": it takes one batch, then waits for the lock
            actor = threading.Thread(target=submit, args=(2 + 2 + 1,), daemon=True)
            actor.start()
            deadline = time.time() + 30
            while len(returned) < 4 and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(1.0)
            assert len(returned) == 4 and service.queue.qsize() == 2  # the 5th is blocked in submit_batch
            assert actor.is_alive()
        actor.join(timeout=30)
        assert not actor.is_alive() and len(returned) == 5
    finally:
        service.stop()
