import copy
from pathlib import Path

import pytest
import yaml

from hybridlens.config import ConfigError, check_config

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "config" / "schema.yaml"


SHIPPED = [
    "config/config.yaml",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "config/presets").glob("*.yaml")),
    "tests/config/config.yaml",
]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_configs_are_valid(name):
    check_config(yaml.safe_load((ROOT / name).read_text()), SCHEMA)


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
    name = "config/presets/zoo.yaml" if "source" in path else "config/config.yaml"  # the toys' specs are there
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
    shipped = yaml.safe_load((ROOT / "config/presets/zoo.yaml").read_text())["zoo"]
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
