import numpy as np
import pytest

from levelray.contracts import snapshot


def test_round_trip_preserves_arrays_and_scalars(tmp_path):
    obj = {
        "a": np.arange(12, dtype=np.float32).reshape(3, 4),
        "b": [1, 2.5, "x"],
        "c": np.int64(7),
        "rng": {"state": 2**100},
    }
    path = tmp_path / "s.msgpack"
    snapshot.save(path, obj)
    back = snapshot.load(path)
    np.testing.assert_array_equal(back["a"], obj["a"])
    assert back["a"].dtype == np.float32
    assert back["b"] == [1, 2.5, "x"] and back["c"] == 7


def test_truncated_file_is_a_clear_error(tmp_path):
    path = tmp_path / "s.msgpack"
    snapshot.save(path, {"a": np.zeros(1000)})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(snapshot.SnapshotError, match="corrupt or truncated"):
        snapshot.load(path)


def test_size_limit_and_missing_file(tmp_path):
    path = tmp_path / "s.msgpack"
    snapshot.save(path, {"a": np.zeros(1000)})
    with pytest.raises(snapshot.SnapshotError, match="over the limit"):
        snapshot.load(path, max_bytes=100)
    with pytest.raises(snapshot.SnapshotError, match="no snapshot"):
        snapshot.load(tmp_path / "missing")


def test_failed_write_keeps_previous_file(tmp_path):
    path = tmp_path / "s.msgpack"
    snapshot.save(path, {"v": 1})
    with pytest.raises(TypeError):
        snapshot.save(path, {"v": object()})
    assert snapshot.load(path) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["s.msgpack"]
