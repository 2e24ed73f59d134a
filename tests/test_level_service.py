"""Tests of the level service: the plain core (snapshots, stats, validation) and the Ray actor under 16
concurrent clients."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from levelray.contracts.config import LevelConfig
from levelray.contracts.snapshot import SnapshotError, packb
from levelray.level_service.service import LevelServiceCore
from tests.support import episode_results

CONFIG = LevelConfig(staleness_coef=0.2)


def episodes(seeds, scores):
    """Finished episodes on `seeds` with (value_l1) scores `scores` (>= 0), in that order."""
    return episode_results(seeds, scores)


def busy_core(path=None, interval=60.0) -> LevelServiceCore:
    core = LevelServiceCore(range(40), replace(CONFIG, snapshot_interval_s=interval), rng=0, snapshot_path=path)
    rng = np.random.default_rng(0)
    core.report_episodes(episodes(np.arange(20), rng.random(20)))
    core.sample_seeds(25)
    return core


def test_load_state_dict_restores_the_sampler_and_refuses_another_seed_set():
    source = busy_core()
    target = LevelServiceCore(range(40), CONFIG, rng=0)
    target.load_state_dict(source.state_dict())
    assert packb(target.state_dict()) == packb(source.state_dict())
    assert target.sample_seeds(16) == source.sample_seeds(16)  # the generator state came along too
    before = packb(target.state_dict())
    with pytest.raises(ValueError, match="different seed set"):
        target.load_state_dict(LevelServiceCore(range(39), CONFIG, rng=0).state_dict())
    assert packb(target.state_dict()) == before


def test_sample_seeds_and_stats():
    core = busy_core()
    seeds = core.sample_seeds(32)
    assert len(seeds) == 32 and all(isinstance(s, int) and 0 <= s < 40 for s in seeds)
    assert core.sample_seeds(0) == []
    st = core.stats()
    assert st["num_samples"] == 25 + 32
    assert st["num_seen"] == 20 and st["seen_fraction"] == 0.5
    assert st["num_episodes"] == 20
    sc = core.state_dict()["scores"][:20]
    assert st["score"]["max"] == pytest.approx(sc.max()) and st["score"]["median"] == pytest.approx(np.median(sc))
    assert st["score"]["mean"] == pytest.approx(sc.mean())
    assert st["staleness"]["max"] >= st["staleness"]["mean"] >= 0
    assert np.allclose(st["weights"], core.sample_weights()) and st["weights"].sum() == pytest.approx(1.0)
    assert st["seeds"].tolist() == list(range(40))
    assert len(st["top_levels"]) == 10
    w = [t["weight"] for t in st["top_levels"]]
    assert w == sorted(w, reverse=True) and w[0] == pytest.approx(st["weights"].max())
    packb({k: v for k, v in st.items()})  # msgpack-friendly


def test_bad_calls_raise_value_error_and_keep_state():
    core = busy_core()
    before = packb(core.state_dict())
    with pytest.raises(ValueError, match="n must be"):
        core.sample_seeds(-1)
    with pytest.raises(ValueError, match="n must be"):
        core.sample_seeds(2.0)
    with pytest.raises(ValueError, match="unknown seed"):
        core.report_episodes(episodes([3, 400], [1.0, 1.0]))
    with pytest.raises(ValueError, match="scores"):
        core.report_episodes(episodes([3], [float("nan")]))
    with pytest.raises(ValueError, match="lengths"):
        core.report_episodes(replace(episodes([1], [1.0]), lengths=np.array([1, 1])))
    with pytest.raises(ValueError, match="snapshot_path"):
        core.snapshot()
    assert packb(core.state_dict()) == before


def test_snapshot_restore_same_state(tmp_path):
    path = tmp_path / "lvl" / "snap.msgpack"
    core = busy_core(str(path))
    assert core.snapshot() == str(path)
    restored = LevelServiceCore(range(40), LevelConfig(strategy="random"), snapshot_path=str(path))
    assert packb(restored.state_dict()) == packb(core.state_dict())
    assert restored.stats()["restored_from_snapshot"] is True
    assert restored.sample_seeds(50) == core.sample_seeds(50)


def test_automatic_snapshot_after_interval(tmp_path):
    path = tmp_path / "auto.msgpack"
    core = LevelServiceCore(range(10), replace(CONFIG, snapshot_interval_s=0.05), rng=0, snapshot_path=str(path))
    core.sample_seeds(3)
    assert not path.exists()
    time.sleep(0.06)
    core.report_episodes(episodes([4], [2.0]))
    assert path.exists()
    assert LevelServiceCore(range(10), snapshot_path=str(path)).state_dict()["scores"][4] == 2.0


def test_corrupt_or_mismatched_snapshot_clear_error(tmp_path):
    path = tmp_path / "snap.msgpack"
    core = busy_core(str(path))
    core.snapshot()
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(SnapshotError, match="corrupt or truncated"):
        LevelServiceCore(range(40), snapshot_path=str(path))
    path.write_bytes(packb({"hello": 1}))
    with pytest.raises(SnapshotError, match="not a level-service snapshot"):
        LevelServiceCore(range(40), snapshot_path=str(path))
    path.write_bytes(raw)
    with pytest.raises(ValueError, match="different seed set"):
        LevelServiceCore(range(41), snapshot_path=str(path))
    assert packb(LevelServiceCore(range(40), snapshot_path=str(path)).state_dict())


def test_bad_constructor_args():
    with pytest.raises(ValueError, match="snapshot_interval_s"):
        LevelServiceCore(range(3), LevelConfig(snapshot_interval_s=0))
    with pytest.raises(ValueError, match="strategy"):
        LevelServiceCore(range(3), LevelConfig(strategy="nope"))


@pytest.mark.timeout(120)
def test_ray_service_16_concurrent_clients(ray_session, tmp_path):
    ray = ray_session
    from levelray.level_service.service import LevelService

    n_levels = 64
    svc = LevelService.remote(
        list(range(n_levels)), LevelConfig(snapshot_interval_s=3600), rng=1, snapshot_path=str(tmp_path / "svc.msgpack")
    )

    @ray.remote(num_cpus=0.25)
    def client(handle, k, rounds):
        got = []
        for r in range(rounds):
            seeds = ray.get(handle.sample_seeds.remote(8))
            got.extend(seeds)
            scores = [float((s * 7 + k + r) % 11) for s in seeds]
            ray.get(handle.report_episodes.remote(episode_results(seeds, scores)))  # actor k's finished episodes
        return got

    rounds = 5
    refs = [client.remote(svc, k, rounds) for k in range(16)]
    bad = svc.report_episodes.remote(episodes([n_levels + 5], [1.0]))  # one client's bad call
    results = ray.get(refs)
    with pytest.raises(ValueError, match="unknown seed"):
        ray.get(bad)
    with pytest.raises(ValueError, match="n must be"):
        ray.get(svc.sample_seeds.remote(-3))
    st = ray.get(svc.stats.remote())
    total = 16 * rounds * 8
    assert sum(len(r) for r in results) == total
    assert all(0 <= s < n_levels for r in results for s in r)
    assert st["num_samples"] == total and st["num_sample_calls"] == 16 * rounds
    assert st["num_episodes"] == total and st["num_update_calls"] == 16 * rounds
    assert st["num_seen"] == len({s for r in results for s in r})
    # the actor survived the bad calls and still serves; snapshot works through Ray too
    assert len(ray.get(svc.sample_seeds.remote(4))) == 4
    path = ray.get(svc.snapshot.remote())
    assert LevelServiceCore(list(range(n_levels)), snapshot_path=path).stats()["num_samples"] == total + 4
    ray.kill(svc)


def test_prefetcher_holds_a_second_of_levels_within_its_bounds(ray_session):
    """An actor's level buffer grows with the rate its envs use levels (so refills stay a few a second however
    short the episodes) and falls back to `per_env * num_envs` when they slow down."""
    from levelray.actors.env_actor import SeedPrefetcher
    from levelray.level_service.service import LevelService

    service = LevelService.remote(list(range(100)), replace(CONFIG, strategy="random"))
    prefetcher = SeedPrefetcher(service, num_envs=4, per_env=2)
    prefetcher.fill()
    assert prefetcher.capacity == 8 and len(prefetcher.buffer) == 8
    prefetcher._last_request, prefetcher._drawn = (0.0, 0), 1000
    prefetcher._resize(1.0)  # 1,000 levels a second: 1 s of them
    assert prefetcher.capacity == 1000
    prefetcher._drawn = 1005
    prefetcher._resize(2.0)  # 5 a second: back to the floor
    assert prefetcher.capacity == 8
    prefetcher._drawn = 10**6
    prefetcher._resize(3.0)
    assert prefetcher.capacity == SeedPrefetcher.MAX_CAPACITY
    # live: levels used as fast as Python can ask take far fewer refills than one per 4 (the floor's half)
    fresh = SeedPrefetcher(service, num_envs=4, per_env=2)
    fresh.fill()
    drawn, deadline = 0, time.time() + 2.0
    while time.time() < deadline:
        fresh(drawn % 4)
        drawn += 1
    assert drawn > 2000 and fresh.requests < drawn / 40 and fresh.capacity > 8
    assert all(0 <= seed < 100 for seed, _ in fresh.buffer)


@pytest.mark.timeout(120)
def test_both_backends_build_the_level_service_from_the_run_config_alike(ray_session, tmp_path):
    """The inline core and the Ray actor take one set of arguments
    (`deploy.training.components.level_service_args`): the run's level space, its `levels` section as the
    services take it, the learner's discount and the run's seed, so both draw the same levels; the actor writes its
    snapshots where the Ray backend says."""
    from levelray.contracts.config import from_dict
    from levelray.deploy.training.components import level_service_args, make_level_service
    from levelray.level_service.service import LevelService

    cfg = from_dict({"env": {"id": "CartPole-v1", "num_levels": 30, "start_level": 100}, "seed": 7,
                     "levels": {"snapshot_interval_s": 0}, "learner": {"discount": 0.9}})
    path = tmp_path / "levels.msgpack"
    inline = make_level_service(cfg)
    actor = LevelService.remote(**level_service_args(cfg, snapshot_path=str(path)))
    want = inline.sample_seeds(64)
    assert ray_session.get(actor.sample_seeds.remote(64)) == want
    assert set(want) <= set(range(100, 130))
    saved = ray_session.get(actor.state_dict.remote())
    assert packb(saved) == packb(inline.state_dict())
    assert saved["config"]["discount"] == 0.9 and saved["config"]["snapshot_interval_s"] == 1e-3
    assert path.exists()  # an interval of 0 is raised to 1 ms (`service_section`): a snapshot after the call
    ray_session.kill(actor)
