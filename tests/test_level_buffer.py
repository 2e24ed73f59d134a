"""Tests of PLR's level buffer over an unbounded level space (level_service.buffer) and of the level service
core around it. Expected numbers are computed by hand or in float64 inside this file; the draw frequencies
are checked against the replay distribution the buffer reports, summed over the draws."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from levelray.contracts.config import LevelConfig
from levelray.contracts.levels import MAX_SEED
from levelray.contracts.snapshot import SnapshotError, packb, unpackb
from levelray.level_service.buffer import LevelBuffer
from levelray.level_service.service import LevelServiceCore
from tests.support import episode_results

START = 1000  # the level space is [START, MAX_SEED); MAX_SEED - START is divisible by 3 (a bad permutation)

# ----------------------------------------------------------------------------- helpers


def make_buffer(start_level: int = START, *, rng=0, discount: float = 0.99, **levels) -> LevelBuffer:
    """A buffer whose keyword arguments other than `rng`/`discount` are `LevelConfig` fields; strategy
    value_l1, buffer_size 4 and alpha 1 unless given."""
    levels = {"strategy": "value_l1", "buffer_size": 4, "alpha": 1.0, **levels}
    return LevelBuffer(start_level, LevelConfig(**levels), discount=discount, rng=rng)


def episodes(seeds, scores):
    """Finished episodes on `seeds` with (value_l1) scores `scores` (>= 0), in that order."""
    return episode_results(seeds, scores)


def state_bytes(b) -> bytes:
    return packb(b.state_dict())


def contents(b: LevelBuffer) -> tuple[list[int], list[float], list[int]]:
    """The buffered seeds, scores and staleness, in slot order."""
    return b.buffered_seeds().tolist(), b.scores().tolist(), b.staleness().tolist()


def band(k: int, n: int, p: float) -> bool:
    """`k` successes of `n` lie within 4 binomial standard deviations of `n p`."""
    return abs(k - n * p) <= 4.0 * math.sqrt(n * p * (1.0 - p)) + 1.0


def busy_buffer() -> LevelBuffer:
    """A full buffer (6 slots) after evictions, EWA updates and staleness draws."""
    b = make_buffer(buffer_size=6, alpha=0.7, staleness_coef=0.3, replay_schedule="fixed", replay_prob=0.6,
                    rho=0.0, rng=5)
    rng = np.random.default_rng(1)
    drawn = [b.sample() for _ in range(9)]
    b.update_with_episodes(episodes(drawn, rng.random(9) + 0.1))
    for _ in range(40):
        b.sample()
    b.update_with_episodes(episodes(drawn[:3], np.abs(rng.normal(size=3))))
    for _ in range(15):
        b.sample()
    return b


# ----------------------------------------------------------------------------- the buffer's rule


def test_fill_then_replace_the_lowest_weight_unless_lower():
    """With no draws every staleness is 0, so the lowest replay weight is the lowest score's (rank transform)."""
    b = make_buffer()
    b.update_with_episodes(episodes([1000, 1001], [0.5, 0.25]))
    b.update_with_episodes(episodes([1002], [0.125]))  # below every buffered score: not full, so it enters
    b.update_with_episodes(episodes([1003], [0.375]))
    assert contents(b)[:2] == ([1000, 1001, 1002, 1003], [0.5, 0.25, 0.125, 0.375])
    assert b.counters()["num_inserted"] == 4 and b.counters()["num_evicted"] == 0
    b.update_with_episodes(episodes([2000], [0.1875]))  # above the lowest-weight level's 0.125 (slot 2)
    assert contents(b)[:2] == ([1000, 1001, 2000, 1003], [0.5, 0.25, 0.1875, 0.375])
    c = b.counters()
    assert (c["num_evicted"], c["num_inserted"], c["num_rejected"]) == (1, 5, 0)
    b.update_with_episodes(episodes([2001], [0.1875]))  # equal to slot 2's score: it replaces it
    assert contents(b)[:2] == ([1000, 1001, 2001, 1003], [0.5, 0.25, 0.1875, 0.375])
    before = contents(b)
    b.update_with_episodes(episodes([2002], [0.0625]))  # below: dropped
    assert contents(b) == before
    c = b.counters()
    assert (c["num_evicted"], c["num_inserted"], c["num_rejected"], c["num_episodes"]) == (2, 6, 1, 7)
    assert 2000 not in b.buffered_seeds() and 2002 not in b.buffered_seeds()


