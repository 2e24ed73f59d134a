"""Bad input everywhere, fuzzed: every boundary either accepts its input or refuses it with its own
error type (naming the problem), never another exception, and never changes state on refusal."""

from __future__ import annotations

import copy
import json
import time

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from levelray.contracts import snapshot
from levelray.contracts.config import (
    ConfigError,
    LevelConfig,
    ReplayConfig,
    RunConfig,
    flag_name,
    from_dict,
    leaves,
    replace_path,
    replace_paths,
)
from levelray.contracts.spec import EnvSpec
from levelray.contracts.trajectory import TrajectoryError, validate_unroll
from levelray.deploy.rundir import RunDir
from levelray.level_service.service import LevelServiceCore
from levelray.replay_service.service import ReplayServiceCore

SPEC = EnvSpec((4,), "float32", True, num_actions=2)
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                      HealthCheck.function_scoped_fixture])


def valid_unroll(T=5, K=3, truncated_at=(2, 1)):
    rng = np.random.default_rng(0)
    u = {
        "obs": rng.normal(size=(T + 1, K, 4)).astype(np.float32),
        "actions": rng.integers(0, 2, size=(T, K)),
        "rewards": np.ones((T, K), np.float32),
        "terminated": np.zeros((T, K), bool),
        "truncated": np.zeros((T, K), bool),
        "behaviour_params": np.zeros((T, K, 2), np.float32),
        "level_seeds": np.full((T, K), 3, np.int64),
        "level_replayed": np.zeros((T, K), bool),
        "env_ids": np.arange(K),
        "policy_version": 1,
        "actor_id": 0,
        "final_obs": np.zeros((1, 4), np.float32),
        "final_obs_index": np.array([truncated_at]),
        "episode_returns": np.array([1.0]),
    }
    u["truncated"][truncated_at] = True
    return u


GARBAGE = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5), st.lists(st.integers(-3, 3), max_size=4),
    st.builds(lambda shape, kind: np.zeros(shape, dtype=kind),
              st.lists(st.integers(0, 4), max_size=3).map(tuple), st.sampled_from(["f4", "f8", "i8", "u1", "?"])),
    st.builds(lambda v: np.full((5, 3), v), st.sampled_from([np.nan, np.inf, -1, 10**6, 0.5])),
)


@FUZZ
@given(key=st.sampled_from(sorted(valid_unroll())), value=GARBAGE, delete=st.booleans())
def test_validator_accepts_or_names_the_field(key, value, delete):
    u = valid_unroll()
    if delete:
        del u[key]
    else:
        u[key] = value
    try:
        validate_unroll(u, SPEC, unroll_length=5, level_range=(0, 10), current_version=1)
    except TrajectoryError as exc:
        assert "unroll field" in str(exc)


def cartpole_learner_service(batch_size: int):
    """A LearnerService for `valid_unroll()`s: CartPole, level set [0, 10), T = 5."""
    from levelray.learner.service import LearnerService

    cfg = replace_paths(RunConfig(), {"env.id": "CartPole-v1", "env.num_levels": 10, "actors.unroll_length": 5,
                                      "learner.batch_size": batch_size})
    return LearnerService(cfg, SPEC)


def test_learner_rejects_malformed_unrolls_and_keeps_going(ray_session):
    service = cartpole_learner_service(batch_size=1)
    try:
        bad = valid_unroll()
        bad["rewards"][0, 0] = np.nan
        receipt = service.submit_batch([bad])
        assert receipt[0] == 0 and service.stats()["dropped"] == {"malformed": 1}
        assert service.queue.qsize() == 0
        bad = valid_unroll()
        bad["level_seeds"][:] = 99  # outside the level set [0, 10)
        service.submit_batch([bad])
        assert service.stats()["dropped"] == {"malformed": 2}
        future = valid_unroll()  # acted on by a version the learner has not published yet
        service.submit_batch([future])
        assert service.stats()["dropped"] == {"malformed": 3}
        good = valid_unroll()
        good["policy_version"] = 0
        service.submit_batch([good])  # a good one still trains
        deadline = time.time() + 30
        while service.stats()["learner_version"] < 1 and time.time() < deadline:
            time.sleep(0.05)
        assert service.stats()["learner_version"] == 1 and service.stats()["error"] is None
    finally:
        service.stop()


