import json

import h5py
import numpy as np
import pytest

from hybridlens.store import StoreError, atomic_path, expected, read_store, sweep_temporaries, write_store


def _data():
    rng = np.random.default_rng(0)
    return {
        "layers.0.resid_pre": rng.normal(size=(5, 2, 8)).astype("float32"),
        "layers.1.mixer_out": rng.normal(size=(5, 2, 8)).astype("float32"),
        "answer_ids": np.arange(5),
    }


def test_round_trip_is_exact_and_records_attributes(tmp_path):
    path = tmp_path / "a.h5"
    write_store(path, _data(), {"model_source": "m", "seed": 3}, "activations")
    data, attrs = read_store(path)
    for k, v in _data().items():
        np.testing.assert_array_equal(data[k], v)
        assert data[k].dtype == v.dtype
    assert attrs["model_source"] == "m" and attrs["seed"] == 3
    with h5py.File(path) as f:  # dots are groups; one prompt per chunk
        assert f["layers/0/resid_pre"].chunks == (1, 2, 8)


def test_float16_storage(tmp_path):
    write_store(tmp_path / "h.h5", _data(), {}, "activations", dtype="float16")
    data, _ = read_store(tmp_path / "h.h5")
    assert data["layers.0.resid_pre"].dtype == np.float16
    np.testing.assert_allclose(data["layers.0.resid_pre"], _data()["layers.0.resid_pre"], atol=1e-2)


def test_truncated_file_is_reported_with_its_path(tmp_path):
    path = tmp_path / "t.h5"
    write_store(path, _data(), {}, "activations")
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(StoreError, match=f"{path}: truncated or corrupt"):
        read_store(path)