def test_tied_lowest_weight_replaces_the_lowest_slot():
    b = make_buffer()
    b.update_with_episodes(episodes([1000, 1001, 1002, 1003], [0.5, 0.25, 0.75, 0.25]))
    w = b.sample_weights()
    assert w[1] == w[3] == w.min() and b.lowest_weight_slot() == 1  # tied ranks share a weight
    b.update_with_episodes(episodes([3000], [0.25]))  # equal score, tied weight: the first slot goes
    assert b.buffered_seeds().tolist() == [1000, 3000, 1002, 1003]


def with_staleness(b: LevelBuffer, last: list[int], counter: int) -> LevelBuffer:
    """`b` read back from its state with `last_sampled` and `counter` set (staleness = counter - last)."""
    d = unpackb(packb(b.state_dict()))
    d["last_sampled"][: len(last)] = last
    d["counter"] = counter
    return LevelBuffer.from_state_dict(d)


def test_staleness_decides_which_level_a_candidate_weighs_against():
    """Hand-computed: scores [3, 1, 2] rank as [1, 3, 2]: P_score = [1, 1/3, 1/2] / (11/6) = [6, 2, 3] / 11.
    Staleness [0, 4, 0] gives P_staleness = [0, 1, 0]; at staleness_coef 0.5 the replay weights are
    [3/11, 1/11 + 1/2, 3/22]: the lowest is slot 2 (score 2), not slot 1 (score 1)."""
    b = make_buffer(buffer_size=3, score_transform="rank", temperature=1.0, staleness_coef=0.5)
    b.update_with_episodes(episodes([1000, 1001, 1002], [3.0, 1.0, 2.0]))
    b = with_staleness(b, [4, 0, 4], 4)
    assert b.staleness().tolist() == [0, 4, 0]
    assert np.allclose(b.sample_weights(), [3 / 11, 1 / 11 + 1 / 2, 3 / 22], rtol=1e-12, atol=0)
    assert b.lowest_weight_slot() == 2
    b.update_with_episodes(episodes([2000], [1.5]))  # above the lowest score 1, below slot 2's 2: dropped
    assert b.buffered_seeds().tolist() == [1000, 1001, 1002] and b.counters()["num_rejected"] == 1
    b.update_with_episodes(episodes([2001], [2.0]))  # equal to slot 2's score: replaces it, staleness 0
    assert contents(b) == ([1000, 1001, 2001], [3.0, 1.0, 2.0], [0, 4, 0])
    # with the new level in slot 2 (rank 2 of [3, 1, 2] again) the weights are as before: 1.75 >= 2 fails
    b.update_with_episodes(episodes([2002], [1.75]))
    assert b.buffered_seeds().tolist() == [1000, 1001, 2001] and b.counters()["num_evicted"] == 1


def test_buffered_level_repeat_episodes_update_by_ewa():
    alpha = 0.3
    b = make_buffer(alpha=alpha)
    b.update_with_episodes(episodes([1000, 1001], [2.0, 1.0]))
    want = 2.0
    for x in (5.0, 0.5, 3.25):  # repeat episodes of a buffered level are EWA updates, not candidates
        b.update_with_episodes(episodes([1000], [x]))
        want = (1.0 - alpha) * want + alpha * x
        assert b.scores()[0] == pytest.approx(want, rel=1e-12, abs=0)
    # two episodes of one buffered level in one call fold in in the order they ended
    b.update_with_episodes(episodes([1001, 1001], [4.0, 8.0]))
    one = (1.0 - alpha) * 1.0 + alpha * 4.0
    assert b.scores()[1] == pytest.approx((1.0 - alpha) * one + alpha * 8.0, rel=1e-12, abs=0)
    # a new level's first episode enters at its score; its second in the same call is an EWA update
    b.update_with_episodes(episodes([1005, 1005], [1.0, 2.0]))
    assert b.scores()[2] == pytest.approx((1.0 - alpha) * 1.0 + alpha * 2.0, rel=1e-12, abs=0)
    c = b.counters()
    assert (c["num_inserted"], c["num_evicted"], c["num_rejected"], c["num_episodes"]) == (3, 0, 0, 9)


