"""Tests of the pure replay buffer: sum/min tree, prioritized sampling, weights, eviction, max_use,
state round trips, input validation and the trajectory priority."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from levelray.contracts.snapshot import packb, unpackb
from levelray.learner.priorities import trajectory_priority
from levelray.replay_service import NotReadyError, PrioritizedReplay, SumMinTree


def _state_bytes(r: PrioritizedReplay) -> bytes:
    return packb(r.state_dict())


def _state_no_counters(r: PrioritizedReplay) -> bytes:
    d = r.state_dict()
    del d["counters"]
    return packb(d)


def _filled(n=50, capacity=64, seed=0, **kw) -> PrioritizedReplay:
    r = PrioritizedReplay(capacity, rng=seed, **kw)
    pr = np.random.default_rng(seed + 100).random(n) * 3
    r.insert([{"i": i, "obs": np.full(3, i, dtype=np.float32)} for i in range(n)], pr)
    return r


# --------------------------------------------------------------------------- sum tree
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    leaves=st.lists(
        st.one_of(st.just(0.0), st.floats(1e-6, 1e3, allow_nan=False, allow_infinity=False)),
        min_size=1,
        max_size=300,
    ),
    fanout=st.sampled_from([2, 4, 16]),
    top_max=st.sampled_from([1, 4, 64]),
    fracs=st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=1, max_size=40),
)
def test_tree_find_matches_bruteforce_cumsum(leaves, fanout, top_max, fracs):
    leaves = np.asarray(leaves)
    if leaves.sum() <= 0:
        leaves[0] = 1.0
    tree = SumMinTree(len(leaves), fanout=fanout, top_max=top_max)
    tree.set(np.arange(len(leaves)), leaves)
    cs = np.cumsum(leaves)
    total = tree.total()
    assert total == pytest.approx(cs[-1], rel=1e-12)
    assert tree.min() == leaves[leaves > 0].min()
    u = np.asarray(fracs) * total
    got = tree.find(u)
    want = np.minimum(np.searchsorted(cs, u, side="right"), len(leaves) - 1)
    assert np.all(leaves[got] > 0), "descent landed on an empty leaf"
    for g, w, x in zip(got, want, u, strict=True):
        if g != w:  # only allowed at a rounding distance from a segment boundary
            edges = np.concatenate([[0.0], cs])
            assert np.min(np.abs(edges - x)) <= 1e-9 * total, (g, w, x)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 500),
    fanout=st.sampled_from([2, 8, 16, 32]),
    seed=st.integers(0, 2**31),
)
def test_tree_batch_update_equals_rebuild_bitwise(n, fanout, seed):
    rng = np.random.default_rng(seed)
    tree = SumMinTree(n, fanout=fanout, top_max=8)
    for _ in range(20):
        idx = np.unique(rng.integers(0, n, size=rng.integers(1, 40)))
        vals = np.where(rng.random(idx.size) < 0.2, 0.0, rng.random(idx.size) * 10)
        tree.set(idx, vals)
    sums = [s.copy() for s in tree._sums]
    mins = [m.copy() for m in tree._mins]
    leaves = tree.leaves.copy()
    tree.rebuild()
    for a, b in zip(sums, tree._sums, strict=True):
        assert np.array_equal(a, b)
    for a, b in zip(mins, tree._mins, strict=True):
        assert np.array_equal(a, b)
    assert np.array_equal(leaves, tree.leaves)
    live = leaves[leaves > 0]
    assert tree.min() == (live.min() if live.size else np.inf)


def test_drift_check_rebuilds_a_drifted_tree():
    tree = SumMinTree(4096, fanout=16, top_max=16, check_interval=1000)
    rng = np.random.default_rng(0)
    tree.set(np.arange(4096), rng.random(4096))
    exact = float(np.sum(tree.leaves))
    assert tree.check_drift() is False
    # simulate accumulated rounding drift in the top node over leaves 0..255
    tree._sums[-1][0] += 1e-3
    tree._top_cs = None
    assert abs(tree.total() - exact) > 1e-6
    before = tree.rebuilds
    # the periodic check (every check_interval leaf writes) must notice and rebuild; the writes
    # avoid the drifted subtree so that only the rebuild can repair it
    for _ in range(5):
        i = np.sort(rng.choice(np.arange(256, 4096), 256, replace=False))
        tree.set(i, tree.leaves[i].copy())
    assert tree.rebuilds == before + 1
    assert tree.total() == pytest.approx(float(np.sum(tree.leaves)), rel=1e-12)
    # min drift is detected as well
    tree._mins[-1][0] = -1.0
    tree._min = None
    assert tree.check_drift() is True
    assert tree.min() == tree.leaves.min()


# --------------------------------------------------------------------------- sampling
def test_sampling_frequencies_follow_priorities_chisquare():
    alpha, eps = 0.7, 1e-6
    raw = np.array([0.0, 0.1, 0.5, 1.0, 2.0, 3.0, 5.0, 0.05, 8.0, 0.3])
    r = PrioritizedReplay(16, alpha=alpha, eps=eps, rng=1234)
    ids = r.insert(list(range(raw.size)), raw)
    counts = np.zeros(raw.size)
    for _ in range(1500):
        s = r.sample(32, 0.5)
        np.add.at(counts, s.ids - ids[0], 1)
    expected = (raw + eps) ** alpha
    expected = expected / expected.sum() * counts.sum()
    assert stats.chisquare(counts, expected).pvalue > 1e-3
    # and the test has power: a wrong exponent is rejected
    wrong = (raw + eps) ** 1.0
    wrong = wrong / wrong.sum() * counts.sum()
    assert stats.chisquare(counts, wrong).pvalue < 1e-6


def test_weights_and_probabilities_match_independent_float64():
    alpha, eps, beta = 0.6, 1e-6, 0.4
    r = PrioritizedReplay(32, alpha=alpha, eps=eps, rng=7)
    raw = np.random.default_rng(3).random(40) * 5  # 40 > 32: the first 8 are evicted
    ids = r.insert(list(range(40)), raw)
    r.update_priorities(ids[-5:], [0.0, 10.0, 0.2, 3.0, 1e-3])
    raw[-5:] = [0.0, 10.0, 0.2, 3.0, 1e-3]
    live_raw = raw[8:]
    n = live_raw.size
    pri = [(float(p) + eps) ** alpha for p in live_raw]
    total = math.fsum(pri)
    probs = {int(i): p / total for i, p in zip(ids[8:], pri, strict=True)}
    max_w = max((n * p) ** -beta for p in probs.values())
    for _ in range(5):
        s = r.sample(64, beta)
        want_p = np.array([probs[int(i)] for i in s.ids])
        want_w = np.array([(n * probs[int(i)]) ** -beta / max_w for i in s.ids])
        np.testing.assert_allclose(s.probabilities, want_p, rtol=1e-10)
        np.testing.assert_allclose(s.weights, want_w, rtol=1e-10)
        assert s.weights.max() <= 1.0 + 1e-12
        assert [it for it in s.items] == [int(i) for i in s.ids]  # items follow ids


def test_new_items_get_max_raw_priority_and_alpha_applied_once():
    alpha, eps = 0.5, 1e-6
    r = PrioritizedReplay(16, alpha=alpha, eps=eps, rng=0)
    (a,) = r.insert(["a"])
    assert r.max_priority == 1.0
    assert r.tree.leaves[a % 16] == pytest.approx((1.0 + eps) ** alpha, rel=1e-15)
    r.insert(["b", "c"], [0.5, 3.0])
    (d,) = r.insert(["d"])
    assert r.raw_priorities()[d % 16] == 3.0
    assert r.tree.leaves[d % 16] == pytest.approx((3.0 + eps) ** alpha, rel=1e-15)
    r.update_priorities([a], [7.5])
    (e,) = r.insert(["e"])
    assert r.raw_priorities()[e % 16] == 7.5
    assert r.tree.leaves[e % 16] == pytest.approx((7.5 + eps) ** alpha, rel=1e-15)
    assert r.max_priority == 7.5


def test_fifo_eviction_and_ids():
    r = PrioritizedReplay(4, rng=0)
    ids1 = r.insert(["a", "b", "c"])
    ids2 = r.insert(["d", "e", "f"])
    assert ids1.dtype == np.int64 and list(ids1) == [0, 1, 2] and list(ids2) == [3, 4, 5]
    assert len(r) == 4
    assert 0 not in r and 1 not in r and all(i in r for i in (2, 3, 4, 5))
    seen = set()
    for _ in range(50):
        s = r.sample(4, 1.0)
        seen.update(zip(s.ids.tolist(), s.items, strict=True))
    assert seen == {(2, "c"), (3, "d"), (4, "e"), (5, "f")}
    # a batch larger than capacity keeps the newest items only
    ids3 = r.insert(list("ghijkl"))
    assert list(ids3) == [6, 7, 8, 9, 10, 11] and len(r) == 4
    assert sorted(set(r.sample(8, 1.0).items)) == ["i", "j", "k", "l"]


def test_updates_for_evicted_or_removed_ids_are_ignored():
    r = PrioritizedReplay(2, rng=0, max_use=1)
    r.insert(["a", "b", "c"], [1.0, 1.0, 1.0])  # id 0 evicted at once
    before = _state_no_counters(r)
    r.update_priorities([0], [100.0])
    assert _state_no_counters(r) == before
    assert r.updates_ignored == 1 and r.updates == 0
    s = r.sample(1, 1.0)  # with max_use=1 the sampled item is removed
    gone = int(s.ids[0])
    assert gone not in r and len(r) == 1
    snap = _state_no_counters(r)
    r.update_priorities([gone, 1000], [50.0, 50.0])  # removed, and never issued
    assert _state_no_counters(r) == snap and r.updates_ignored == 3
    assert r.max_priority == 1.0
    # and an update whose slot was reused is not applied to the new occupant
    r2 = PrioritizedReplay(2, rng=0)
    (old,) = r2.insert(["x"], [1.0])
    r2.insert(["y", "z"], [1.0, 1.0])  # z reuses old's slot
    r2.update_priorities([old], [99.0])
    assert set(r2.raw_priorities().tolist()) == {1.0}


def test_stratified_one_draw_per_segment_crafted_tree():
    # alpha = 1: leaves are p + eps; masses 1, 1, 2 over 4 segments of width 1 -> [0, 1, 2, 2]
    r = PrioritizedReplay(8, alpha=1.0, eps=1e-12, rng=5)
    r.insert(["a", "b", "c"], [1.0, 1.0, 2.0])
    for _ in range(200):
        assert r.sample(4, 1.0).items == ["a", "b", "c", "c"]
    # B equal items and a batch of B: every item exactly once, in order (iid would repeat items)
    r = PrioritizedReplay(64, rng=9)
    r.insert(list(range(64)))
    for _ in range(50):
        assert r.sample(64, 0.5).items == list(range(64))


def test_same_id_twice_in_a_batch_is_allowed():
    r = PrioritizedReplay(8, alpha=1.0, rng=0)
    r.insert(["big", "small"], [100.0, 1e-3])
    s = r.sample(8, 1.0)
    assert s.items.count("big") >= 7
    assert np.all(s.ids[np.array(s.items) == "big"] == 0)


# --------------------------------------------------------------------------- max_use
def test_max_use_counts_every_return_including_duplicates():
    max_use = 3
    r = PrioritizedReplay(64, rng=11, max_use=max_use, alpha=1.0)
    pr = np.ones(40)
    pr[0] = 1e4  # item 0 dominates: drawn many times per batch, must be capped at max_use
    r.insert(list(range(40)), pr)
    counts = np.zeros(40, dtype=int)
    s = r.sample(8, 1.0)
    np.add.at(counts, s.ids, 1)
    assert counts[0] == max_use and 0 not in r and len(r) == 39
    assert len(s.ids) == 8 and len(s.items) == 8
    total = 8
    while r.can_sample(8):
        s = r.sample(8, 1.0)
        np.add.at(counts, s.ids, 1)
        total += 8
        assert np.all(counts <= max_use)
    assert counts.sum() == total
    assert len(r) == int((counts < max_use).sum())
    with pytest.raises(NotReadyError):
        r.sample(8, 1.0)


def test_max_use_single_item_removed_after_uses():
    r = PrioritizedReplay(4, rng=0, max_use=2)
    r.insert(["only"])
    assert r.sample(1, 1.0).items == ["only"]
    assert len(r) == 1
    assert r.sample(1, 1.0).items == ["only"]
    assert len(r) == 0
    with pytest.raises(NotReadyError):
        r.sample(1, 1.0)
    r2 = PrioritizedReplay(4, rng=0, max_use=2)
    r2.insert(["only"])
    with pytest.raises(NotReadyError):  # 3 returns needed, only 2 uses available
        r2.sample(3, 1.0)
    assert r2.sample(2, 1.0).items == ["only", "only"] and len(r2) == 0


# --------------------------------------------------------------------------- state
@pytest.mark.parametrize("max_use", [None, 4])
def test_state_round_trip_gives_same_next_samples(max_use):
    r = _filled(n=60, capacity=48, seed=3, max_use=max_use)
    for _ in range(3):
        s = r.sample(16, 0.5)
        r.update_priorities(s.ids, np.abs(np.random.default_rng(1).normal(size=16)))
    d = unpackb(packb(r.state_dict()))
    r2 = PrioritizedReplay(1, rng=999)
    r2.load_state_dict(d)
    assert len(r2) == len(r) and r2.capacity == 48 and r2.max_priority == r.max_priority
    for _ in range(5):
        a, b = r.sample(16, 0.7), r2.sample(16, 0.7)
        np.testing.assert_array_equal(a.ids, b.ids)
        np.testing.assert_array_equal(a.weights, b.weights)
        np.testing.assert_array_equal(a.probabilities, b.probabilities)
        for x, y in zip(a.items, b.items, strict=True):
            assert x["i"] == y["i"] and np.array_equal(x["obs"], y["obs"])
        ids = r.insert([{"i": -1, "obs": np.zeros(3, np.float32)}])
        assert np.array_equal(ids, r2.insert([{"i": -1, "obs": np.zeros(3, np.float32)}]))
    assert _state_bytes(r) == _state_bytes(r2)


def test_state_item_budget_keeps_newest_and_removes_the_rest():
    r = PrioritizedReplay(16, rng=0)
    payload = [np.full(100, i, dtype=np.float64) for i in range(10)]  # ~800+ bytes each packed
    ids = r.insert(payload)
    one = len(packb(payload[0]))
    d = r.state_dict(max_item_bytes=3 * one)
    assert d["items_dropped"] == 7
    r2 = PrioritizedReplay.from_state_dict(unpackb(packb(d)))
    assert len(r2) == 3 and r2.next_id == r.next_id
    assert set(ids[-3:].tolist()) == {i for i in ids.tolist() if i in r2}
    got = {int(x[0]) for x in r2.sample(30, 1.0).items}
    assert got <= {7, 8, 9}
    d0 = r.state_dict(include_items=False)
    r3 = PrioritizedReplay.from_state_dict(d0)
    assert len(r3) == 0 and r3.next_id == 10 and d0["items_dropped"] == 10
    with pytest.raises(NotReadyError):
        r3.sample(1, 1.0)
    (nid,) = r3.insert(["new"])
    assert nid == 10


def test_load_rejects_malformed_state_and_keeps_old():
    r = _filled(n=10, capacity=16)
    before = _state_bytes(r)
    d = r.state_dict()
    bad = dict(d)
    bad["slot_ids"] = d["slot_ids"][:-1]
    with pytest.raises(ValueError, match="slot_ids"):
        r.load_state_dict(bad)
    bad = dict(d)
    bad["leaves"] = d["leaves"].copy()
    bad["leaves"][0] = np.nan
    with pytest.raises(ValueError):
        r.load_state_dict(bad)
    with pytest.raises(ValueError):
        r.load_state_dict({"format": "nope"})
    bad = dict(d)
    del bad["rng"]
    with pytest.raises(ValueError):
        r.load_state_dict(bad)
    assert _state_bytes(r) == before


# --------------------------------------------------------------------------- validation
def test_bad_input_raises_and_leaves_state_unchanged():
    r = _filled(n=20, capacity=32, min_size=5)
    r.sample(4, 0.5)
    before = _state_bytes(r)
    ids = r.sample(4, 0.5).ids  # advance once more, then snapshot
    before = _state_bytes(r)
    bad_calls = [
        (lambda: r.insert(["a"], [-1.0]), "priorities"),
        (lambda: r.insert(["a"], [np.nan]), "priorities"),
        (lambda: r.insert(["a"], [np.inf]), "priorities"),
        (lambda: r.insert(["a", "b"], [1.0]), "priorities"),
        (lambda: r.insert(["a"], [[1.0]]), "priorities"),
        (lambda: r.insert(["a"], ["x"]), "priorities"),
        (lambda: r.insert("abc"), "items"),
        (lambda: r.insert(np.arange(3)), "items"),
        (lambda: r.insert(7), "items"),
        (lambda: r.sample(4, 0.0), "beta"),
        (lambda: r.sample(4, -1.0), "beta"),
        (lambda: r.sample(4, float("nan")), "beta"),
        (lambda: r.sample(4, "x"), "beta"),
        (lambda: r.sample(0, 0.5), "batch_size"),
        (lambda: r.sample(-3, 0.5), "batch_size"),
        (lambda: r.sample(2.5, 0.5), "batch_size"),
        (lambda: r.sample(True, 0.5), "batch_size"),
        (lambda: r.update_priorities(ids.astype(np.float64), np.ones(4)), "ids"),
        (lambda: r.update_priorities(ids.reshape(2, 2), np.ones(4)), "ids"),
        (lambda: r.update_priorities(ids, np.ones(3)), "priorities"),
        (lambda: r.update_priorities(ids, -np.ones(4)), "priorities"),
        (lambda: r.update_priorities(ids, np.full(4, np.nan)), "priorities"),
        (lambda: r.update_priorities(ids, np.full(4, np.inf)), "priorities"),
        (lambda: r.update_priorities([-1, 2, 3, 4], np.ones(4)), "ids"),
        (lambda: r.update_priorities(["a"], [1.0]), "ids"),
    ]
    for call, field in bad_calls:
        with pytest.raises(ValueError, match=field):
            call()
        assert _state_bytes(r) == before, field
    empty = PrioritizedReplay(8, rng=0, min_size=3)
    e_before = _state_bytes(empty)
    with pytest.raises(NotReadyError, match="empty"):
        empty.sample(1, 1.0)
    empty.insert(["a", "b"])
    e_before = _state_bytes(empty)
    with pytest.raises(NotReadyError, match="min_size"):
        empty.sample(1, 1.0)
    assert _state_bytes(empty) == e_before
    for cap in (0, -1, 2.5, None):
        with pytest.raises(ValueError, match="capacity"):
            PrioritizedReplay(cap)
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedReplay(4, alpha=-1)
    with pytest.raises(ValueError, match="eps"):
        PrioritizedReplay(4, eps=0.0)
    with pytest.raises(ValueError, match="max_use"):
        PrioritizedReplay(4, max_use=0)
    with pytest.raises(ValueError, match="rng"):
        PrioritizedReplay(4, rng="seed")


def test_rng_argument_forms():
    a = PrioritizedReplay(8, rng=42)
    b = PrioritizedReplay(8, rng=np.random.default_rng(42))
    for r in (a, b):
        r.insert(list(range(8)), np.arange(8.0))
    np.testing.assert_array_equal(a.sample(8, 1.0).ids, b.sample(8, 1.0).ids)
    PrioritizedReplay(8, rng=None).insert([1])


# --------------------------------------------------------------------------- trajectory priority
def _reference_priority(td, eta, mask=None):
    t, b = td.shape
    out = []
    for j in range(b):
        vals = [float(td[i, j]) for i in range(t) if mask is None or mask[i, j]]
        out.append(eta * max(vals) + (1 - eta) * math.fsum(vals) / len(vals) if vals else 0.0)
    return np.array(out)


def test_trajectory_priority_matches_float64_reference():
    rng = np.random.default_rng(0)
    td = np.abs(rng.normal(size=(20, 7))).astype(np.float32)
    np.testing.assert_allclose(trajectory_priority(td), _reference_priority(td, 0.9), rtol=1e-12)
    np.testing.assert_allclose(trajectory_priority(td, eta=0.3), _reference_priority(td, 0.3), rtol=1e-12)
    mask = rng.random((20, 7)) < 0.6
    mask[:, 3] = False
    got = trajectory_priority(td, 0.9, mask=mask)
    np.testing.assert_allclose(got, _reference_priority(td, 0.9, mask), rtol=1e-12)
    assert got[3] == 0.0 and got.dtype == np.float64
    torch = pytest.importorskip("torch")
    np.testing.assert_allclose(
        trajectory_priority(torch.from_numpy(td), mask=torch.from_numpy(mask)),
        _reference_priority(td, 0.9, mask),
        rtol=1e-12,
    )
    for bad, field in (
        (np.ones(5), "shape"),
        (-np.ones((3, 2)), ">= 0"),
        (np.full((3, 2), np.nan), "finite"),
        (np.zeros((0, 2)), "time step"),
    ):
        with pytest.raises(ValueError, match=field):
            trajectory_priority(bad)
    with pytest.raises(ValueError, match="eta"):
        trajectory_priority(td, eta=1.5)
    with pytest.raises(ValueError, match="mask"):
        trajectory_priority(td, mask=np.ones((3, 3)))
