"""The shipped zoo still works with this code: every toy loads, matches its manifest and clears its gate,
and every from-scratch HLA model is the one the default config asks for."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from hybridlens.config import HLA_TRAINING_KEYS
from hybridlens.experiments.long_context import evaluate, load_shipped
from hybridlens.models.adapter import load_model
from hybridlens.validation import path_ulps
from hybridlens.zoo import evaluate_model

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "config/config.yaml").read_text())
validate(CONFIG, str(ROOT / "config/schema.yaml"))  # fills in the schema's defaults, as the workflow does
TOYS = [name for name, m in CONFIG["models"].items() if str(m["source"]).startswith("zoo/")]
HLA = [f"{m}_s{s}" for m in CONFIG["hla"]["modes"] for s in CONFIG["hla"]["seeds"]]


def test_the_default_config_uses_only_shipped_models():
    assert list(CONFIG["models"]) == TOYS and CONFIG["hla"]["source"] == "zoo/hla"
    for directory in [ROOT / CONFIG["models"][t]["source"] for t in TOYS] + [ROOT / "zoo/hla" / r for r in HLA]:
        assert (directory / "manifest.json").is_file(), directory


def test_make_zoo_trains_the_hla_models_the_default_config_loads():
    zoo = yaml.safe_load((ROOT / "zoo/zoo.yaml").read_text())
    validate(zoo, str(ROOT / "config/schema.yaml"))
    keys = ["modes", "seeds", *HLA_TRAINING_KEYS]
    assert {k: zoo["hla"][k] for k in keys} == {k: CONFIG["hla"][k] for k in keys}


@pytest.mark.parametrize("name", TOYS)
def test_a_shipped_toy_loads_and_still_clears_its_gate_on_held_out_prompts(name):
    directory = ROOT / CONFIG["models"][name]["source"]
    hm = load_model(directory, family=CONFIG["models"][name]["family"])  # checks the manifest first
    shipped = json.loads((directory / "eval.json").read_text())
    n_pairs = shipped["rows"][0]["n_pairs"]
    chat = evaluate_model(hm, seed=9001, n=32, n_pairs=n_pairs, formats=("chat",))[0]
    assert chat["retrieval"] >= shipped["gate"], (name, chat)


@pytest.mark.parametrize("run", HLA)
def test_a_shipped_hla_model_is_the_default_configs_and_evaluates(run):
    mode, seed = run.rsplit("_s", 1)
    hla = CONFIG["hla"]
    spec = {"mode": mode, "seed": int(seed)} | {k: hla[k] for k in HLA_TRAINING_KEYS}
    model, sym = load_shipped(ROOT / "zoo/hla" / run, spec)  # refuses another spec or a changed file
    rows = evaluate(model, sym, [hla["train_length"]], n=4, seed=1000 + int(seed), tasks=("mqar",))
    assert rows[0]["answers"] > 0 and 0 <= rows[0]["correct"] <= rows[0]["answers"]


IDENTITY = """
import json, sys, torch
from hybridlens.experiments.circuit import localize_reference, transplant_all
from hybridlens.models.adapter import load_model
from hybridlens.tasks import triples
from hybridlens.validation import path_ulps
checks = {"capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}
for name, directory, family in json.loads(sys.argv[1]):
    hm = load_model(directory, family=family)
    settings = {"n_pairs": 8, "format": "chat", "localize_seed": 0, "localize_n": 16, "reader": "any"}
    circuit = localize_reference(hm, settings)[0]
    found = {}
    if circuit["address"]["group"] is not None:
        transplant_all(hm, triples(hm, 1, 12, 8, "chat"), circuit, batch_size=12, checks=found)
    checks[name] = {k: (c.max_abs_diff, c.ulps, c.n) for k, c in found.items()}
print(json.dumps(checks))
"""


def test_identity_transplants_of_every_shipped_toy_are_exact_on_torchs_portable_kernels():
    """On the portable CPU kernels and one thread, a float path unlike the machine's vector units, each shipped
    toy's identity transplants are bit-identical and its shortcut within half of float32's digits."""
    toys = [(name, str(ROOT / CONFIG["models"][name]["source"]), CONFIG["models"][name]["family"]) for name in TOYS]
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1", "MKL_CBWR": "COMPATIBLE"}
    res = subprocess.run(
        [sys.executable, "-c", IDENTITY, json.dumps(toys)], env=env, capture_output=True, text=True, timeout=900
    )
    assert res.returncode == 0, res.stderr[-3000:]
    found = json.loads(res.stdout)
    assert (found.pop("capability"), found.pop("threads")) == ("DEFAULT", 1)
    assert found.keys() == set(TOYS)
    for name, checks in found.items():
        assert checks["identity_query"][0] == 0 and checks["identity_state"][0] == 0, (name, checks)
        assert checks["identity_query"][2] > 0 and checks["shortcut_path"][1] <= path_ulps("float32"), (name, checks)