# ----------------------------------------------------------------------------- episodes across calls


def test_level_evicted_while_played_comes_back_as_candidate():
    b = make_buffer(buffer_size=2)
    b.update_with_episodes(episodes([1000, 1001], [1.0, 2.0]))
    b.update_with_episodes(episodes([1002], [1.5]))  # evicts 1000 while an env still plays it
    assert b.buffered_seeds().tolist() == [1002, 1001]
    b.update_with_episodes(episodes([1000], [2.0]))  # that episode ends: 1000 is a candidate again
    assert contents(b)[:2] == ([1000, 1001], [2.0, 2.0])  # 2 > 1.5: it evicts 1002 (slot 0)
    assert b.counters()["num_evicted"] == 2


# ----------------------------------------------------------------------------- drawing


def test_new_levels_are_distinct_and_in_the_space():
    b = make_buffer(start_level=0, rng=3)
    draws = [b.draw() for _ in range(20_000)]
    seeds = np.array([s for s, _ in draws])
    assert not any(r for _, r in draws)
    assert np.unique(seeds).size == seeds.size and seeds.min() >= 0 and seeds.max() < MAX_SEED
    assert b.counters()["num_new"] == 20_000 and b.sample_weights().size == 0
    small = make_buffer(start_level=MAX_SEED - 5000, rng=4)  # a space of 5000 levels: a permutation of it
    seq = [small.sample() for _ in range(5001)]
    assert sorted(seq[:5000]) == list(range(MAX_SEED - 5000, MAX_SEED))
    assert seq[5000] == seq[0]
    one = make_buffer(start_level=MAX_SEED - 1)
    assert {one.sample() for _ in range(10)} == {MAX_SEED - 1}


def half_full(schedule: str, p: float, rng: int) -> tuple[LevelBuffer, list[int]]:
    """A buffer of 8 slots holding 4 levels that were themselves drawn as new levels."""
    b = make_buffer(buffer_size=8, replay_schedule=schedule, replay_prob=p, rho=0.0, rng=rng)
    first = [b.sample() for _ in range(4)]
    b.update_with_episodes(episodes(first, [0.5, 1.0, 1.5, 2.0]))
    return b, first


@pytest.mark.parametrize("schedule,p,want", [("fixed", 0.3, 0.3), ("proportionate", 0.3, 0.3),
                                             ("proportionate", 0.9, 0.5), ("fixed", 0.9, 0.9)])
def test_replay_probability(schedule, p, want):
    b, first = half_full(schedule, p, rng=7)
    n = 20_000
    draws = [b.draw() for _ in range(n)]
    replayed = [s for s, r in draws if r]
    new = [s for s, r in draws if not r]
    assert band(len(replayed), n, want), (len(replayed), n * want)
    assert set(replayed) == set(first)  # replays are buffered levels (here all of them)
    assert len(set(new)) == len(new) and not set(new) & set(first)  # new levels are never handed out twice
    assert b.counters()["num_replays"] == len(replayed)


def test_no_replay_below_rho():
    b = make_buffer(buffer_size=8, replay_schedule="fixed", replay_prob=1.0, rho=0.5, rng=1)
    b.update_with_episodes(episodes([1000, 1001, 1002], [1.0, 2.0, 3.0]))
    assert not any(b.draw()[1] for _ in range(500))  # 3/8 < rho
    b.update_with_episodes(episodes([1003], [4.0]))
    assert all(b.draw()[1] for _ in range(500))  # 4/8 = rho, replay_prob 1


