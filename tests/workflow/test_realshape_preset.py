"""The real-shape preset end to end: the paper preset's eight models and Nemotron-H-8B as random-weight
checkpoints with their published structure, built by the pipeline and run through every experiment in bfloat16."""

import json
import re

import pandas as pd
import pytest
import yaml
from wf import snakemake, workdir

from hybridlens.models.realshape import PUBLISHERS, publisher
from hybridlens.store import read_store

PRESET = "config/presets/realshape.yaml"


@pytest.fixture(scope="module")
def rs(tmp_path_factory):
    cwd = workdir(tmp_path_factory.mktemp("realshape"))
    res = snakemake(cwd, "--workflow-profile", "profiles/local", configfile=PRESET)
    assert res.returncode == 0, res.stderr[-3000:]
    return cwd


def _cfg(cwd):
    return yaml.safe_load((cwd / PRESET).read_text())


def test_checkpoints_are_saved_as_the_hub_stores_them(rs):
    cfg = _cfg(rs)
    for name, entry in cfg["models"].items():
        out = rs / "results/models" / name
        published = json.loads((rs / "config/real-configs" / entry["source"]["realshape"]["config"]).read_text())
        saved = json.loads((out / "config.json").read_text())
        assert saved["architectures"] == published["architectures"] and saved["model_type"] == published["model_type"]
        shards = set(json.loads((out / "model.safetensors.index.json").read_text())["weight_map"].values())
        assert len(shards) >= 2 and all((out / s).is_file() for s in shards)
        templated = PUBLISHERS[publisher(entry["source"]["realshape"]["config"])]["template"] is not None
        assert (out / "generation_config.json").is_file()
        assert (out / "chat_template.jinja").is_file() == templated  # Nemotron-H-8B-Base ships none


def test_every_experiment_ran_on_every_model_it_names(rs):
    cfg = _cfg(rs)
    lens = pd.read_csv(rs / "results/tables/logit_lens_chat2.tsv", sep="\t")
    assert list(dict.fromkeys(lens["model"])) == cfg["extract"]["models"]
    split = pd.read_csv(rs / "results/tables/split_prefill_retention.tsv", sep="\t")
    assert list(dict.fromkeys(split["model"])) == cfg["split_prefill"]["models"]
    sizes = pd.read_csv(rs / "results/scale/sizes.tsv", sep="\t")
    assert list(sizes["model"]) == cfg["scale"]["models"]  # all six Qwen3.5 shapes, 35B-A3B included
    assert sizes.set_index("model").loc["qwen3_5_35b_a3b", "groups"] == "0-1-2 4-5-6"
    for name in cfg["circuit"]["models"]:
        circuit = json.loads((rs / f"results/circuit/{name}/circuit.json").read_text())
        assert circuit["intact"]["accuracy"] < 0.2  # random weights do not retrieve; the figures say so
        if circuit["address"]["group"] is not None:  # in bfloat16 too, the identity transplant is bit-identical
            verdicts = json.loads((rs / f"results/circuit/{name}/validated.json").read_text())
            assert {v["name"]: v["max_abs_diff"] for v in verdicts if v["name"].startswith("identity")} == {
                "identity_query": 0,
                "identity_state": 0,
            }
    for a, b in cfg["stitch"]["pairs"]:
        stitch = pd.read_csv(rs / f"results/stitch/{a}--{b}/summary.tsv", sep="\t")
        assert set(stitch["receiver"]) == {a, b}
    adapt = pd.read_csv(rs / "results/tables/hla_adapt.tsv", sep="\t")
    phases = {"before", "gdn_finetuned", "fixed_finetuned", "converted", "after"}
    assert {m.split(":")[1] for m in adapt["mode"]} == phases
    assert {m.split(":")[0] for m in adapt["mode"]} >= set(cfg["hla"]["adapt_models"])
    # RULER on each adapted model's own tokenizer, in every phase, scored in [0, 1].
    ruler = pd.read_csv(rs / "results/tables/hla_ruler.tsv", sep="\t")
    spec = cfg["hla"]["adapt"]["ruler"]
    for model in cfg["hla"]["adapt_models"]:
        rows = ruler[ruler["model"] == model]
        assert set(rows["phase"]) == phases and set(rows["length"]) == set(spec["lengths"])
        assert set(rows["task"]) == {"macro", *spec["tasks"]} and rows["score"].between(0, 1).all()
    assert "on RULER" in (rs / "results/summary.md").read_text()


