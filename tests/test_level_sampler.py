"""Tests of the pure PLR sampler (level_service.sampler).  Expected numbers are computed by hand or by tiny
independent float64 loop implementations inside this file."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from levelray.contracts.config import LevelConfig
from levelray.contracts.levels import EpisodeResults
from levelray.contracts.snapshot import packb, unpackb
from levelray.level_service.sampler import TRANSFORMS, LevelSampler
from tests.support import episode_results

# ----------------------------------------------------------------------------- helpers


def make_sampler(seeds, *, discount=0.99, rng=None, **levels) -> LevelSampler:
    """A sampler whose keyword arguments other than `discount` and `rng` are `LevelConfig` fields."""
    return LevelSampler(seeds, LevelConfig(**levels), discount=discount, rng=rng)


def state_bytes(s: LevelSampler) -> bytes:
    return packb(s.state_dict())


def seeded(n_levels: int, scores, **kw) -> LevelSampler:
    """A sampler over seeds 100..100+n whose first len(scores) levels are seen with these scores (one
    episode each; strategy `gae` unless given)."""
    kw.setdefault("rng", 0)
    kw.setdefault("strategy", "gae")
    s = make_sampler(range(100, 100 + n_levels), **kw)
    k = len(scores)
    if k:
        s.update_with_episodes(episode_results(np.arange(100, 100 + k), scores))
    return s


def set_staleness(s: LevelSampler, staleness) -> None:
    d = s.state_dict()
    staleness = np.asarray(staleness, dtype=np.int64)
    counter = int(staleness.max()) + 1
    d["counter"] = counter
    d["last_sampled"] = counter - staleness
    s.load_state_dict(d)


def ref_transform(name: str, temperature: float, eps: float, xs) -> list[float]:
    """Independent loop implementation of the transforms over the seen values `xs` (normalised)."""
    xs = [float(x) for x in xs]
    m = len(xs)
    if name == "constant":
        w = [1.0] * m
    elif name in ("max", "eps_greedy"):
        top = max(xs)
        ties = [1.0 if x == top else 0.0 for x in xs]
        nt = sum(ties)
        w = [t / nt for t in ties]
        if name == "eps_greedy":
            w = [(1 - eps) * v + eps / m for v in w]
    elif name == "rank":
        w = []
        for x in xs:
            rank = 1 + sum(1 for y in xs if y > x)
            w.append(rank ** (-1.0 / temperature))
    elif name == "power":
        w = [max(x, 0.0) ** (1.0 / temperature) for x in xs]
        if sum(w) == 0:
            w = [1.0] * m
    elif name == "softmax":
        top = max(xs)
        w = [math.exp((x - top) / temperature) for x in xs]
    total = sum(w)
    return [v / total for v in w]


def chisq_ok(counts, probs, n) -> float:
    probs = np.asarray(probs, dtype=np.float64)
    counts = np.asarray(counts)
    nz = probs > 0
    assert counts[~nz].sum() == 0, "a level with zero weight was sampled"
    exp = probs[nz] * n
    return stats.chisquare(counts[nz], exp * counts[nz].sum() / exp.sum()).pvalue


# ----------------------------------------------------------------------------- strategies, by hand


def test_sequential_and_random():
    s = make_sampler([7, 3, 9], strategy="sequential", rng=0)
    assert [s.sample() for _ in range(7)] == [7, 3, 9, 7, 3, 9, 7]
    assert s.sample_weights().tolist() == [0.0, 1.0, 0.0]
    r = make_sampler(range(10), strategy="random", rng=1)
    assert np.allclose(r.sample_weights(), 0.1)
    draws = [r.sample() for _ in range(5000)]
    assert chisq_ok(np.bincount(draws, minlength=10), r.sample_weights(), 5000) > 0.001
    # episode results are accepted (validated) and score nothing for random/sequential
    r.update_with_episodes(episode_results([1], [1.0]))
    assert r.scores().sum() == 0


# ----------------------------------------------------------------------------- transforms


SCORES = [0.1, 0.4, -0.2, 0.4, 0.3, 0.0]


@pytest.mark.parametrize("name", TRANSFORMS)
@pytest.mark.parametrize("temperature", [1.0, 0.3])
def test_score_transforms_match_reference(name, temperature):
    s = seeded(8, SCORES, score_transform=name, temperature=temperature, eps=0.2, staleness_coef=0.0)
    w = s.sample_weights()
    want = ref_transform(name, temperature, 0.2, SCORES)
    assert np.allclose(w[:6], want, rtol=1e-12, atol=1e-15)
    assert w[6:].tolist() == [0.0, 0.0]  # unseen levels get no replay weight
    assert w.sum() == pytest.approx(1.0)


def test_score_transforms_by_hand():
    def weights(name, scores, **kw):
        return seeded(len(scores), scores, score_transform=name, staleness_coef=0.0, **kw).sample_weights()

    assert np.allclose(weights("constant", [1, 5, 2, 0]), [0.25] * 4)
    assert np.allclose(weights("max", [1, 3, 3, 2]), [0, 0.5, 0.5, 0])
    assert np.allclose(weights("eps_greedy", [1, 3, 2, 0], eps=0.2), [0.05, 0.85, 0.05, 0.05])
    r = np.array([1 / 4, 1, 1 / 3, 1 / 2])
    assert np.allclose(weights("rank", [0.1, 0.4, 0.2, 0.3], temperature=1.0), r / r.sum())
    t = np.array([1 / 3, 1, 1, 1 / 4])  # ties share the best rank: ranks 3, 1, 1, 4
    assert np.allclose(weights("rank", [1, 2, 2, 0], temperature=1.0), t / t.sum())
    assert np.allclose(weights("power", [1, 2, 0, -1], temperature=0.5), [0.2, 0.8, 0, 0])
    assert np.allclose(
        weights("softmax", [0, math.log(2), math.log(3), 0], temperature=1.0), [1 / 7, 2 / 7, 3 / 7, 1 / 7]
    )


STALENESS = [3, 0, 1, 2]


@pytest.mark.parametrize("name", TRANSFORMS)
def test_staleness_transforms_and_mixing(name):
    scores = [0.1, 0.4, 0.2, 0.3]
    s = seeded(
        4,
        scores,
        score_transform="rank",
        temperature=1.0,
        staleness_coef=0.3,
        staleness_transform=name,
        staleness_temperature=0.5,
        eps=0.1,
    )
    set_staleness(s, STALENESS)
    assert s.staleness().tolist() == STALENESS
    p_score = np.array(ref_transform("rank", 1.0, 0.1, scores))
    p_stale = np.array(ref_transform(name, 0.5, 0.1, STALENESS))
    assert np.allclose(s.sample_weights(), 0.7 * p_score + 0.3 * p_stale, rtol=1e-12)


def test_staleness_power_by_hand_and_all_zero_staleness():
    s = seeded(4, [1, 1, 1, 1], score_transform="constant", staleness_coef=1.0)
    set_staleness(s, STALENESS)
    assert np.allclose(s.sample_weights(), np.array(STALENESS) / 6)
    one = seeded(3, [1.0], staleness_coef=0.5)
    one.sample()
    one.sample()  # only level 0 is seen: it is replayed and its staleness is 0
    assert one.staleness()[0] == 0
    w = one.sample_weights()
    assert np.isfinite(w).all() and w.tolist() == [1.0, 0.0, 0.0]


def test_staleness_counts_samples_since_last_sampled():
    s = make_sampler([10, 11, 12], strategy="sequential", rng=0)
    for _ in range(4):  # 10 11 12 10
        s.sample()
    assert s.staleness().tolist() == [0, 2, 1]


# ----------------------------------------------------------------------------- reference-bug regressions


def test_max_transform_does_not_mutate_scores():
    s = seeded(6, [0.5, 2.0, 1.0], score_transform="max", staleness_coef=0.2)
    before = s.scores()
    for _ in range(50):
        s.sample()
    w = s.sample_weights()
    assert np.array_equal(s.scores(), before)
    assert np.isfinite(w).all() and w.sum() == pytest.approx(1.0)
    assert w[1] >= 0.8 and w[3:].sum() == 0


def test_power_on_negative_gae_no_nan():
    s = make_sampler(range(4), strategy="gae", score_transform="power", staleness_coef=0.0, rng=0)
    s.update_with_episodes(episode_results([0, 1], [-1.5, -0.5]))
    w = s.sample_weights()
    assert np.isfinite(w).all()
    assert w.tolist() == [0.5, 0.5, 0.0, 0.0]  # all clipped to 0 -> uniform over seen
    s.update_with_episodes(episode_results([2], [2.0]))
    assert s.sample_weights().tolist() == [0.0, 0.0, 1.0, 0.0]
    for _ in range(20):
        s.sample()


@pytest.mark.parametrize("name", ["rank", "power", "softmax", "max", "eps_greedy"])
def test_temperature_near_zero_no_nan(name):
    s = seeded(
        5,
        [0.3, 0.9, 0.1, 0.5],
        score_transform=name,
        temperature=1e-8,
        staleness_transform=name,
        staleness_temperature=1e-8,
        staleness_coef=0.1,
    )
    for _ in range(30):
        s.sample()
    w = s.sample_weights()
    assert np.isfinite(w).all() and w.sum() == pytest.approx(1.0)
    assert w[1] >= 0.9 - 1e-12 if name != "eps_greedy" else w[1] >= 0.85


def test_huge_scores_softmax_no_nan():
    s = seeded(3, [1e308, -1e308, 0.0], score_transform="softmax", temperature=1e-8, staleness_coef=0.0)
    assert s.sample_weights().tolist() == [1.0, 0.0, 0.0]


# ----------------------------------------------------------------------------- sampling frequencies


@pytest.mark.parametrize("name", ["rank", "power", "softmax", "eps_greedy"])
def test_sampling_frequencies_match_weights(name):
    rng = np.random.default_rng(5)
    scores = rng.random(20)
    s = seeded(20, scores, score_transform=name, temperature=0.5, staleness_coef=0.0, rng=11)
    w = s.sample_weights()
    n = 20000
    draws = np.array([s.sample() for _ in range(n)]) - 100
    assert chisq_ok(np.bincount(draws, minlength=20), w, n) > 0.001


def clone_draws(s: LevelSampler, k: int) -> np.ndarray:
    """One sample from each of k clones of `s`, differing only in their RNG stream."""
    base = s.state_dict()
    c = LevelSampler.from_state_dict(base)
    out = np.empty(k, dtype=np.int64)
    for j in range(k):
        d = dict(base)
        d["rng"] = np.random.default_rng(10_000 + j).bit_generator.state
        c.load_state_dict(d)
        out[j] = c.sample()
    return out


@pytest.mark.parametrize("transform,temp", [("power", 1.0), ("power", 0.5), ("rank", 1.0), ("constant", 1.0)])
def test_staleness_mixture_sampling_matches_weights(transform, temp):
    rng = np.random.default_rng(3)
    s = seeded(
        12,
        rng.random(10),
        score_transform="rank",
        temperature=0.3,
        staleness_coef=0.6,
        staleness_transform=transform,
        staleness_temperature=temp,
        rng=4,
    )
    for _ in range(300):  # build up uneven staleness; 2 levels stay unseen
        s.sample()
    w = s.sample_weights()
    assert w[10:].sum() == 0 and w.sum() == pytest.approx(1.0)
    k = 4000
    draws = clone_draws(s, k) - 100
    counts = np.bincount(draws, minlength=12)
    # the unseen draws (proportionate: prob 1 - 10/12) go to levels 10, 11; compare the replays
    replay = counts[:10]
    assert chisq_ok(replay, w[:10], replay.sum()) > 0.001


def test_incremental_staleness_tree_matches_rebuilt():
    """The Fenwick trees updated sample by sample (and by point inserts of newly seen levels) must give
    the same draws as trees rebuilt from scratch from the same state."""
    rng = np.random.default_rng(8)
    s = make_sampler(range(500), staleness_coef=0.7, rng=1)
    s.update_with_episodes(episode_results(np.arange(300), rng.random(300)))
    for step in range(40):
        for _ in range(50):
            s.sample()
        k = 5 if step % 2 else 1
        new = np.arange(300 + step * 5, 300 + step * 5 + k)
        s.update_with_episodes(episode_results(new, rng.random(k)))
        if step % 10 == 9:
            fresh = LevelSampler.from_state_dict(s.state_dict())
            assert [s.sample() for _ in range(200)] == [fresh.sample() for _ in range(200)]


# ----------------------------------------------------------------------------- schedules


def test_fixed_schedule_with_nu():
    s = seeded(100, np.linspace(0, 1, 30), replay_schedule="fixed", nu=0.3, rho=0.2, rng=2)
    n = 5000
    draws = np.array([s.sample() for _ in range(n)]) - 100
    replays = int((draws < 30).sum())
    assert stats.binomtest(replays, n, 0.7).pvalue > 0.001
    unseen = np.bincount(draws[draws >= 30] - 30, minlength=70)
    assert chisq_ok(unseen, np.full(70, 1 / 70), unseen.sum()) > 0.001


def test_fixed_schedule_below_rho_and_all_seen():
    s = seeded(100, np.ones(10), replay_schedule="fixed", nu=0.0, rho=0.2, rng=2)
    assert all(s.sample() >= 110 for _ in range(500))  # 10% seen < rho: only new levels
    t = seeded(10, np.arange(10.0), replay_schedule="fixed", nu=1.0, rho=0.2, rng=2)
    assert len({t.sample() for _ in range(500)}) > 1  # all seen: always replay even with nu = 1
    u = seeded(10, np.arange(5.0), replay_schedule="fixed", nu=1.0, rho=0.2, rng=2)
    assert all(u.sample() >= 105 for _ in range(300))  # nu = 1: never replay while levels are unseen


def test_proportionate_schedule():
    s = seeded(100, np.linspace(0, 1, 40), replay_schedule="proportionate", rho=0.2, rng=3)
    n = 5000
    draws = np.array([s.sample() for _ in range(n)]) - 100
    assert stats.binomtest(int((draws < 40).sum()), n, 0.4).pvalue > 0.001
    below = seeded(100, np.ones(19), replay_schedule="proportionate", rho=0.2, rng=3)
    assert all(below.sample() >= 119 for _ in range(300))
    none = make_sampler(range(5), rho=0.0, rng=0)  # nothing seen: sample unseen, weights all zero
    assert none.sample_weights().sum() == 0
    assert chisq_ok(np.bincount([none.sample() for _ in range(2000)], minlength=5), [0.2] * 5, 2000) > 0.001


# ----------------------------------------------------------------------------- partial episodes & EWA


def test_ewa_alpha_successive_episodes():
    s = make_sampler(range(3), alpha=0.25, rng=0)
    s.update_with_episodes(episode_results([2, 2], [4.0, 8.0]))
    assert s.scores()[2] == pytest.approx(0.75 * (0.25 * 4.0) + 0.25 * 8.0)


# ----------------------------------------------------------------------------- state


def busy_sampler(rng_seed=0) -> LevelSampler:
    rng = np.random.default_rng(rng_seed)
    s = make_sampler(range(50), rng=rng_seed)
    for _ in range(5):
        s.update_with_episodes(episode_results(rng.integers(0, 50, 6), np.abs(rng.normal(size=6))))
        for _ in range(30):
            s.sample()
    return s


def test_state_round_trip_same_next_samples():
    s = busy_sampler()
    raw = packb(s.state_dict())
    t = make_sampler(range(3), strategy="random", rng=99)
    t.load_state_dict(unpackb(raw))
    assert [s.sample() for _ in range(100)] == [t.sample() for _ in range(100)]
    assert state_bytes(s) == state_bytes(t)
    for x in (s, t):
        x.update_with_episodes(episode_results([1, 2, 3, 4, 1, 2, 3, 4], np.arange(8.0)))
    assert state_bytes(s) == state_bytes(t)


def with_fragments(d: dict) -> dict:
    """State `d` holding two unfinished episodes scored step by step (on levels 3 and 7)."""
    return {**d, "pending": {"actor_ids": [4, 9], "levels": np.array([3, 7]), "sums": np.array([1.5, 0.5]),
                             "steps": np.array([3, 1])}}


def test_a_state_with_unfinished_fragments_loads_them_dropped_and_counted():
    """Scores arrive as whole episodes, so a saved state's step-scored fragments can never finish: they load
    checked, are dropped and counted, and leave the scores and the draws as they were."""
    s = busy_sampler()
    t = LevelSampler.from_state_dict(with_fragments(unpackb(packb(s.state_dict()))))
    assert t.counters()["num_dropped_fragments"] == s.counters()["num_dropped_fragments"] + 2
    assert t.scores().tolist() == s.scores().tolist() and t.seen().tolist() == s.seen().tolist()
    assert [s.sample() for _ in range(100)] == [t.sample() for _ in range(100)]
    assert t.state_dict()["pending"]["actor_ids"] == []


def test_version_1_state_resumes():
    """A state written with the flat version-1 config (checkpoints, service snapshots) loads the same."""
    s = busy_sampler()
    d = unpackb(packb(s.state_dict()))
    d["version"] = 1
    # fields added since version 1
    for key in ("snapshot_interval_s", "buffer_size", "replay_prob", "robust", "editor", "num_edits", "drop_unsolvable",
                "gae_lambda", "window", "sfl"):
        del d["config"][key]
    del d["counts"]["num_replays"]
    t = LevelSampler.from_state_dict(d)
    t._counts["num_replays"] = s._counts["num_replays"]  # not counted in version 1
    assert state_bytes(s) == state_bytes(t)
    assert [s.sample() for _ in range(100)] == [t.sample() for _ in range(100)]


def test_load_state_dict_rejects_bad_state_unchanged():
    s = busy_sampler()
    before = state_bytes(s)
    good = s.state_dict()
    for mutate in (
        lambda d: d.pop("rng"),
        lambda d: d.__setitem__("scores", np.zeros(3)),
        lambda d: d.__setitem__("counter", -1),
        lambda d: d["config"].__setitem__("strategy", "nope"),
        lambda d: d.update(with_fragments(d)) or d["pending"].__setitem__("levels", np.array([10_000, 3])),
        lambda d: d.__setitem__("version", 99),
    ):
        d = unpackb(packb(good))
        mutate(d)
        with pytest.raises(ValueError):
            s.load_state_dict(d)
        assert state_bytes(s) == before


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"strategy": "foo"}, "strategy"),
        ({"replay_schedule": "always"}, "replay_schedule"),
        ({"score_transform": "exp"}, "score_transform"),
        ({"staleness_transform": "x"}, "staleness_transform"),
        ({"temperature": 0.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"staleness_temperature": -1}, "staleness_temperature"),
        ({"eps": 1.5}, "eps"),
        ({"rho": -0.1}, "rho"),
        ({"nu": 2}, "nu"),
        ({"alpha": 0.0}, "alpha"),
        ({"staleness_coef": 1.1}, "staleness_coef"),
        ({"discount": "0.9"}, "discount"),
        ({"rng": "seed"}, "rng"),
    ],
)
def test_bad_constructor_args(kwargs, field):
    with pytest.raises(ValueError, match=field):
        make_sampler(range(5), **kwargs)


def _edges(meta: dict, whole: bool) -> list[tuple[float, bool]]:
    """`(value, accepted)` at each bound of a leaf's metadata and one step past it."""
    step = 1 if whole else 1e-6
    out = []
    if "min" in meta:
        out += [(meta["min"], True), (meta["min"] - step, False)]
    if "above" in meta:
        out += [(meta["above"], False), (meta["above"] + step, True)]
    if "max" in meta:
        out += [(meta["max"], True), (meta["max"] + step, False)]
    return out