def test_score_only_draw_frequencies_chi_square():
    b = make_buffer(buffer_size=8, replay_schedule="fixed", replay_prob=1.0, rho=0.0, staleness_coef=0.0,
                    score_transform="rank", temperature=0.5, rng=2)
    b.update_with_episodes(episodes(range(1000, 1008), np.random.default_rng(0).random(8)))
    w = b.sample_weights()
    assert w.sum() == pytest.approx(1.0, abs=1e-12)
    n = 50_000
    slot = {s: i for i, s in enumerate(b.buffered_seeds().tolist())}
    counts = np.bincount([slot[b.sample()] for _ in range(n)], minlength=8)
    assert np.array_equal(b.sample_weights(), w)  # staleness_coef 0: draws do not move the distribution
    assert stats.chisquare(counts, w * n).pvalue > 1e-3


@pytest.mark.parametrize("coef,transform,temp", [(0.0, "power", 1.0), (0.3, "power", 1.0), (0.3, "power", 0.5)])
def test_draw_frequencies_follow_sample_weights(coef, transform, temp):
    """Replay counts per level against the sum over draws of the distribution reported before each draw
    (a martingale: variance sum w (1 - w)), across inserts and an eviction in the middle."""
    b = make_buffer(buffer_size=10, replay_schedule="fixed", replay_prob=1.0, rho=0.0, staleness_coef=coef,
                    staleness_transform=transform, staleness_temperature=temp, score_transform="rank",
                    temperature=0.7, rng=11)
    rng = np.random.default_rng(2)
    b.update_with_episodes(episodes(range(1000, 1008), rng.random(8) + 0.5))
    universe = {s: i for i, s in enumerate(range(1000, 1011))}
    expect, var, counts = np.zeros(11), np.zeros(11), np.zeros(11)
    for phase in range(2):
        idx = np.array([universe[s] for s in b.buffered_seeds().tolist()])
        for _ in range(20_000):
            w = b.sample_weights()
            expect[idx] += w
            var[idx] += w * (1.0 - w)
            seed, replayed = b.draw()
            counts[universe[seed]] += replayed
        if phase == 0:  # two levels fill the buffer, a third evicts the lowest one
            b.update_with_episodes(episodes([1008, 1009, 1010], [1.2, 0.9, 2.0]))
            assert b.size == 10 and b.counters()["num_evicted"] == 1
            assert b.sample_weights().sum() == pytest.approx(1.0, abs=1e-12)
    assert counts.sum() == 40_000
    assert (np.abs(counts - expect) <= 4.0 * np.sqrt(var) + 1.0).all(), (counts, expect)


def test_draw_many_is_distributed_as_draws_in_a_row():
    """`draw_many(3)` against three `draw()` calls from the same state, 6,000 times each with fresh random
    numbers: the joint law of the three outcomes (which buffered level, or new), where the staleness draws
    (coefficient 0.8) depend on the draws before them: a chi-square test of homogeneity over the outcome
    sequences. New levels are the same permutation's next ones either way."""
    base = make_buffer(buffer_size=3, replay_schedule="fixed", replay_prob=0.7, rho=0.0, staleness_coef=0.8, rng=3)
    base.update_with_episodes(episodes([1000, 1001, 1002], [0.5, 1.0, 2.0]))
    for _ in range(5):  # unequal staleness
        base.draw()
    state = base.state_dict()
    perm_copy = LevelBuffer.from_state_dict(state)
    next_new = [s for s, r in (perm_copy.draw() for _ in range(40)) if not r][:3]
    batch, single = {}, {}
    for trial in range(6_000):
        fresh = {**state, "rng": np.random.default_rng(trial).bit_generator.state}
        b = LevelBuffer.from_state_dict(fresh)
        seeds, replayed = b.draw_many(3)
        assert seeds.dtype == np.int64 and replayed.dtype == bool and seeds.shape == replayed.shape == (3,)
        assert [s for s, r in zip(seeds.tolist(), replayed.tolist(), strict=True) if not r] == \
            next_new[: 3 - int(replayed.sum())]
        key = tuple(s if r else -1 for s, r in zip(seeds.tolist(), replayed.tolist(), strict=True))
        batch[key] = batch.get(key, 0) + 1
        c = LevelBuffer.from_state_dict({**state, "rng": np.random.default_rng(10**6 + trial).bit_generator.state})
        key = tuple(s if r else -1 for s, r in (c.draw() for _ in range(3)))
        single[key] = single.get(key, 0) + 1
    keys = sorted(set(batch) | set(single))
    table = np.array([[batch.get(k, 0) for k in keys], [single.get(k, 0) for k in keys]])
    assert len(keys) > 30  # most of the 4**3 sequences occur
    assert stats.chi2_contingency(table).pvalue > 1e-3


