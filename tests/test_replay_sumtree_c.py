"""The C kernels of the replay sum tree (``replay_service._sumtree_c``) against the NumPy path:
bitwise-equal trees, identical leaves for the same queries and identical samples for the same RNG
draws, plus the fused replay update and the ``LEVELRAY_NO_C_EXT`` switch."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from levelray.replay_service import PrioritizedReplay, SumMinTree
from levelray.replay_service import sumtree as st_mod

ROOT = Path(__file__).resolve().parents[1]


def test_no_c_ext_switch_selects_numpy():
    env = dict(os.environ, LEVELRAY_NO_C_EXT="1")
    code = "import replay_service.sumtree as s; print(s.BACKEND, s.HAVE_C_EXT, s.SumMinTree(8).backend)"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["numpy", "False", "numpy"]


pytestmark_c = pytest.mark.skipif(
    not st_mod.HAVE_C_EXT,
    reason=f"C extension replay_service._sumtree_c not available ({st_mod.C_EXT_ERROR}); "
    "build it with `pip install -e .` and a C compiler",
)


def _pair(capacity, fanout, top_max):
    return (
        SumMinTree(capacity, fanout=fanout, top_max=top_max, backend="c"),
        SumMinTree(capacity, fanout=fanout, top_max=top_max, backend="numpy"),
    )


def _assert_same_tree(a: SumMinTree, b: SumMinTree) -> None:
    assert a._flat_sums.tobytes() == b._flat_sums.tobytes()
    assert a._flat_mins.tobytes() == b._flat_mins.tobytes()
    assert a.total() == b.total() and a.min() == b.min()
    assert a._top_cumsum().tobytes() == b._top_cumsum().tobytes()


@pytestmark_c
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacity=st.integers(1, 700),
    fanout=st.sampled_from([2, 4, 8, 16, 32, 64, 128]),
    top_max=st.sampled_from([1, 3, 16, 64, 1024]),
    seed=st.integers(0, 2**32 - 1),
    rounds=st.integers(1, 12),
    zero_frac=st.sampled_from([0.0, 0.3, 0.9]),
    spread=st.sampled_from([1.0, 1e6, 1e-12]),
)
def test_c_and_numpy_trees_bitwise_equal_and_sample_identically(
    capacity, fanout, top_max, seed, rounds, zero_frac, spread
):
    rng = np.random.default_rng(seed)
    c, n = _pair(capacity, fanout, top_max)
    for _ in range(rounds):
        idx = np.unique(rng.integers(0, capacity, size=rng.integers(1, 300)))
        vals = rng.random(idx.size) * np.where(rng.random(idx.size) < 0.5, 1.0, spread)
        vals[rng.random(idx.size) < zero_frac] = 0.0
        c.set(idx, vals)
        n.set(idx, vals)
        _assert_same_tree(c, n)
        if not c.total() > 0:
            continue
        # arbitrary queries, including the edges 0 and total (clipped below total)
        u = np.concatenate([rng.random(50) * c.total(), [0.0, c.total(), np.nextafter(c.total(), 0.0)]])
        u_before = u.copy()
        assert np.array_equal(c.find(u), n.find(u))
        assert np.array_equal(u, u_before)
        # stratified samples from the same generator state
        b = int(rng.integers(1, 600))
        state = rng.bit_generator.state
        ri, rv, rt = c.sample_stratified(b, rng)
        rng.bit_generator.state = state
        ni, nv, nt = n.sample_stratified(b, rng)
        assert np.array_equal(ri, ni) and rv.tobytes() == nv.tobytes() and rt == nt
        assert np.all(rv > 0)
    # and both equal rebuild() of their leaves
    snap = c._flat_sums.copy(), c._flat_mins.copy()
    c.rebuild()
    assert snap[0].tobytes() == c._flat_sums.tobytes() and snap[1].tobytes() == c._flat_mins.tobytes()


@pytestmark_c
def test_c_sample_redoes_empty_leaf_landings_like_numpy():
    # a queried prefix sum exactly at a boundary next to empty leaves: both must give a live leaf
    c, n = _pair(64, 4, 4)
    leaves = np.zeros(64)
    leaves[[3, 17, 18, 40, 63]] = [1e-300, 1.0, 1e16, 3.0, 1e-3]
    c.load_leaves(leaves)
    n.load_leaves(leaves)
    _assert_same_tree(c, n)
    for seed in range(20):
        a = c.sample_stratified(97, np.random.default_rng(seed))
        b = n.sample_stratified(97, np.random.default_rng(seed))
        assert np.array_equal(a[0], b[0]) and np.all(leaves[a[0]] > 0)


@pytestmark_c
def test_c_tree_pickles_and_rejects_bad_buffers():
    c, _ = _pair(100, 16, 4)
    c.set(np.arange(100), np.arange(100.0))
    c2 = pickle.loads(pickle.dumps(c))
    assert c2._sums[0].base is c2._flat_sums and c2.total() == c.total()
    c2.set(np.array([5]), np.array([50.0]))  # the views still write into the flat buffers
    assert c2.total() == c.total() + 45.0
    with pytest.raises(IndexError):
        c.set(np.array([1_000]), np.array([1.0]))
    from levelray.replay_service import _sumtree_c

    with pytest.raises(TypeError, match="int64"):
        _sumtree_c.set_leaves(c._flat_sums, c._flat_mins, c._layout, np.arange(3, dtype=np.int32), np.ones(3))
    with pytest.raises(TypeError, match="float64"):
        _sumtree_c.set_leaves(c._flat_sums, c._flat_mins, c._layout, np.arange(3), np.ones(3, dtype=np.float32))
    with pytest.raises(ValueError, match="layout"):
        _sumtree_c.set_leaves(c._flat_sums[:10], c._flat_mins, c._layout, np.arange(3), np.ones(3))
    assert SumMinTree(8, backend="numpy").backend == "numpy"
    with pytest.raises(ValueError, match="backend"):
        SumMinTree(8, backend="fortran")


def _replay_pair(capacity, seed, **kw):
    a = PrioritizedReplay(capacity, rng=seed, **kw)
    b = PrioritizedReplay(capacity, rng=seed, **kw)
    assert a.tree.backend == "c"
    b._tree = SumMinTree(capacity, fanout=a.tree.fanout, top_max=a.tree.top_max, backend="numpy")
    return a, b


@pytestmark_c
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacity=st.integers(1, 300),
    seed=st.integers(0, 2**31),
    max_use=st.sampled_from([None, 2, 5]),
    steps=st.integers(1, 15),
)
def test_replay_c_and_numpy_backends_behave_identically(capacity, seed, max_use, steps):
    a, b = _replay_pair(capacity, seed, max_use=max_use, alpha=0.7)
    rng = np.random.default_rng(seed + 1)
    for step in range(steps):
        k = int(rng.integers(1, 2 * capacity + 2))
        pr = None if step % 3 == 0 else rng.random(k) * 4
        assert np.array_equal(a.insert(list(range(k)), pr), b.insert(list(range(k)), pr))
        bs = int(rng.integers(1, 64))
        if not a.can_sample(bs):
            assert not b.can_sample(bs)
            continue
        sa, sb = a.sample(bs, 0.5), b.sample(bs, 0.5)
        assert np.array_equal(sa.ids, sb.ids) and sa.items == sb.items
        assert sa.weights.tobytes() == sb.weights.tobytes()
        assert sa.probabilities.tobytes() == sb.probabilities.tobytes()
        # updates with repeats (last wins), stale ids and never-issued ids, as int64 and as lists
        ids = np.concatenate([sa.ids, sa.ids[: bs // 2], [0, a.next_id + 5]]).astype(np.int64)
        p = rng.random(ids.size) * np.where(rng.random(ids.size) < 0.2, 0.0, 10.0)
        upd_ids = ids if step % 2 else ids.tolist()
        a.update_priorities(upd_ids, p)
        b.update_priorities(upd_ids, p)
        da, db = a.state_dict(), b.state_dict()
        for key in ("leaves", "raw_priorities", "slot_ids", "uses"):
            assert da[key].tobytes() == db[key].tobytes(), key
        assert da["counters"] == db["counters"] and da["max_priority"] == db["max_priority"]
        assert a.tree._flat_sums.tobytes() == b.tree._flat_sums.tobytes()
        assert a.tree._flat_mins.tobytes() == b.tree._flat_mins.tobytes()


@pytestmark_c
def test_fast_update_path_validates_like_the_numpy_path():
    a, b = _replay_pair(16, 0)
    ids = a.insert(list("abcdefgh"), np.arange(8.0))
    b.insert(list("abcdefgh"), np.arange(8.0))
    for bad_ids, bad_p, field in (
        (ids, -np.ones(8), "priorities"),
        (ids, np.full(8, np.nan), "priorities"),
        (ids, np.full(8, np.inf), "priorities"),
        (np.array([-1, 2]), np.ones(2), "ids"),
        (ids, np.ones(3), "priorities"),
    ):
        for r in (a, b):
            with pytest.raises(ValueError, match=field):
                r.update_priorities(bad_ids, bad_p)
    assert a.tree._flat_sums.tobytes() == b.tree._flat_sums.tobytes()
    assert a.updates == b.updates == 0 and a.max_priority == b.max_priority