def test_a_real_tokenizer_checkpoint_reads_the_papers_prompts_in_every_experiment_it_names(rs):
    """Qwen's real BPE, trained on none of the task words: the words kept are the ones it holds whole where
    they stand, and the experiments run on them in full batches."""
    cfg, name = _cfg(rs), "qwen3_5_0_8b_qwen_bpe"
    assert name in cfg["extract"]["models"] and name in cfg["circuit"]["models"]
    assert len(json.loads((rs / f"results/models/{name}/tokenizer.json").read_text())["model"]["vocab"]) == 151643
    task = json.loads((rs / f"results/circuit/{name}/circuit.json").read_text())["task"]
    assert task["framing"] == "paper" and task["languages"] == 1
    assert 2 <= task["values"] < 64 and 2 <= task["keys"] < 62  # a real BPE splits some of the words
    _, attrs = read_store(rs / f"results/activations/{name}/chat2.h5")
    assert json.loads(attrs["task_counts"]) == {k: task[k] for k in ("keys", "values", "languages")}
    # Split-prefill reads it the real-text way: contexts in real languages, personas as system prompts, the
    # state-swap run on contexts whose token lengths differ from their partners'.
    assert name in cfg["split_prefill"]["models"]
    rows = pd.read_csv(rs / f"results/split_prefill/{name}/items.tsv", sep="\t", keep_default_na=False)
    assert set(rows["language_of_a"]) <= {"en", "fr", "de", "es", "ru"}
    assert set(rows["persona_of_a"]) <= {"pirate", "cowboy", "robot", "knight"}
    assert set(rows["condition"]) >= {"full", "state_swap", "no_persona"} and len(rows) == 2 * 8


def test_stores_keep_float32_and_record_the_bfloat16_source(rs):
    data, attrs = read_store(rs / "results/activations/qwen3_5_35b_a3b/chat2.h5")
    assert attrs["source_dtype"] == "bfloat16"
    assert {a.dtype.name for k, a in data.items() if k.startswith("layers.")} == {"float32"}


@pytest.mark.parametrize(
    "source, message",
    [
        (
            "checkpoint",
            r"registry says family 'granitemoehybrid', but the checkpoint's model_type 'qwen3_5' is family "
            r"'qwen3_5'; set family: qwen3_5",
        ),
        ({"realshape": {"config": "Qwen__Qwen3.5-0.8B.config.json"}}, r"registry says family 'granitemoehybrid'"),
        ({"realshape": {"config": "Qwen__Qwen3.5-1B.config.json"}}, r"Qwen3.5-1B.config.json does not exist"),
    ],
)
def test_a_registry_family_is_checked_against_the_checkpoint_before_any_job(tmp_path, source, message):
    cwd = workdir(tmp_path / "wf")
    if source == "checkpoint":  # a local checkpoint directory: its config.json is read when the workflow parses
        source = str(tmp_path / "ckpt")
        (tmp_path / "ckpt").mkdir()
        (tmp_path / "ckpt/config.json").write_text(json.dumps({"model_type": "qwen3_5"}))
    cfg = yaml.safe_load((cwd / "tests/config/config.yaml").read_text())
    cfg["models"]["mislabelled"] = {"family": "granitemoehybrid", "source": source}
    (cwd / "tests/config/config.yaml").write_text(yaml.safe_dump(cfg))
    res = snakemake(cwd, "-n")
    assert res.returncode != 0
    assert re.search(r"config models\.mislabelled.*" + message, res.stdout + res.stderr)
    assert not (cwd / "results/models").exists()
