"""The model families hybridlens knows: one module each in this package, one line each in REGISTRY.

Family          what the adapter core asks of a family (families/base.py)
FAMILIES        name -> Family, in REGISTRY order
family_of       a checkpoint's model_type -> its Family (UnsupportedModel for any other)
check_family    the same, refusing a registry `family` that names another one
family_table    the README's table of supported families, in markdown
UnsupportedModel

    python -m hybridlens.models.families [--write README.md]   print the table, or rewrite it in place

Nothing here imports torch: the workflow reads the registry when it parses. Adding a family is a module
with a FAMILY, its name in REGISTRY and a row in the property suite (docs/adding-a-family.md).
"""

import importlib

from hybridlens.errors import UserError
from hybridlens.models.families.base import LETTERS, Family

REGISTRY = (
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_next",
    "olmo_hybrid",
    "kimi_linear",
    "granitemoehybrid",
    "bamba",
    "nemotron_h",
    "zamba2",
    "falcon_h1",
    "jamba",
    "lfm2",
)
FAMILIES: dict[str, Family] = {name: importlib.import_module(f"{__name__}.{name}").FAMILY for name in REGISTRY}
__all__ = ["FAMILIES", "LETTERS", "Family", "UnsupportedModel", "check_family", "family_of", "family_table"]
EXPERIMENTS = "extraction, circuit, scale, split-prefill, stitching"

_CLASS_OF = {t: fam for fam in FAMILIES.values() for t in fam.model_types}


class UnsupportedModel(UserError, ValueError):
    """A model hybridlens cannot analyse (unknown family, or no linear layers)."""


def family_of(model_type: str, source="") -> Family:
    if model_type in _CLASS_OF:
        return _CLASS_OF[model_type]
    raise UnsupportedModel(
        f"{f'{source}: ' if source else ''}model_type {model_type!r} is not a hybrid family hybridlens knows "
        f"({', '.join(_CLASS_OF)}); add a module to hybridlens/models/families/ (docs/adding-a-family.md)"
    )


def check_family(model_type: str, family: str | None, source="") -> Family:
    """The family of a checkpoint's model_type; refuses a registry `family` that names another one."""
    fam = family_of(model_type, source)
    if family is not None and family != fam.name:
        raise UnsupportedModel(
            f"{source}: the registry says family {family!r}, but the checkpoint's model_type {model_type!r} is "
            f"family {fam.name!r}; set family: {fam.name}"
        )
    return fam


def family_table() -> str:
    """One row per registered family: its model types, linear mixer, layer kinds and the experiments that apply."""
    rows = ["| family | model types | linear mixer | layer kinds | experiments |", "|---|---|---|---|---|"]
    for fam in FAMILIES.values():
        kinds = ", ".join(LETTERS[c] for c in fam.letters)
        experiments = EXPERIMENTS + (", HLA" if fam.hla else "")
        types = ", ".join(f"`{t}`" for t in fam.model_types)
        rows.append(f"| `{fam.name}` | {types} | {fam.mixer} | {kinds} | {experiments} |")
    return "\n".join(rows) + "\n"