def test_draw_many_leaves_the_state_draws_in_a_row_would():
    """After `draw_many(n)`: each buffered level's staleness counts the draws since its last replay within the
    call (or since before it), the counters moved by n, and the next new level follows the ones handed out."""
    b = make_buffer(buffer_size=5, replay_schedule="fixed", replay_prob=0.8, rho=0.0, staleness_coef=0.5, rng=8)
    b.update_with_episodes(episodes(range(1000, 1005), [0.5, 1.0, 2.0, 0.2, 3.0]))
    start_state, handed_out = b.state_dict(), []
    for n in (0, 1, 2, 17, 64):
        before, counts = b.staleness().copy(), b.counters()
        order = b.buffered_seeds().tolist()
        seeds, replayed = b.draw_many(n)
        want = before + n
        for pos, (seed, r) in enumerate(zip(seeds.tolist(), replayed.tolist(), strict=True)):
            if r:
                want[order.index(seed)] = n - 1 - pos
        assert b.staleness().tolist() == want.tolist()
        after = b.counters()
        assert after["num_samples"] - counts["num_samples"] == n
        assert after["num_replays"] - counts["num_replays"] == int(replayed.sum())
        assert after["num_new"] - counts["num_new"] == n - int(replayed.sum())
        handed_out += seeds[~replayed].tolist()
    one_by_one = LevelBuffer.from_state_dict(start_state)
    assert [s for s, r in (one_by_one.draw() for _ in range(200)) if not r][: len(handed_out)] == handed_out


def test_commits_match_a_plain_reference_with_ties():
    """The buffer's rule and EWA, committed per episode in the order the episodes ended, against a plain list
    implementation (with no draws every staleness is 0, so the lowest replay weight is the lowest score's: argmin,
    first slot on ties; a candidate >= it enters), on 3,000 episodes over 14 seeds whose scores take 4 values
    (alpha 0.5 keeps every score dyadic, so ties are exact and frequent)."""
    rng = np.random.default_rng(12)
    b = make_buffer(buffer_size=5, alpha=0.5)
    ref_seeds: list[int] = []
    ref_scores: list[float] = []
    for _ in range(100):
        seeds = (1000 + rng.integers(14, size=30)).tolist()
        scores = rng.choice([0.5, 1.0, 1.5, 2.0], size=30).tolist()
        b.update_with_episodes(episodes(seeds, scores))
        for seed, score in zip(seeds, scores, strict=True):
            if seed in ref_seeds:
                i = ref_seeds.index(seed)
                ref_scores[i] = 0.5 * ref_scores[i] + 0.5 * score
            elif len(ref_seeds) < 5:
                ref_seeds.append(seed)
                ref_scores.append(score)
            else:
                i = ref_scores.index(min(ref_scores))
                if score >= ref_scores[i]:
                    ref_seeds[i], ref_scores[i] = seed, score
        assert b.buffered_seeds().tolist() == ref_seeds and b.scores().tolist() == ref_scores
    assert b.counters()["num_evicted"] > 100 and b.counters()["num_rejected"] > 100


