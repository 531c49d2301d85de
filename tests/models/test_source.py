"""Source checks on a real sharded checkpoint and the ways a copy of it goes wrong, each refused in one line."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from hybridlens.models.adapter import load_model
from hybridlens.models.families import UnsupportedModel
from hybridlens.models.realshape import REAL_CONFIGS, build_realshape
from hybridlens.models.source import SourceError, check_source, convert_bin, main, safetensors_header

WHERE = "config models.mine.source"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("qwen")
    build_realshape(REAL_CONFIGS / "Qwen__Qwen3.5-0.8B.config.json", out, layers=4, hidden=64, dtype="float32")
    return out


@pytest.fixture
def copy(checkpoint, tmp_path):
    return shutil.copytree(checkpoint, tmp_path / "ckpt")


def shards(path):
    return sorted(set(json.loads((path / "model.safetensors.index.json").read_text())["weight_map"].values()))


def test_an_intact_checkpoint_passes_and_its_headers_are_the_files(checkpoint):
    assert check_source(str(checkpoint), "qwen3_5", WHERE) == []
    header = safetensors_header(checkpoint / shards(checkpoint)[0])
    assert set(header) == set(load_file(checkpoint / shards(checkpoint)[0]))


def test_a_missing_shard_is_named(copy):
    (copy / shards(copy)[1]).unlink()
    with pytest.raises(SourceError, match=rf"^{WHERE}: 1 of the 3 shards .* missing from {copy}: {shards(copy)[1]};"):
        check_source(str(copy), "qwen3_5", WHERE)


@pytest.mark.parametrize("keep", [0.5, 0.999])
def test_a_truncated_shard_is_caught_from_its_header(copy, keep):
    shard = copy / shards(copy)[0]
    raw = shard.read_bytes()
    shard.write_bytes(raw[: int(len(raw) * keep)])
    with pytest.raises(SourceError, match=rf"{shard} is \d+ bytes but its header describes {len(raw)}: truncated"):
        check_source(str(copy), "qwen3_5", WHERE)


def test_a_shard_that_is_not_safetensors(copy):
    (copy / shards(copy)[2]).write_bytes(b"<html>rate limited</html>")
    with pytest.raises(SourceError, match="is not a safetensors file"):
        check_source(str(copy), "qwen3_5", WHERE)


def test_a_shard_from_another_checkpoint_is_caught_by_its_tensor_names(copy, tmp_path):
    other = tmp_path / "granite"
    build_realshape(REAL_CONFIGS / "ibm-granite__granite-4.0-h-tiny.config.json", other, dtype="float32")
    shutil.copy(other / shards(other)[0], copy / shards(copy)[0])
    with pytest.raises(SourceError, match="lacks .* tensors the index assigns to it"):
        check_source(str(copy), "qwen3_5", WHERE)


def test_broken_or_absent_config_and_tokenizer(copy):
    (copy / "tokenizer.json").unlink()
    (copy / "tokenizer_config.json").unlink()
    with pytest.raises(SourceError, match="has no tokenizer"):
        check_source(str(copy), "qwen3_5", WHERE)
    (copy / "config.json").write_text('{"model_type": "qwen3_5",')
    with pytest.raises(SourceError, match=r"config.json is not valid JSON \(Expecting"):
        check_source(str(copy), "qwen3_5", WHERE)
    (copy / "config.json").unlink()
    with pytest.raises(SourceError, match="has no config.json, so it is not a transformers checkpoint"):
        check_source(str(copy), "qwen3_5", WHERE)


def test_the_registry_family_must_be_the_checkpoints(copy):
    with pytest.raises(UnsupportedModel, match="registry says family 'falcon_h1'.*set family: qwen3_5$"):
        check_source(str(copy), "falcon_h1", WHERE)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "model_type": "llama"}))
    with pytest.raises(UnsupportedModel, match=rf"^{WHERE} \(.*\): model_type 'llama' is not a hybrid family"):
        check_source(str(copy), None, WHERE)


def test_a_bin_only_checkpoint_gets_the_command_that_converts_it_and_the_command_works(copy, capsys):
    weights = {}
    for shard in shards(copy):
        weights |= load_file(copy / shard)
        (copy / shard).unlink()
    (copy / "model.safetensors.index.json").unlink()
    torch.save(weights, copy / "pytorch_model.bin")
    with pytest.raises(
        SourceError, match=rf"only pytorch_model\*\.bin .*: python -m hybridlens.models.source --convert {copy}$"
    ):
        check_source(str(copy), "qwen3_5", WHERE)
    main([str(copy), "--convert"])
    assert capsys.readouterr().out.strip() == f"{copy}: ok"
    converted = load_model(copy).model.state_dict()
    for name, tensor in load_model(copy.parent / "ckpt").model.state_dict().items():
        assert torch.equal(converted[name], tensor)
    convert_bin(copy)  # again: idempotent
    assert check_source(str(copy), "qwen3_5", WHERE) == []


@pytest.mark.parametrize(
    "source, message",
    [
        ("/no/such/dir", "'/no/such/dir' is neither a local directory nor a hub id of the form org/name"),
        ("./ckpt2", "is neither a local directory nor a hub id"),
        ("tests/not-here", "'tests/not-here' is neither a local directory nor a hub id"),  # tests/ exists: a path
        ("a/b/c", "is neither a local directory nor a hub id"),
        ("Qwen--Qwen3.5", "is neither a local directory nor a hub id"),
        ("pyproject.toml", "pyproject.toml is a file; give the directory"),
    ],
)
def test_a_path_that_is_not_a_checkpoint_directory_is_never_taken_for_a_hub_id(source, message):
    with pytest.raises(SourceError, match=rf"^{WHERE}: .*{message}"):
        check_source(source, "qwen3_5", WHERE)


def test_a_hub_id_offline_is_a_note_not_an_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert check_source("Qwen/Qwen3.5-0.8B", "qwen3_5", WHERE) == [
        f"{WHERE}: Qwen/Qwen3.5-0.8B is not a local directory; taken for a hub id, not checked (HF_HUB_OFFLINE is set)"
    ]
