"""Learner side of replay: batches mix fresh and replayed unrolls, importance weights reach the
losses, and new priorities go back to the service after the update."""

import numpy as np
import pytest

from levelray.contracts.config import ReplayConfig
from levelray.learner.learner import StepOutputs
from levelray.learner.replay_feed import ReplayFeed
from levelray.replay_service.service import ReplayServiceCore


def unroll(tag: float, T=4, K=3):
    return {
        "obs": np.full((T + 1, K, 2), tag, dtype=np.float32),
        "actions": np.zeros((T, K), dtype=np.int64),
        "rewards": np.full((T, K), tag, dtype=np.float32),
        "terminated": np.zeros((T, K), bool),
        "truncated": np.zeros((T, K), bool),
        "behaviour_params": np.zeros((T, K, 2), dtype=np.float32),
        "level_seeds": np.zeros((T, K), dtype=np.int64),
        "level_replayed": np.zeros((T, K), dtype=bool),
        "env_ids": np.arange(K),
        "policy_version": 0,
        "actor_id": 0,
    }


def td_outputs(abs_td: np.ndarray) -> StepOutputs:
    """An update's outputs where only the TD errors `[T, B]` matter (no model loss)."""
    T, B = abs_td.shape
    return StepOutputs(advantages=abs_td, abs_td=abs_td, values=np.zeros((T + 1, B)), final_values=np.zeros((T, B)),
                       dist_params=np.zeros((T, B, 2)), sampled_priorities=None)


def test_batch_mixes_replayed_unrolls_with_their_importance_weights():
    replay = ReplayServiceCore(ReplayConfig(capacity=100, alpha=1.0, min_size=1), eps=1e-12, seed=0)
    replay.insert([unroll(float(i)) for i in range(1, 5)], np.array([1.0, 2.0, 3.0, 4.0]))
    feed = ReplayFeed(ReplayConfig(replay_ratio=0.5, beta=0.5, beta_anneal_updates=10), 4, replay)
    assert (feed.num_fresh, feed.num_replayed) == (2, 2)
    batch = feed.batch([unroll(100.0), unroll(200.0)])
    assert batch.arrays["obs"].shape == (5, 12, 2)
    tags = batch.arrays["rewards"][0, ::3]
    assert tags[:2].tolist() == [100.0, 200.0] and set(tags[2:].tolist()) <= {1.0, 2.0, 3.0, 4.0}
    w = batch.arrays["sample_weights"]
    assert np.all(w[:6] == 1.0)
    # (N P(i))^-beta / max_j (N P(j))^-beta with P = p / sum(p), N = 4, beta = 0.5
    p = tags[2:] / 10.0
    expected = (4 * p) ** -0.5 / (4 * 0.1) ** -0.5
    np.testing.assert_allclose(w[6:].reshape(2, 3), np.repeat(expected[:, None], 3, 1), rtol=1e-6)

    abs_td = np.zeros((4, 12))
    abs_td[:, 0:3] = 1.0
    abs_td[2, 0] = 5.0  # fresh unroll 0: max 5, mean (5 + 11*1)/12
    abs_td[:, 6:9] = 0.25
    feed.after_update(batch, td_outputs(abs_td), None, version=1)
    stats = replay.stats()
    assert stats["inserts"] == 6 and stats["updates"] == 2
    prios = replay._replay.raw_priorities()
    assert np.isclose(prios, 0.9 * 5.0 + 0.1 * (16.0 / 12.0)).sum() == 1  # fresh unroll 0, eta*max+(1-eta)*mean
    assert np.isclose(prios, 0.0).sum() == 2  # fresh unroll 1 and replayed unroll 2: no TD error at all
    assert np.isclose(prios, 0.25).sum() == 1  # the first replayed unroll got its new priority


def test_beta_anneals_linearly_to_one():
    feed = ReplayFeed(ReplayConfig(replay_ratio=0.5, beta=0.4, beta_anneal_updates=10), 2, None)
    betas = []
    for _ in range(12):
        betas.append(feed.beta())
        feed.updates += 1
    assert betas[0] == pytest.approx(0.4) and betas[5] == pytest.approx(0.7) and betas[10:] == [1.0, 1.0]


def test_no_replay_until_min_size_then_mixed():
    replay = ReplayServiceCore(ReplayConfig(capacity=100, min_size=3), seed=0)
    feed = ReplayFeed(ReplayConfig(replay_ratio=0.5), 2, replay)
    batch = feed.batch([unroll(1.0)])
    assert batch.arrays["obs"].shape[1] == 3 and len(batch.replay_ids) == 0  # nothing to replay yet: fresh only
    for version in range(3):
        batch = feed.batch([unroll(1.0)])
        feed.after_update(batch, td_outputs(np.ones((4, batch.arrays["obs"].shape[1]))), None, version=version + 1)
    batch = feed.batch([unroll(2.0)])
    assert batch.arrays["obs"].shape[1] == 6 and len(batch.replay_ids) == 1


@pytest.mark.parametrize("ratio, batch_size", [(1.0, 4), (0.9, 2)])
def test_all_replay_batches_are_refused(ratio, batch_size):
    with pytest.raises(ValueError, match="replay_ratio"):
        ReplayFeed(ReplayConfig(replay_ratio=ratio), batch_size, None)
