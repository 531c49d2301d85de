"""Config checking with one clear line per problem.

check_config   validate a config dict against the JSON schema; raise ConfigError naming the key
ConfigError
"""

from pathlib import Path

import jsonschema
import yaml

from hybridlens.errors import UserError


class ConfigError(UserError, ValueError):
    """A config value the schema refuses."""


def check_config(config: dict, schema_path) -> None:
    """Raise ConfigError("config models.x.family: 'y' is not one of [...]; ...") for the most relevant error."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        key = ".".join(map(str, error.absolute_path)) or "(top level)"
        where = f"{Path(schema_path).parent.name}/{Path(schema_path).name}"
        raise ConfigError(f"config {key}: {error.message}; allowed values and defaults are in {where}")
