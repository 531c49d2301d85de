import copy
from pathlib import Path

import pytest
import yaml

from hybridlens.config import ConfigError, check_config, resolve_recipes

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "config" / "schema.yaml"


SHIPPED = [
    "config/config.yaml",
    "zoo/zoo.yaml",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "config/presets").glob("*.yaml")),
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "studies").glob("*/config.yaml")),
    "tests/config/config.yaml",
]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_are_valid(name):
    check_config(resolve_recipes(yaml.safe_load((ROOT / name).read_text()), ROOT), SCHEMA)


def test_config_presets_are_the_runs_users_make_and_every_study_has_its_parts():
    assert sorted(p.stem for p in (ROOT / "config/presets").glob("*.yaml")) == ["paper", "realshape"]
    studies = sorted(p.parent.name for p in (ROOT / "studies").glob("*/config.yaml"))
    assert len(studies) == 8
    index = (ROOT / "studies/README.md").read_text()
    for study in studies:
        config = yaml.safe_load((ROOT / "studies" / study / "config.yaml").read_text())
        assert config["study"] == study
        assert (ROOT / "studies" / study / "README.md").is_file() and (ROOT / "studies" / study / "claims.md").is_file()
        assert f"]({study}/README.md)" in index, f"studies/README.md does not list {study}"


def test_a_recipe_entry_is_the_named_studys_model_with_its_own_keys_laid_over(tmp_path):
    notes = yaml.safe_load((ROOT / "studies/retrieval-past-notes/config.yaml").read_text())["models"]["qwen_notes"]
    config = {"models": {"qwen_notes": {"recipe": "retrieval-past-notes", "resources": {"runtime": 5}}}}
    assert resolve_recipes(config, ROOT)["models"]["qwen_notes"] == notes | {"resources": {"runtime": 5}}
    assert "recipe" in config["models"]["qwen_notes"]  # the caller's config is left as it was


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"qwen_notes": {"recipe": "notes"}}, r"^config models\.qwen_notes\.recipe: no study notes \(.*studies/notes/"),
        ({"qwen_toy": {"recipe": "retrieval-past-notes"}}, r"models\.qwen_toy\.recipe: .* has no model qwen_toy"),
    ],
)
def test_a_recipe_that_names_no_study_or_model_is_refused_in_one_line(entry, message):
    with pytest.raises(ConfigError, match=message):
        resolve_recipes({"models": entry}, ROOT)


def test_a_recipe_cycle_is_refused(tmp_path):
    for name, other in (("a", "b"), ("b", "a")):
        (tmp_path / "studies" / name).mkdir(parents=True)
        (tmp_path / "studies" / name / "config.yaml").write_text(f"models:\n  m: {{recipe: {other}}}\n")
    with pytest.raises(ConfigError, match=r"config models\.m\.recipe: a -> b -> a leads back to itself"):
        resolve_recipes({"models": {"m": {"recipe": "a"}}}, tmp_path)


@pytest.mark.parametrize(
    "path, value, message",
    [
        (["models", "qwen_toy", "dtype"], "float8", r"config models\.qwen_toy\.dtype: 'float8' is not one of"),
        (["zoo", "stages"], [1], r"config zoo\.stages\.0: 1 is less than the minimum of 2"),
        (["extract", "sites"], ["state"], r"config extract\.sites\.0: 'state' is not one of"),
        (["tasks", "chat8", "format"], "poem", r"config tasks\.chat8\.format: 'poem' is not one of"),
        (["hla", "bucket"], 5, r"config hla\.bucket: 5 does not divide hla\.chunk \(16\): a chunk is a whole"),
        (
            ["models", "granite_toy", "source", "toy", "questions"],
            "random",
            r"config models\.granite_toy\.source\.toy\.questions: 'random' is not one of",
        ),
    ],
)
def test_bad_values_name_their_key(path, value, message):
    name = "zoo/zoo.yaml" if "source" in path else "config/config.yaml"  # the toys' specs are there
    config = copy.deepcopy(yaml.safe_load((ROOT / name).read_text()))
    node = config
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    with pytest.raises(ConfigError, match=message + r".*config/schema\.yaml"):
        check_config(config, SCHEMA)


def test_zoo_defaults_are_the_shipped_config():
    # The zoo section only concerns toys: a config that leaves one of its keys out must get the value the
    # zoo preset trains with (tuned and measured), not an older one. Other sections' defaults suit real models.
    zoo = yaml.safe_load(SCHEMA.read_text())["properties"]["zoo"]["properties"]
    shipped = yaml.safe_load((ROOT / "zoo/zoo.yaml").read_text())["zoo"]
    assert set(shipped) == set(zoo)
    differ = [
        f"zoo.{k}: schema {p['default']!r}, config.yaml {shipped[k]!r}"
        for k, p in zoo.items()
        if p["default"] != shipped[k]
    ]
    assert not differ, "\n".join(differ)


def test_schema_lists_every_family_the_adapter_knows():
    from hybridlens.config import load_schema
    from hybridlens.models.families import REGISTRY

    family = load_schema(SCHEMA)["definitions"]["model"]["properties"]["family"]
    assert family["enum"] == list(REGISTRY) and "nemotron_h" in family["enum"]


def test_real_configs_are_the_shared_copies():
    """config/real-configs/ ships the published files so a clone builds real-shape checkpoints anywhere; it must
    stay byte-equal to the project's shared copy where that is present."""
    shared = ROOT.parent / "shared" / "real-configs"
    if not shared.is_dir():
        pytest.skip("no ../shared/real-configs beside this checkout")
    ours = ROOT / "config" / "real-configs"
    assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in shared.iterdir())
    for p in shared.iterdir():
        assert (ours / p.name).read_bytes() == p.read_bytes(), p.name