def test_learner_batch_submit_drops_only_the_malformed_unroll(ray_session):
    """An actor sending several unrolls in one call: a bad one among them is dropped and counted,
    the good ones around it are queued and trained on."""
    service = cartpole_learner_service(batch_size=2)
    try:
        good_a, bad, good_b = valid_unroll(), valid_unroll(), valid_unroll()
        good_a["policy_version"] = good_b["policy_version"] = 0
        bad["actions"][1, 2] = 5  # CartPole has 2 actions
        version, weights_box, budget_spent = service.submit_batch([good_a, bad, good_b])
        assert version == 0 and len(weights_box) == 1 and not budget_spent
        assert service.stats()["dropped"] == {"malformed": 1}
        deadline = time.time() + 30
        while service.stats()["learner_version"] < 1 and time.time() < deadline:
            time.sleep(0.05)
        stats = service.stats()
        assert stats["learner_version"] == 1 and stats["unrolls_received"] == 2
        assert stats["env_steps"] == 2 * 5 * 3 and stats["error"] is None
        service.submit_batch("not a list of unrolls")
        assert service.stats()["dropped"] == {"malformed": 2}
    finally:
        service.stop()


CONFIG_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**9), st.floats(allow_nan=True),
                          st.text(max_size=8), st.lists(st.integers(0, 5), max_size=3))
CONFIG_TREES = st.recursive(
    st.dictionaries(st.sampled_from(["env", "actors", "learner", "levels", "replay", "eval", "id", "num_actors",
                                     "learning_rate", "strategy", "total_steps", "bogus", "seed"]),
                    CONFIG_VALUES, max_size=4),
    lambda children: st.dictionaries(st.sampled_from(["env", "actors", "learner", "levels", "replay", "x"]),
                                     children, max_size=3),
    max_leaves=8,
)


@FUZZ
@given(tree=CONFIG_TREES)
def test_config_files_either_load_or_name_the_field(tree):
    try:
        cfg = from_dict(tree)
    except ConfigError as exc:
        assert str(exc)
    else:
        assert isinstance(cfg, RunConfig)


@FUZZ
@given(index=st.integers(0, len(leaves()) - 1), value=st.text(max_size=12))
def test_cli_flag_values_either_apply_or_name_the_field(index, value):
    path, f, _ = leaves()[index]
    cfg = RunConfig()
    before = copy.deepcopy(cfg)
    try:
        replace_path(cfg, path, value)
    except ConfigError as exc:
        assert path in str(exc) or flag_name(path, f)
        assert cfg == before  # a refused flag changes nothing


@FUZZ
@given(data=st.binary(max_size=200), flip=st.integers(0, 10**6), cut=st.integers(0, 10**6))
def test_snapshot_bytes_decode_or_raise_snapshot_error(data, flip, cut):
    original = {"a": np.arange(10, dtype=np.float32), "b": {"c": [1, 2.5, "x"]}, "n": 2**90}
    packed = snapshot.packb(original)
    back = snapshot.unpackb(packed, max_bytes=10_000)
    assert back["n"] == 2**90 and back["b"] == original["b"] and np.array_equal(back["a"], original["a"])
    damaged = bytearray(packed)
    damaged[flip % len(damaged)] ^= 0xA5
    for blob in (data, bytes(damaged), packed[: cut % len(packed)]):
        try:  # any exception other than SnapshotError fails the test
            snapshot.unpackb(blob, max_bytes=10_000)
        except snapshot.SnapshotError as exc:
            assert "snapshot" in str(exc)


@pytest.fixture(scope="module")
def checkpoint_bytes(tmp_path_factory):
    run = RunDir(tmp_path_factory.mktemp("ck") / "run")
    for version in (1, 2):
        run.save_checkpoint(version, {"version": version, "w": torch.ones(4) * version}, {"env_steps": version},
                            level_state={"x": np.arange(3)})
    return run


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["learner.pt", "levels.msgpack", "meta.json"]), pos=st.integers(0, 10**6),
       mode=st.sampled_from(["flip", "truncate", "empty"]))