def test_sample_weights_sum_to_one_over_buffered_levels():
    b = busy_buffer()
    w = b.sample_weights()
    assert w.shape == (b.size,) and (w >= 0).all() and w.sum() == pytest.approx(1.0, abs=1e-12)
    assert make_buffer().sample_weights().shape == (0,)


# ----------------------------------------------------------------------------- staleness


def test_staleness_zero_on_entry_and_advanced_by_every_draw():
    b = make_buffer(buffer_size=4, replay_schedule="fixed", replay_prob=0.5, rho=0.0, staleness_coef=0.5, rng=6)
    b.update_with_episodes(episodes([1000, 1001], [1.0, 2.0]))
    assert b.staleness().tolist() == [0, 0]

    def draws(k: int) -> None:
        for _ in range(k):
            before = b.staleness()
            seed, replayed = b.draw()
            want = before + 1
            if replayed:
                want[b.buffered_seeds().tolist().index(seed)] = 0
            assert b.staleness().tolist() == want.tolist()

    draws(30)
    old = b.staleness().tolist()
    b.update_with_episodes(episodes([1002, 1003], [3.0, 0.5]))
    assert b.staleness().tolist() == old + [0, 0]
    draws(30)
    old = b.staleness().tolist()
    slot = b.lowest_weight_slot()
    b.update_with_episodes(episodes([1004], [4.0]))  # above every score: replaces the lowest replay weight
    assert b.buffered_seeds().tolist()[slot] == 1004
    old[slot] = 0
    assert b.staleness().tolist() == old
    draws(30)


# ----------------------------------------------------------------------------- state


def test_state_round_trip_same_draws_and_same_response():
    b = busy_buffer()
    assert b.counters()["num_evicted"] > 0
    c = LevelBuffer.from_state_dict(unpackb(packb(b.state_dict())))
    assert state_bytes(c) == state_bytes(b)
    assert [b.draw() for _ in range(200)] == [c.draw() for _ in range(200)]
    seeds = b.buffered_seeds()[:3].tolist()
    for x in (b, c):
        x.update_with_episodes(episodes([*seeds, seeds[0], seeds[2]], [3.0, 0.2, 9.0, 3.0, 9.0]))
        x.update_with_episodes(episodes([START + 10**9], [50.0]))
    assert state_bytes(c) == state_bytes(b)
    assert [b.draw() for _ in range(200)] == [c.draw() for _ in range(200)]
    assert state_bytes(c) == state_bytes(b)


def _set(key, value):
    return lambda d: d.__setitem__(key, value)


def _seed_at(i, value):
    return lambda d: d["seeds"].__setitem__(i, value if value is not None else d["seeds"][0])


BAD_STATES = {
    "seed below start_level": _seed_at(0, START - 1),
    "seed at MAX_SEED": _seed_at(1, MAX_SEED),
    "duplicate seed": _seed_at(1, None),
    "NaN score": lambda d: d["scores"].__setitem__(0, np.nan),
    "infinite score": lambda d: d["scores"].__setitem__(2, np.inf),
    "permutation a not coprime": lambda d: d.__setitem__("permutation", [3, d["permutation"][1]]),
    "permutation a zero": lambda d: d.__setitem__("permutation", [0, d["permutation"][1]]),
    "permutation c out of range": lambda d: d.__setitem__("permutation", [d["permutation"][0], MAX_SEED - START]),
    "wrong kind": _set("kind", "sampler"),
    "wrong version": _set("version", 99),
    "size over capacity": _set("size", 7),
    "last_sampled after counter": lambda d: d["last_sampled"].__setitem__(0, d["counter"] + 1),
    "scores wrong dtype": lambda d: d.__setitem__("scores", d["scores"].astype(np.float32)),
    "missing rng": lambda d: d.pop("rng"),
}


