"""Tests of the replay service: inline core (snapshots, not-ready, stats) and the Ray actor
(concurrent clients, consistent counts, bad calls do not kill it)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from levelray.contracts.config import ReplayConfig
from levelray.contracts.snapshot import SnapshotError
from levelray.replay_service.service import ReplayService, ReplayServiceCore


def config(capacity: int, **fields) -> ReplayConfig:
    """The replay section with the buffer's own defaults (no max_use, min_size 1) unless given."""
    fields.setdefault("max_use", None)
    fields.setdefault("min_size", 1)
    fields.setdefault("snapshot_max_item_bytes", 256 << 20)
    return ReplayConfig(capacity=capacity, **fields)


def _traj(i: int) -> dict:
    return {"obs": np.full((4, 2), i, dtype=np.float32), "tag": i}


def test_service_snapshot_restore_same_next_samples(tmp_path):
    path = str(tmp_path / "replay.snap")
    a = ReplayServiceCore(config(64, max_use=10), seed=5, snapshot_path=path)
    ids = a.insert([_traj(i) for i in range(40)], np.linspace(0, 2, 40))
    s = a.sample(8, 0.4)
    a.update_priorities(s["ids"], np.arange(8.0))
    a.update_priorities(ids[:3], [0.1, 0.2, 0.3])
    assert a.snapshot() == path
    b = ReplayServiceCore(config(64, max_use=10), seed=123, snapshot_path=path)  # restores, seed ignored
    sa, sb = a.stats(), b.stats()
    for key in ("size", "inserts", "samples", "updates", "max_priority", "mean_uses", "priority_hist"):
        assert sa[key] == sb[key], key
    assert sb["restored_from"] == path
    for _ in range(3):
        x, y = a.sample(16, 0.6), b.sample(16, 0.6)
        np.testing.assert_array_equal(x["ids"], y["ids"])
        np.testing.assert_array_equal(x["weights"], y["weights"])
        assert [t["tag"] for t in x["items"]] == [t["tag"] for t in y["items"]]
        assert all(np.array_equal(p["obs"], q["obs"]) for p, q in zip(x["items"], y["items"], strict=True))


def test_service_corrupt_or_mismatched_snapshot_is_a_clear_error(tmp_path):
    path = tmp_path / "replay.snap"
    a = ReplayServiceCore(config(16), seed=0, snapshot_path=str(path))
    a.insert([_traj(i) for i in range(5)])
    a.snapshot()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated
    with pytest.raises(SnapshotError, match="corrupt or truncated"):
        ReplayServiceCore(config(16), snapshot_path=str(path))
    path.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(SnapshotError):
        ReplayServiceCore(config(16), snapshot_path=str(path))
    path.write_bytes(data)
    with pytest.raises(ValueError, match="capacity"):
        ReplayServiceCore(config(32), snapshot_path=str(path))
    assert len(ReplayServiceCore(config(16), snapshot_path=str(path))) == 5


def test_service_periodic_snapshot(tmp_path):
    path = tmp_path / "periodic.snap"
    a = ReplayServiceCore(config(16, snapshot_interval_s=0.05), seed=0, snapshot_path=str(path))
    a.insert([1, 2])
    assert not path.exists()
    time.sleep(0.1)
    a.insert([3])
    assert path.exists() and a.stats()["snapshots"] == 1


def test_service_not_ready_returns_none_and_stats():
    svc = ReplayServiceCore(config(100, min_size=3), seed=0)
    assert svc.sample(2, 0.5) is None  # empty
    svc.insert([_traj(0)])
    assert svc.sample(2, 0.5) is None  # below min_size
    svc.insert([_traj(1)])
    assert svc.sample(2, 0.5) is None  # still below min_size
    svc.insert([_traj(i) for i in range(2, 6)])
    out = svc.sample(8, 0.5)
    assert out is not None and len(out["ids"]) == 8
    with pytest.raises(ValueError, match="beta"):
        svc.sample(8, -1.0)  # a bad argument is an error, not "not ready"
    svc.insert([_traj(i) for i in range(6, 16)])
    st = svc.stats()
    assert st["size"] == 16 and st["inserts"] == 16 and st["samples"] == 8 and st["not_ready"] == 3
    assert sum(st["priority_hist"]["counts"]) == 16
    assert len(st["priority_hist"]["edges"]) == len(st["priority_hist"]["counts"]) + 1
    # fixed edges, whatever the data: one Prometheus series per bin for the whole job
    svc.update_priorities(out["ids"], np.full(len(out["ids"]), 5e4))
    later = svc.stats()["priority_hist"]
    assert later["edges"] == st["priority_hist"]["edges"] and later["edges"][0] == 0.0
    assert sum(later["counts"]) == 16 and later["counts"][-1] >= 1  # above the last edge: in the last bin
    assert st["mean_uses"] == pytest.approx(8 / 16)
    assert st["max_priority"] == 1.0 and st["capacity"] == 100


