import h5py
import numpy as np
import pytest

from hybridlens.store import StoreError, atomic_path, read_store, write_store


def _data():
    rng = np.random.default_rng(0)
    return {
        "layers.0.resid_pre": rng.normal(size=(5, 2, 8)).astype("float32"),
        "layers.1.mixer_out": rng.normal(size=(5, 2, 8)).astype("float32"),
        "answer_ids": np.arange(5),
    }


def test_round_trip_is_exact_and_records_attributes(tmp_path):
    path = tmp_path / "a.h5"
    write_store(path, _data(), {"model_source": "m", "seed": 3})
    data, attrs = read_store(path)
    for k, v in _data().items():
        np.testing.assert_array_equal(data[k], v)
        assert data[k].dtype == v.dtype
    assert attrs["model_source"] == "m" and attrs["seed"] == 3
    with h5py.File(path) as f:  # dots are groups; one prompt per chunk
        assert f["layers/0/resid_pre"].chunks == (1, 2, 8)


def test_float16_storage(tmp_path):
    write_store(tmp_path / "h.h5", _data(), {}, dtype="float16")
    data, _ = read_store(tmp_path / "h.h5")
    assert data["layers.0.resid_pre"].dtype == np.float16
    np.testing.assert_allclose(data["layers.0.resid_pre"], _data()["layers.0.resid_pre"], atol=1e-2)


def test_truncated_file_is_reported_with_its_path(tmp_path):
    path = tmp_path / "t.h5"
    write_store(path, _data(), {})
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(StoreError, match=f"{path}: truncated or corrupt"):
        read_store(path)


def test_failed_write_leaves_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "k.h5"
    write_store(path, _data(), {"v": 1})
    with pytest.raises(ValueError), atomic_path(path) as tmp:
        tmp.write_bytes(b"partial")
        raise ValueError("interrupted")
    assert read_store(path)[1]["v"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["k.h5"]


def test_stale_temporaries_are_removed(tmp_path):
    stale = tmp_path / ".s.h5.tmp-12345"
    stale.write_bytes(b"left by a killed writer")
    write_store(tmp_path / "s.h5", _data(), {})
    assert not stale.exists()