@pytest.mark.parametrize("name", list(BAD_STATES))
def test_malformed_state_raises_and_core_is_unchanged(name):
    b = busy_buffer()
    d = unpackb(packb(b.state_dict()))
    BAD_STATES[name](d)
    with pytest.raises(ValueError):
        LevelBuffer.from_state_dict(d)
    core = LevelServiceCore(None, b.config, start_level=START, rng=0)
    core.load_state_dict(b.state_dict())
    before = packb(core.state_dict())
    with pytest.raises(ValueError):
        core.load_state_dict(d)
    assert packb(core.state_dict()) == before


# ----------------------------------------------------------------------------- bad input


def test_bad_results_leave_the_buffer_unchanged():
    b = busy_buffer()
    before = state_bytes(b)
    good = episodes([START, START + 1], [1.0, 1.0])
    bad = [
        ("levels", episodes([START - 1], [1.0])),
        ("levels", episodes([MAX_SEED], [1.0])),
        ("levels", episodes([START + 5, START - 1], [1.0, 1.0])),
        ("scores", episodes([START], [np.nan])),
        ("scores", episodes([START, START + 1], [1.0, np.nan])),
        ("scores", replace(good, scores=np.ones(1))),
        ("lengths", replace(good, lengths=np.zeros(2, dtype=np.int64))),
        ("levels", replace(good, levels=np.array([[START]]))),
        ("solved", replace(good, solved=np.ones(3, dtype=bool))),
    ]
    for field, results in bad:
        with pytest.raises(ValueError, match=field):
            b.update_with_episodes(results)
        assert state_bytes(b) == before, field


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"buffer_size": 0}, "buffer_size"),
        ({"buffer_size": -3}, "buffer_size"),
        ({"buffer_size": 2.5}, "buffer_size"),
        ({"buffer_size": True}, "buffer_size"),
        ({"strategy": "random"}, "strategy"),
        ({"strategy": "sequential"}, "strategy"),
        ({"replay_prob": -0.1}, "replay_prob"),
        ({"replay_prob": 1.5}, "replay_prob"),
        ({"replay_prob": float("nan")}, "replay_prob"),
    ],
)
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        make_buffer(**kwargs)
    with pytest.raises(ValueError, match=field):
        LevelServiceCore(None, LevelConfig(**kwargs), start_level=START)


def test_an_empty_buffer_is_refused_in_the_run_configs_words():
    """A level buffer with no room is one rule: the run config (an unbounded space with a scored strategy) and the
    buffer refuse it with the same message. An unbounded run with random levels is domain randomisation, which
    needs no buffer; a buffer built for it is refused."""
    from levelray.contracts.config import from_dict
    from levelray.contracts.validate import problems

    cfg = from_dict({"env": {"id": "CartPole-v1", "num_levels": 0}, "levels": {"buffer_size": 0}})
    words = [p.message for p in problems(cfg) if "levels.buffer_size" in p.paths]
    assert len(words) == 1
    with pytest.raises(ValueError) as refused:
        LevelServiceCore(None, cfg.levels, start_level=START)
    assert str(refused.value) == words[0]
    random = from_dict({"env": {"id": "CartPole-v1", "num_levels": 0}, "levels": {"strategy": "random"}})
    assert problems(random) == []
    with pytest.raises(ValueError, match=r"levels\.strategy must be a scored one for a level buffer"):
        LevelServiceCore(None, random.levels, start_level=START)


@pytest.mark.parametrize("start", [-1, MAX_SEED, True, 5.0])
def test_bad_start_level(start):
    with pytest.raises(ValueError, match="start_level"):
        make_buffer(start_level=start)


# ----------------------------------------------------------------------------- the service core


CONFIG = LevelConfig(buffer_size=5, replay_schedule="fixed", replay_prob=0.5, rho=0.0, staleness_coef=0.2)


def busy_core(path=None, start_level: int = 500) -> LevelServiceCore:
    core = LevelServiceCore(None, replace(CONFIG, snapshot_interval_s=3600.0), start_level=start_level, rng=0,
                            snapshot_path=path)
    seeds, _ = core.sample_levels(7)
    core.report_episodes(episodes(seeds, [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 0.25]))  # 6th evicts, 7th rejected
    core.sample_levels(20)
    return core