@pytest.mark.timeout(120)
def test_ray_service_concurrent_clients_counts_consistent(ray_session):
    ray = ray_session

    # defined here so that Ray pickles them by value (the test module is not importable by workers)
    def _inserter(handle, worker: int, rounds: int, per: int):
        import ray

        ids = []
        for k in range(rounds):
            tags = [worker * 100_000 + k * per + j for j in range(per)]
            got = ray.get(handle.insert.remote([{"tag": t} for t in tags], np.full(per, 0.5 + worker)))
            ids.extend(zip(got.tolist(), tags, strict=True))
        return ids


    def _sampler(handle, rounds: int, batch: int):
        import ray

        pairs, n, n_unique = [], 0, 0
        for _ in range(rounds):
            out = ray.get(handle.sample.remote(batch, 0.5))
            if out is None:
                continue
            n += len(out["ids"])
            n_unique += len(np.unique(out["ids"]))  # a repeated id in one update is applied once
            pairs.extend(zip(out["ids"].tolist(), [it["tag"] for it in out["items"]], strict=True))
            assert np.all(out["weights"] > 0) and np.all(out["weights"] <= 1.0 + 1e-12)
            ray.get(handle.update_priorities.remote(out["ids"], np.abs(np.random.default_rng(n).normal(size=batch))))
        return n, n_unique, pairs

    handle = ReplayService.options(num_cpus=0).remote(config(1000), seed=0)
    ins = ray.remote(num_cpus=0)(_inserter)
    smp = ray.remote(num_cpus=0)(_sampler)
    rounds, per, batch = 20, 10, 16
    ins_refs = [ins.remote(handle, w, rounds, per) for w in range(4)]
    smp_refs = [smp.remote(handle, 25, batch) for _ in range(4)]
    inserted = [p for r in ray.get(ins_refs) for p in r]
    sampled = ray.get(smp_refs)
    st = ray.get(handle.stats.remote())
    assert st["inserts"] == 4 * rounds * per == len(inserted)
    assert sorted(i for i, _ in inserted) == list(range(4 * rounds * per))  # unique ids
    assert st["size"] == min(1000, st["inserts"])
    n_sampled = sum(n for n, _, _ in sampled)
    assert st["samples"] == n_sampled > 0
    assert st["updates"] + st["updates_ignored"] == sum(u for _, u, _ in sampled)
    tag_of = dict(inserted)
    for _, _, pairs in sampled:
        for i, tag in pairs:
            assert tag_of[i] == tag  # every returned item is the one inserted under that id


@pytest.mark.timeout(120)
def test_ray_service_survives_bad_calls(ray_session, tmp_path):
    ray = ray_session
    path = str(tmp_path / "actor.snap")
    handle = ReplayService.remote(config(64), seed=1, snapshot_path=path)
    ray.get(handle.insert.remote([_traj(i) for i in range(10)]))
    bad = [
        handle.insert.remote([_traj(0)], [-1.0]),
        handle.sample.remote(0, 0.5),
        handle.sample.remote(4, float("nan")),
        handle.update_priorities.remote(np.array([0.5, 1.5]), [1.0, 1.0]),
        handle.update_priorities.remote([1, 2], [1.0]),
    ]
    for ref in bad:
        with pytest.raises(ValueError):
            ray.get(ref)
    assert ray.get(handle.size.remote()) == 10  # the actor survived the bad calls
    out = ray.get(handle.sample.remote(4, 0.5))
    assert out is not None and len(out["items"]) == 4
    assert ray.get(handle.stats.remote())["size"] == 10
    assert ray.get(handle.snapshot.remote()) == path
    restored = ReplayServiceCore(config(64), snapshot_path=path)
    assert len(restored) == 10 and restored.stats()["samples"] == 4
