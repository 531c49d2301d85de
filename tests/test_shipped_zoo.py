"""The shipped zoo still works with this code: every toy loads, matches its manifest and clears its gate,
and every from-scratch HLA model is the one the default config asks for."""

import json
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from hybridlens.config import HLA_TRAINING_KEYS
from hybridlens.experiments.long_context import evaluate, load_shipped
from hybridlens.experiments.zoo import evaluate_model
from hybridlens.models.adapter import load_model

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "config/config.yaml").read_text())
validate(CONFIG, str(ROOT / "config/schema.yaml"))  # fills in the schema's defaults, as the workflow does
TOYS = [name for name, m in CONFIG["models"].items() if str(m["source"]).startswith("zoo/")]
HLA = [f"{m}_s{s}" for m in CONFIG["hla"]["modes"] for s in CONFIG["hla"]["seeds"]]


def test_the_default_config_uses_only_shipped_models():
    assert list(CONFIG["models"]) == TOYS and CONFIG["hla"]["source"] == "zoo/hla"
    for directory in [ROOT / CONFIG["models"][t]["source"] for t in TOYS] + [ROOT / "zoo/hla" / r for r in HLA]:
        assert (directory / "manifest.json").is_file(), directory


def test_make_zoo_trains_the_hla_models_the_default_config_loads():
    zoo = yaml.safe_load((ROOT / "config/presets/zoo.yaml").read_text())
    validate(zoo, str(ROOT / "config/schema.yaml"))
    keys = ["modes", "seeds", *HLA_TRAINING_KEYS]
    assert {k: zoo["hla"][k] for k in keys} == {k: CONFIG["hla"][k] for k in keys}


@pytest.mark.parametrize("name", TOYS)
def test_a_shipped_toy_loads_and_still_clears_its_gate_on_held_out_prompts(name):
    directory = ROOT / CONFIG["models"][name]["source"]
    hm = load_model(directory, family=CONFIG["models"][name]["family"])  # checks the manifest first
    shipped = json.loads((directory / "eval.json").read_text())
    n_pairs = shipped["rows"][0]["n_pairs"]
    chat = evaluate_model(hm, seed=9001, n=32, n_pairs=n_pairs, n_languages=2, formats=("chat",))[0]
    assert chat["retrieval"] >= shipped["gate"], (name, chat)


@pytest.mark.parametrize("run", HLA)
def test_a_shipped_hla_model_is_the_default_configs_and_evaluates(run):
    mode, seed = run.rsplit("_s", 1)
    hla = CONFIG["hla"]
    spec = {"mode": mode, "seed": int(seed)} | {k: hla[k] for k in HLA_TRAINING_KEYS}
    model, sym = load_shipped(ROOT / "zoo/hla" / run, spec)  # refuses another spec or a changed file
    rows = evaluate(model, sym, [hla["train_length"]], n=4, seed=1000 + int(seed), tasks=("mqar",))
    assert rows[0]["answers"] > 0 and 0 <= rows[0]["correct"] <= rows[0]["answers"]