def test_the_sampler_accepts_exactly_the_levels_values_the_run_config_accepts():
    """A `levels` leaf's range is its metadata: at each bound and one step past it, the config (as the command
    line reads it) and the sampler agree, and refuse with the same words."""
    from levelray.contracts.config import ConfigError, field_types, from_dict, leaves

    checked = 0
    for path, f, tp in leaves(LevelConfig, "levels."):
        section, _, name = path.removeprefix("levels.").rpartition(".")  # a section inside it: levels.sfl
        for value, accepted in _edges(dict(f.metadata), tp is int):
            data = {section: {name: value}} if section else {name: value}
            kwargs = {section: field_types(LevelConfig)[section](**{name: value})} if section else data
            if accepted:
                from_dict({"levels": data})
                make_sampler(range(5), **kwargs)
                continue
            with pytest.raises(ConfigError) as by_config:
                from_dict({"levels": data})
            with pytest.raises(ValueError) as by_sampler:
                make_sampler(range(5), **kwargs)
            assert str(by_sampler.value) == str(by_config.value)
            assert path in str(by_sampler.value)
            checked += 1
    assert checked == 27  # one step past each of the 27 bounds of the section (7 of them levels.sfl's)


def test_bad_seeds():
    for seeds, msg in [
        ([], "non-empty"),
        ([1, 1], "distinct"),
        ([1.5, 2.0], "integer"),
        ([[1, 2]], "dimensions"),
    ]:
        with pytest.raises(ValueError, match=msg):
            make_sampler(seeds)


