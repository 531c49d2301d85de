"""The run plan the workflow asks: the registry by kind, each experiment's models, and the refusals, from a
config alone (no snakemake)."""

import copy
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from hybridlens.errors import UserError
from hybridlens.plan import plan_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def config(monkeypatch):
    monkeypatch.chdir(ROOT)  # the default config names zoo/ relative to the repository
    config = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    validate(config, str(ROOT / "config/schema.yaml"))  # the schema's defaults, as the workflow fills them
    return config


def test_the_default_plan_names_every_experiments_models_and_the_shipped_toys(config):
    plan = plan_run(copy.deepcopy(config))
    assert plan.toys == plan.realshape == [] and set(plan.shipped) == set(config["models"])
    assert plan.runs_on["circuit"] == config["circuit"]["models"]
    assert plan.runs_on["scale"] == config["scale"]["models"] and plan.runs_on["hla_adapt"] == ["qwen_toy"]
    assert plan.pair_names() == ["--".join(p) for p in config["stitch"]["pairs"]]
    assert plan.extract_tasks == list(config["tasks"]) and plan.tasks["chat8"]["kind"] == "dictionary"
    assert plan.split_task["kind"] == "style" and plan.split_user_task is None and plan.notes == []


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("circuit", "models", ["nope"], r"^config circuit\.models: unknown names \['nope'\]; choose from"),
        ("scale", "models", ["nope"], r"^config scale\.models: unknown names \['nope'\]"),
        ("stitch", "pairs", [["qwen_toy", "qwen_toy"]], r"^config stitch\.pairs: \['qwen_toy', 'qwen_toy'\] must be"),
        ("hla", "adapt_models", ["granite_toy"], r"^config hla\.adapt_models: 'granite_toy' is not a registry model"),
        ("circuit", "tasks", ["nope"], r"^config circuit\.tasks: 'nope' is not under tasks"),
        ("split_prefill", "task", "nope", r"^config split_prefill\.task: 'nope' is not under tasks"),
    ],
)
def test_a_config_the_run_cannot_do_is_refused_in_one_line_by_the_plan(config, section, key, value, message):
    config[section][key] = value
    with pytest.raises(UserError, match=message):
        plan_run(config)


def test_the_plan_does_not_change_the_config_it_is_given(config):
    before = copy.deepcopy(config)
    plan_run(config)
    assert config == before