def test_damaged_checkpoint_files_fall_back_or_fail_clearly(checkpoint_bytes, name, pos, mode, tmp_path_factory):
    import shutil

    run = RunDir(tmp_path_factory.mktemp("copy") / "run")
    shutil.copytree(checkpoint_bytes.path, run.path, dirs_exist_ok=True)
    target = run.list_checkpoints()[-1] / name
    data = bytearray(target.read_bytes())
    if mode == "flip":
        data[pos % len(data)] ^= 0x5A
    elif mode == "truncate":
        data = data[: pos % len(data)]
    else:
        data = bytearray()
    target.write_bytes(bytes(data))
    ckpt = run.load_latest_checkpoint()
    if name == "meta.json" and mode == "flip":
        assert ckpt["version"] in (1, 2)  # a flip inside a JSON string may still parse
    else:
        assert ckpt["version"] == 1


def test_every_byte_flip_of_meta_json_is_caught(checkpoint_bytes, tmp_path):
    """Each single damaged byte of the newest meta.json, one at a time: the loader falls back to the older
    checkpoint, or (only where the damage hit the name of the digest key itself) reads the newest one with
    every other field intact. Hypothesis found the gap this closes: a flip inside a key name left valid JSON
    without "version" or "files", and the checkpoint was taken as good."""
    import shutil

    run = RunDir(tmp_path / "run")
    shutil.copytree(checkpoint_bytes.path, run.path, dirs_exist_ok=True)
    target = run.list_checkpoints()[-1] / "meta.json"
    original = target.read_bytes()
    intact = json.loads(original)
    accepted_newest = 0
    for pos in range(len(original)):
        data = bytearray(original)
        data[pos] ^= 0x5A
        target.write_bytes(bytes(data))
        ckpt = run.load_latest_checkpoint()
        if ckpt["version"] == 2:
            accepted_newest += 1
            assert {k: v for k, v in ckpt.items() if k in intact and k != "meta_sha256"} == {
                k: v for k, v in intact.items() if k != "meta_sha256"}, pos
        else:
            assert ckpt["version"] == 1, pos
    assert accepted_newest <= len("meta_sha256")


def _level_core():
    return LevelServiceCore(np.arange(20), LevelConfig(strategy="value_l1"), rng=0)


@FUZZ
@given(method=st.sampled_from(["sample_seeds", "report_episodes"]),
       args=st.lists(GARBAGE, min_size=1, max_size=4))
def test_level_service_refuses_bad_calls_without_damage(method, args):
    core = _level_core()
    core.sample_seeds(5)
    before = snapshot.packb(core.state_dict())
    try:
        getattr(core, method)(*args)
    except (ValueError, TypeError):
        assert snapshot.packb(core.state_dict()) == before
    assert len(core.sample_seeds(3)) == 3  # still serving


@FUZZ
@given(method=st.sampled_from(["insert", "sample", "update_priorities"]), args=st.lists(GARBAGE, min_size=1,
                                                                                       max_size=3))
def test_replay_service_refuses_bad_calls_without_damage(method, args):
    core = ReplayServiceCore(ReplayConfig(capacity=16, max_use=None, min_size=1), seed=0)
    core.insert([{"x": i} for i in range(6)], np.arange(1.0, 7.0))
    before = json.dumps(core.stats(), sort_keys=True, default=str)
    state = snapshot.packb(core.state_dict()["replay"])
    try:
        getattr(core, method)(*args)
    except (ValueError, TypeError):
        after = snapshot.packb(core.state_dict()["replay"])
        assert after == state, before
    assert core.sample(2, 0.5) is not None  # still serving


def test_replay_service_refuses_a_sample_too_large_to_allocate():
    """A batch size beyond `MAX_SAMPLE` is refused naming the field before anything is allocated or drawn."""
    from levelray.replay_service.prioritized import MAX_SAMPLE

    core = ReplayServiceCore(ReplayConfig(capacity=16, max_use=None, min_size=1), seed=0)
    core.insert([{"x": i} for i in range(6)], np.arange(1.0, 7.0))
    state = snapshot.packb(core.state_dict()["replay"])
    with pytest.raises(ValueError, match="batch_size"):
        core.sample(30_729_843_902, 1.0)
    with pytest.raises(ValueError, match="batch_size"):
        core.sample(MAX_SAMPLE + 1, 1.0)
    assert snapshot.packb(core.state_dict()["replay"]) == state