def test_bad_updates_leave_state_unchanged():
    s = busy_sampler()
    before = state_bytes(s)
    good = episode_results([1, 2], [1.0, 2.0])
    bad_calls = [
        ("levels", episode_results([1, 99], [1.0, 1.0])),
        ("levels", replace(good, levels=np.array([[1, 2]]))),
        ("scores", replace(good, scores=np.ones(3))),
        ("scores", replace(good, scores=np.array([1.0, np.nan]))),
        ("lengths", replace(good, lengths=np.array([1, 0]))),
        ("returns", replace(good, returns=np.array([np.inf, 0.0]))),
        ("solved", replace(good, solved=np.array([2, 0]))),
    ]
    for field, results in bad_calls:
        with pytest.raises(ValueError, match=field):
            s.update_with_episodes(results)
        assert state_bytes(s) == before, field


finite_or_not = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-10, max_value=10),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.one_of(st.integers(95, 160), st.just(2**70), st.just(None)),
    score=finite_or_not,
    length=st.one_of(st.integers(-3, 10), st.just(2.5), st.just(True)),
)
def test_fuzz_one_episode_result(seed, score, length):
    s = seeded(50, [1.0, 2.0], rng=0)
    before = state_bytes(s)
    try:
        s.update_with_episodes(EpisodeResults(np.array([seed]), np.array([score]), np.array([length]), np.zeros(1),
                                              np.zeros(1, dtype=bool)))
    except ValueError:
        assert state_bytes(s) == before
        return
    assert state_bytes(s) != before
    assert np.isfinite(s.scores()).all() and abs(s.sample_weights().sum() - 1) < 1e-9


