"""The model families hybridlens knows: one module each in this package, one line each in REGISTRY.

Family          what the adapter core asks of a family (families/base.py)
FAMILIES        name -> Family, in REGISTRY order
REFUSED         model types with a recurrent or convolutional part that cannot be supported, and why
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
    "lara_mini",
    "kimi_linear",
    "bailing_hybrid",
    "granitemoehybrid",
    "bamba",
    "nemotron_h",
    "zamba2",
    "falcon_h1",
    "jamba",
    "zamba",
    "lfm2",
    "lfm2_moe",
    "lfm3",
)
FAMILIES: dict[str, Family] = {name: importlib.import_module(f"{__name__}.{name}").FAMILY for name in REGISTRY}
__all__ = ["FAMILIES", "LETTERS", "Family", "UnsupportedModel", "check_family", "family_of", "family_table"]
EXPERIMENTS = "extraction, circuit, scale, split-prefill, stitching"

_BY_MODEL_TYPE = {t: fam for fam in FAMILIES.values() for t in fam.model_types}

# Model types transformers ships that mix a recurrent or convolutional part with attention, but that the
# adapter's interface cannot reach, and what is missing.
_INSIDE_ATTENTION = "its short convolutions sit inside softmax attention, so no layer has a linear mixer of its own"
REFUSED = {
    "recurrent_gemma": "its RG-LRU and conv states live on the modules, not in transformers' cache",
    "minimax": "its lightning-attention state lives in a cache class of its own (MiniMaxCache.linear_cache)",
    "glm5_next": "transformers has no causal-LM class for it (only Glm5NextForConditionalGeneration)",
    "qwen4_exp": "its residual stream is several streams side by side (hyper-connections), not one d_model wide, "
    "and its layers keep memory beside the state and conv sites (n-gram embedding inputs, indexer keys)",
    "zaya": _INSIDE_ATTENTION,
    "inkling_text": _INSIDE_ATTENTION,
    "inkling_mm_model": _INSIDE_ATTENTION,
    "inkling2": _INSIDE_ATTENTION,
    "inkling2_text": _INSIDE_ATTENTION,
    "inkling2_loop": _INSIDE_ATTENTION + ", and its looped layers run several times per forward",
}
for _text_type in ("glm5_next", "qwen4_exp", "inkling2_loop"):  # the text model of a refused wrapper
    REFUSED[f"{_text_type}_text"] = REFUSED[_text_type]
# Vision-language wrappers of a supported family that transformers has no causal-LM class for.
for _wrapper, _text in (("lfm2_vl", "lfm2"), ("lfm3_vl", "lfm3"), ("nemotron_h_omni", "nemotron_h")):
    REFUSED[_wrapper] = f"transformers has no causal-LM class for this wrapper; use a text-only {_text} checkpoint"


class UnsupportedModel(UserError, ValueError):
    """A model hybridlens cannot analyse (unknown family, or no linear layers)."""


def family_of(model_type: str, source="") -> Family:
    if model_type in _BY_MODEL_TYPE:
        return _BY_MODEL_TYPE[model_type]
    if model_type in REFUSED:
        where = f"{source}: " if source else ""
        raise UnsupportedModel(f"{where}hybridlens cannot analyse model_type {model_type!r}: {REFUSED[model_type]}")
    raise UnsupportedModel(
        f"{f'{source}: ' if source else ''}model_type {model_type!r} is not a hybrid family hybridlens knows "
        f"({', '.join(_BY_MODEL_TYPE)}); add a module to hybridlens/models/families/ (docs/adding-a-family.md)"
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
