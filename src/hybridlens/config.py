"""Config checking with one clear line per problem.

load_schema    the JSON schema, its list of families taken from the family registry
load_config    read a YAML config file, refusing duplicate keys and naming a syntax error's file, line, column
check_config   validate a config dict against the JSON schema; raise ConfigError naming the key
check_study      refuse a study without its claims template
canonical        dicts with sorted keys, recursively: a config's params as snakemake compares them
resolve_recipes  replace each registry entry {recipe: STUDY} by that study's model of the same name
ConfigError
TOY_TRAINING_KEYS, HLA_TRAINING_KEYS
               the zoo / hla keys a trained model depends on (the workflow's params, a shipped model's spec)

`python -m hybridlens.config FILE...` checks config files before snakemake reads them: snakemake's own
loader keeps the last of two duplicate keys and reports a syntax error without its place.
"""

import sys
from pathlib import Path

import jsonschema
import yaml

from hybridlens.errors import UserError

# What training a toy or a from-scratch HLA model depends on, and nothing else: changing another key
# (a gate, an evaluation size) keeps the weights.
TOY_TRAINING_KEYS = ["n_languages", "steps", "batch_size", "lr", "extra_queries", "questions", "formats", "stages"]
TOY_TRAINING_KEYS += ["advance", "done", "anneal", "target", "validate_every"]
HLA_TRAINING_KEYS = ["symbols", "hidden", "layers", "heads", "chunk", "bucket"]
HLA_TRAINING_KEYS += ["train_length", "steps", "batch_size", "lr", "reg"]
HLA_TRAINING_KEYS += ["router", "gate_bias", "reg_warmup"]


class ConfigError(UserError, ValueError):
    """A config value the schema refuses, or a config file that does not parse."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (YAML's spec forbids it; PyYAML keeps the last)."""


def _mapping(loader, node, deep=False):
    first_line = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in first_line and key != "<<":
            raise ConfigError(
                f"{loader.name}:{line}: duplicate key {key!r}, first given at line {first_line[key]}; "
                "the second would silently replace the first: keep one"
            )
        first_line.setdefault(key, line)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_config(path) -> dict:
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the config file ({err.strerror})") from err
    loader = _StrictLoader(text)
    loader.name = str(path)
    try:
        config = loader.get_single_data()
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        detail = "; ".join(str(s) for s in (err.context, err.problem) if s)
        raise ConfigError(f"{where}: YAML syntax error: {detail}") from err
    finally:
        loader.dispose()
    if not isinstance(config, dict):
        raise ConfigError(
            f"{path}: a config file is a mapping of sections (models:, zoo:, ...), not {type(config).__name__}"
        )
    return config


STUDIES = "studies"


def canonical(value):
    """Dicts with sorted keys, recursively. Snakemake compares params by their text, so reordering keys in a
    config file must not look like a change (and rerun training)."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def resolve_recipes(config: dict, root=".") -> dict:
    """`config` with each registry entry `{recipe: STUDY, ...}` replaced by the model of the same name in
    studies/STUDY/config.yaml, the entry's other keys laid over it: a study trains another's toy as that study
    does, from the one place that says how, rather than from a copy that could drift."""
    models = dict(config.get("models") or {})
    for name, entry in models.items():
        seen = []
        while isinstance(entry, dict) and "recipe" in entry:
            study, where = entry["recipe"], f"config models.{name}.recipe"
            path = Path(root) / STUDIES / str(study) / "config.yaml"
            if not path.is_file():
                known = ", ".join(sorted(p.parent.name for p in (Path(root) / STUDIES).glob("*/config.yaml")))
                raise ConfigError(f"{where}: no study {study} ({path} is missing); name one of: {known}")
            if study in seen:
                raise ConfigError(f"{where}: {' -> '.join([*seen, study])} leads back to itself; break the cycle")
            seen.append(study)
            theirs = (load_config(path).get("models") or {}).get(name)
            if theirs is None:
                raise ConfigError(f"{where}: {path} has no model {name}; name the study that defines it")
            entry = theirs | {k: v for k, v in entry.items() if k != "recipe"}
        models[name] = entry
    return config | ({"models": models} if "models" in config else {})


def check_study(config: dict, root=".") -> None:
    """Refuse a `study` whose directory lacks the claims template its findings are written from."""
    study = config.get("study")
    if study and not (Path(root) / STUDIES / study / "claims.md").is_file():
        raise ConfigError(
            f"config study: {STUDIES}/{study}/claims.md is missing; a study is a directory of studies/ holding "
            "config.yaml and claims.md (studies/README.md)"
        )


def load_schema(schema_path) -> dict:
    """The config schema, with the model families of the registry as the allowed `family` values."""
    from hybridlens.models.families import FAMILIES

    schema = yaml.safe_load(Path(schema_path).read_text())
    schema["definitions"]["model"]["properties"]["family"]["enum"] = list(FAMILIES)
    return schema


def check_config(config: dict, schema_path) -> None:
    """Raise ConfigError("config models.x.family: 'y' is not one of [...]; ...") for the most relevant error."""
    schema = load_schema(schema_path)
    where = f"{Path(schema_path).parent.name}/{Path(schema_path).name}"
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        key = ".".join(map(str, error.absolute_path)) or "(top level)"
        raise ConfigError(f"config {key}: {error.message}; allowed values and defaults are in {where}")
    check_relations(config, where)


def check_relations(config: dict, where: str = "config/schema.yaml") -> None:
    """What the schema cannot say: keys that must agree (run again once the schema's defaults are filled)."""
    hla = config.get("hla", {})
    chunk, bucket = hla.get("chunk", 256), hla.get("bucket", 16)  # the schema's defaults
    if chunk % bucket:
        raise ConfigError(
            f"config hla.bucket: {bucket} does not divide hla.chunk ({chunk}): a chunk is a whole number of "
            f"router buckets; allowed values and defaults are in {where}"
        )


def main(argv=None) -> int:
    paths = sys.argv[1:] if argv is None else argv
    try:
        for path in paths:
            load_config(path)
    except ConfigError as err:
        print(f"hybridlens: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