def test_sample_cost_does_not_grow_with_levels():
    """Default configuration: sample() must not rebuild anything O(levels) per call (generous bound; an
    O(n log n) rebuild per sample at 200,000 levels takes tens of milliseconds)."""
    import time

    n = 200_000
    s = make_sampler(range(n), rng=0)
    s.update_with_episodes(episode_results(np.arange(n), np.random.default_rng(0).random(n)))
    for _ in range(200):
        s.sample()
    t0 = time.perf_counter()
    for _ in range(2000):
        s.sample()
    assert (time.perf_counter() - t0) / 2000 < 1e-3


def test_draw_says_which_levels_are_replays():
    """Robust PLR's flag on a fixed set: a draw from the unseen levels is new, a draw from the replay
    distribution is a replay (always a seen level); random and sequential never replay."""
    s = seeded(10, [0.5, 0.1, 0.9, 0.3], rho=0.0, replay_schedule="fixed", nu=0.5)
    seen = set(range(100, 104))
    draws = [s.draw() for _ in range(2000)]
    assert all(seed in seen for seed, replayed in draws if replayed)
    assert all(seed not in seen for seed, replayed in draws if not replayed)
    n_replays = sum(replayed for _, replayed in draws)
    assert abs(n_replays - 1000) < 4 * math.sqrt(2000 * 0.25)  # fixed schedule: P(replay) = 1 - nu
    assert s.counters()["num_replays"] == n_replays
    for strategy in ("random", "sequential"):
        u = make_sampler(range(5), strategy=strategy, rng=0)
        assert not any(u.draw()[1] for _ in range(50))