def test_failed_write_leaves_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "k.h5"
    write_store(path, _data(), {"v": 1}, "activations")
    with pytest.raises(ValueError), atomic_path(path) as tmp:
        tmp.write_bytes(b"partial")
        raise ValueError("interrupted")
    assert read_store(path)[1]["v"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["k.h5"]


def test_stale_temporaries_are_removed(tmp_path):
    stale = tmp_path / ".s.h5.tmp-12345"
    stale.write_bytes(b"left by a killed writer")
    write_store(tmp_path / "s.h5", _data(), {}, "activations")
    assert not stale.exists()


def test_a_byte_changed_in_place_is_caught_by_the_checksum(tmp_path):
    path = tmp_path / "c.h5"
    write_store(path, _data(), {}, "activations")
    with h5py.File(path) as f:  # where the first prompt of one dataset sits in the file
        offset = f["layers/1/mixer_out"].id.get_chunk_info(0).byte_offset
    raw = bytearray(path.read_bytes())
    raw[offset + 5] ^= 0xFF
    path.write_bytes(bytes(raw))  # same size, one byte different
    read_store(path, names=["layers.0.resid_pre"])  # the intact dataset still reads
    with pytest.raises(
        StoreError, match=rf"{path}: dataset layers.1.mixer_out does not match its checksum.*--force {path}"
    ):
        read_store(path)


def test_altered_attributes_are_caught(tmp_path):
    path = tmp_path / "a.h5"
    write_store(path, _data(), {"seed": 1}, "activations")
    with h5py.File(path, "r+") as f:
        f.attrs["seed"] = 2
    with pytest.raises(StoreError, match="attributes do not match their checksum"):
        read_store(path)


def test_a_store_written_for_something_else_is_refused_naming_both(tmp_path):
    path = tmp_path / "s.h5"
    attrs = {"model_source": "results/models/a", "config_hash": "x", "seed": 1}
    write_store(path, _data(), attrs, "activations")
    with pytest.raises(
        StoreError, match=rf"{path}: written for kind='activations', but this job expects kind='stitch_acts'"
    ):
        read_store(path, expect={"kind": "stitch_acts"})
    with pytest.raises(
        StoreError, match=r"written for seed=1, but this job expects seed=2; rebuild it with: snakemake"
    ):
        read_store(path, expect={"kind": "activations", "seed": 2})
    with pytest.raises(StoreError, match=r"written for model_source='results/models/a', but .* model_source='b'"):
        read_store(path, expect={"model_source": "b"})
    with pytest.raises(StoreError, match=r"no dataset layers\.9\.resid_pre"):
        read_store(path, names=["layers.9.resid_pre"])
    read_store(path, expect={"kind": "activations", "seed": 1, "model_source": "results/models/a"})


def test_expected_matches_what_provenance_records(tmp_path):
    config = {"model": {"family": "qwen3_5"}, "task": {"n": 4}}
    from hybridlens.store import provenance

    write_store(tmp_path / "p.h5", _data(), provenance("m", config, seed=3), "activations")
    read_store(tmp_path / "p.h5", expect=expected("activations", "m", config, 3))
    with pytest.raises(StoreError, match="config_hash"):
        read_store(tmp_path / "p.h5", expect=expected("activations", "m", {**config, "task": {"n": 5}}, 3))


def test_a_store_of_an_older_format_is_refused(tmp_path):
    path = tmp_path / "old.h5"
    with h5py.File(path, "w") as f:  # what format 1 wrote: datasets and attributes, no kind or checksums
        f.create_dataset("answer_ids", data=np.arange(3))
        f.attrs["dataset_names"] = '["answer_ids"]'
    with pytest.raises(StoreError, match=r"store format 1, this hybridlens reads format 2; rebuild"):
        read_store(path)


def test_sweep_removes_every_writers_temporaries_and_nothing_else(tmp_path):
    (tmp_path / "models/.tmp-abc123").mkdir(parents=True)  # save_checkpoint's directory
    (tmp_path / "models/.tmp-abc123/model.safetensors").write_bytes(b"partial")
    (tmp_path / "acts/m").mkdir(parents=True)
    (tmp_path / "acts/m/.x.h5.tmp-999").write_bytes(b"partial")  # atomic_path's file
    (tmp_path / "acts/m/x.h5").write_bytes(b"kept")
    removed = sweep_temporaries(tmp_path)
    assert sorted(p.name for p in removed) == [".tmp-abc123", ".x.h5.tmp-999"]
    assert [p.relative_to(tmp_path).as_posix() for p in sorted(tmp_path.rglob("*")) if p.is_file()] == ["acts/m/x.h5"]


def test_a_shipped_directory_lists_its_files_and_a_rerun_drops_files_it_no_longer_has(tmp_path):
    from hybridlens.models.source import SourceError, check_manifest
    from hybridlens.store import ship_directory

    src = tmp_path / "trained"
    src.mkdir()
    for name, text in {"config.json": "{}", "curve.csv": "step\n0\n", "old.txt": "x"}.items():
        (src / name).write_text(text)
    out = tmp_path / "zoo/toy"
    ship_directory(sorted(src.iterdir()), out, {"model": "toy"})
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"] == "toy" and sorted(manifest["files"]) == ["config.json", "curve.csv", "old.txt"]
    check_manifest(out)
    (src / "old.txt").unlink()
    ship_directory(sorted(src.iterdir()), out, {"model": "toy"})
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "curve.csv", "manifest.json"]
    assert not list((tmp_path / "zoo").glob(".tmp-*"))
    (out / "curve.csv").write_text("step\n1\n")
    with pytest.raises(SourceError, match=rf"{out}/curve.csv differs from the sha256 in its manifest.*make zoo"):
        check_manifest(out)
    (out / "config.json").unlink()
    with pytest.raises(SourceError, match=rf"{out}/config.json is missing"):
        check_manifest(out)
    ship_directory(sorted(src.iterdir()), out, {"model": "toy"})
    for name in ("chat_template.jinja", "tokenizer_config.json"):  # what transformers would read unasked
        (out / name).write_text("{}")
    with pytest.raises(SourceError, match=rf"{out}/chat_template.jinja \(and 1 more\) is not in its manifest: "):
        check_manifest(out)
