"""RankCounts: the rank transform kept under single-score changes equals a brute-force float64 rank and, bit for
bit, `transform_weights("rank", ...)` after every change, ties included."""

import numpy as np
import pytest

from levelray.level_service.rank_counts import RankCounts
from levelray.level_service.transforms import transform_weights


def brute_force_rank_weights(x: np.ndarray, temperature: float) -> np.ndarray:
    """rank_i = 1 + #{j: x_j > x_i} by a double loop, P_i ∝ rank_i^(-1/T), in float64."""
    ranks = np.array([1 + sum(1 for xj in x if xj > xi) for xi in x], dtype=np.float64)
    w = ranks ** (-1.0 / temperature)
    return w / w.sum()


@pytest.mark.parametrize("temperature", [0.1, 1.0, 3.0])
def test_rank_counts_follow_every_change(temperature):
    rng = np.random.default_rng(7)
    capacity = 40
    counts = RankCounts(capacity, temperature)
    values: list[float] = []
    for step in range(400):
        value = float(rng.integers(0, 8)) / 4  # few distinct values: many ties
        if len(values) < capacity and (not values or rng.random() < 0.3):
            counts.set(len(values), value)
            values.append(value)
        else:
            k = int(rng.integers(len(values)))
            counts.set(k, value)
            values[k] = value
        x = np.array(values)
        got = counts.weights()
        assert np.array_equal(got, transform_weights("rank", temperature, 0.0, x)), step
        np.testing.assert_allclose(got, brute_force_rank_weights(x, temperature), rtol=1e-12)


def test_reset_counts_from_scratch():
    rng = np.random.default_rng(3)
    x = rng.normal(size=25).round(1)
    counts = RankCounts(30, 0.5)
    counts.reset(x)
    assert counts.size == 25
    assert np.array_equal(counts.weights(), transform_weights("rank", 0.5, 0.0, x))
    counts.set(3, 10.0)  # the new top score
    x[3] = 10.0
    assert np.array_equal(counts.weights(), transform_weights("rank", 0.5, 0.0, x))
    assert counts.weights().argmax() == 3


def test_a_full_buffers_weights_follow_its_scores_through_evictions_and_a_restore():
    """A level buffer keeps its rank counts through EWA updates, inserts and evictions (and rebuilds them on
    restore): its replay weights equal the transform of its scores computed from scratch, bit for bit."""
    from levelray.contracts.config import LevelConfig
    from levelray.level_service.buffer import LevelBuffer
    from tests.support import episode_results

    config = LevelConfig(strategy="value_l1", buffer_size=16, staleness_coef=0.3, alpha=0.5, temperature=0.3)
    buf = LevelBuffer(0, config, rng=5)
    rng = np.random.default_rng(5)

    def from_scratch(b: LevelBuffer) -> np.ndarray:
        stale = transform_weights("power", 1.0, 0.0, b.staleness().astype(np.float64))
        return 0.7 * transform_weights("rank", 0.3, 0.0, b.scores()) + 0.3 * stale

    for _ in range(30):
        ids, _ = buf.draw_many(6)
        buf.update_with_episodes(episode_results(ids, rng.integers(0, 5, size=6) / 4))  # ties
        assert np.array_equal(buf.sample_weights(), from_scratch(buf))
    assert buf.counters()["num_evicted"] > 0 and buf.counters()["num_replays"] > 0
    restored = LevelBuffer.from_state_dict(buf.state_dict())
    assert np.array_equal(restored.sample_weights(), buf.sample_weights())