def test_core_sample_levels_and_stats():
    core = busy_core()
    seeds, replayed = core.sample_levels(64)
    assert len(seeds) == len(replayed) == 64
    assert all(type(s) is int and 500 <= s < MAX_SEED for s in seeds)
    assert all(type(r) is bool for r in replayed) and any(replayed) and not all(replayed)
    buffered = core.state_dict()["seeds"][:5].tolist()
    assert all(s in buffered for s, r in zip(seeds, replayed, strict=True) if r)
    assert core.sample_levels(0) == ([], [])
    assert not {"seeds", "weights", "staleness_vector"} & set(core.stats())  # a buffer's by default: none
    st = core.stats(vectors=True)
    assert st["buffered"] is True and st["num_levels"] == 5
    assert st["levels_buffered"] == 5 and st["num_seen"] == 5 and st["levels_evicted"] == 1
    assert st["num_rejected"] == 1 and st["num_samples"] == 7 + 20 + 64
    assert st["seeds"].tolist() == buffered
    assert st["weights"].shape == (5,) and st["weights"].sum() == pytest.approx(1.0, abs=1e-12)
    assert np.allclose(st["weights"], core.sample_weights(), rtol=0, atol=1e-15)
    assert st["staleness_vector"].shape == (5,)
    sc = core.state_dict()["scores"][:5]
    assert st["score"]["min"] == sc.min() == 1.0 and st["score"]["max"] == 3.0
    packb(st)
    fixed = LevelServiceCore(range(10), rng=0).stats()
    assert fixed["buffered"] is False and fixed["levels_evicted"] == 0 and fixed["num_levels"] == 10


def test_core_rejects_bad_feedback_unchanged():
    core = busy_core()
    before = packb(core.state_dict())
    with pytest.raises(ValueError, match="outside the level space"):
        core.report_episodes(episodes([499], [1.0]))
    with pytest.raises(ValueError, match="n must be"):
        core.sample_levels(-1)
    assert packb(core.state_dict()) == before


def test_core_snapshot_restores_identical_state(tmp_path):
    path = str(tmp_path / "buf.msgpack")
    core = busy_core(path)
    assert core.snapshot() == path
    # the snapshot's configuration wins over the one given
    restored = LevelServiceCore(None, LevelConfig(buffer_size=99), start_level=500, snapshot_path=path)
    assert packb(restored.state_dict()) == packb(core.state_dict())
    assert restored.stats()["restored_from_snapshot"] is True
    assert restored.sample_levels(100) == core.sample_levels(100)
    fb = episodes([500 + 7, 10**9], [9.0, 8.0])
    for c in (core, restored):
        c.report_episodes(fb)
    assert packb(restored.state_dict()) == packb(core.state_dict())


def test_snapshot_of_one_space_refuses_the_other(tmp_path):
    unbounded = str(tmp_path / "unbounded.msgpack")
    busy_core(unbounded).snapshot()
    with pytest.raises((ValueError, SnapshotError), match="unbounded"):
        LevelServiceCore(range(10), snapshot_path=unbounded)
    with pytest.raises(ValueError, match="from seed 600"):  # another start level is another space
        LevelServiceCore(None, CONFIG, start_level=600, snapshot_path=unbounded)
    fixed = str(tmp_path / "fixed.msgpack")
    core = LevelServiceCore(range(10), rng=0, snapshot_path=fixed)
    core.report_episodes(episodes([3], [1.0]))
    core.snapshot()
    with pytest.raises((ValueError, SnapshotError), match="unbounded"):
        LevelServiceCore(None, CONFIG, start_level=500, snapshot_path=fixed)
    # and the same through load_state_dict, leaving the service as it was
    buf = busy_core()
    before = packb(buf.state_dict())
    with pytest.raises(ValueError, match="unbounded"):
        buf.load_state_dict(core.state_dict())
    assert packb(buf.state_dict()) == before
    with pytest.raises(ValueError, match="unbounded"):
        core.load_state_dict(buf.state_dict())
