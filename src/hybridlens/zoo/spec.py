"""The toy spec: what a toy model is and how it trains, and the checks that refuse a spec that cannot train.

ToySpec               one frozen dataclass, the only source of the toy defaults (a test holds it to the schema)
check_toy             refuse, in one line, a toy spec whose keys cannot train as asked (chain, pretrain, from)
check_from            refuse a `from` toy whose parent is no toy of the registry or has another architecture
check_trained_format  refuse an analysis that asks a toy in a format it was not trained on
"""

import dataclasses
import json
from typing import Any

from hybridlens.errors import UserError

QUESTIONS = ("distinct", "repeat", "recite")


@dataclasses.dataclass(frozen=True)
class ToySpec:
    """A toy's registry entry (`source: {toy: ...}`) with the run's `zoo` settings filled in where it is silent.

    The architecture keys draw the weights; the curriculum keys say how train_toy trains them; `parent`
    (the registry's `from`), `redraw`, `pretrain` and `chain` are the two-phase recipes (train_and_save).
    """

    hidden_size: int
    layout: str
    heads: int = 4
    seed: int = 0
    state_size: int | None = None
    positions: str = "rope"
    keys: int | None = None
    embedding: Any = None
    # data and curriculum: each falls back to the zoo section's key of the same name
    n_languages: int = 2
    data_seed: int | None = None
    formats: tuple[str, ...] = ("chat", "list")
    steps: int = 6000
    batch_size: int = 64
    lr: float = 0.0015
    extra_queries: int = 2
    questions: str = "recite"
    stages: tuple[int, ...] = (2, 4, 8)
    advance: float = 0.9
    done: float = 0.97
    anneal: int = 600
    target: float | None = 0.99
    validate_every: int = 100
    group_drop: float = 0.0
    group_gate: str = "whole"
    gate: float = 0.95
    # two-phase recipes
    parent: str | None = None
    redraw: tuple[int, ...] = ()
    pretrain: Any = None
    chain: Any = None

    @classmethod
    def of(cls, toy: dict, zoo: dict | None = None) -> "ToySpec":
        """The spec of registry entry `toy`, its unset keys taken from the zoo section `zoo`, then the defaults."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in (zoo or {}).items() if k in names}
        values |= {("parent" if k == "from" else k): v for k, v in toy.items()}
        unknown = values.keys() - names
        if unknown:
            raise UserError(f"toy spec: unknown keys {', '.join(sorted(unknown))}; see config/schema.yaml's toy")
        for key in ("formats", "stages", "redraw"):
            if key in values:
                values[key] = tuple(values[key])
        if values.get("chain"):
            values["chain"] = CHAIN_DEFAULTS | values["chain"]
        return cls(**values)

    @property
    def batch_seed(self) -> int:
        """The training batches' seed (data_seed, else seed): crossed with the weights' seed, it tells which one a
        result follows."""
        return self.seed if self.data_seed is None else self.data_seed

    def architecture(self) -> dict:
        """The keys a `from` toy must share with its parent: what shapes the weights."""
        return {k: getattr(self, k) for k in ARCHITECTURE}


CHAIN_DEFAULTS = {"link_questions": 2}

# What a toy starts from must have the same shape; its seed draws only what is new.
ARCHITECTURE = ("hidden_size", "layout", "heads", "state_size", "positions", "keys", "embedding")


def check_toy(toy: dict, where: str):
    """Raise UserError when a toy spec's keys cannot train as asked: a `chain`'s first phase answers with a
    hop prompt's link, and its second needs layers above the frozen ones; `group_gate` judges the groups
    that group dropout keeps, so it needs `group_drop`."""
    if "group_gate" in toy and not toy.get("group_drop"):
        raise UserError(f"{where}.group_gate: it judges the groups that group dropout keeps; set group_drop")
    phases = [k for k in ("chain", "pretrain", "from") if k in toy]
    if len(phases) > 1:
        raise UserError(f"{where}: {' and '.join(phases)} are ways of training in two phases; keep one of them")
    if "redraw" in toy and "from" not in toy:
        raise UserError(f"{where}.redraw: layers are drawn afresh in weights trained before; set from")
    if any(i >= len(toy["layout"]) for i in toy.get("redraw", ())):
        n = len(toy["layout"])
        raise UserError(f"{where}.redraw: {toy['redraw']} names a layer the {n}-layer layout lacks; use 0 to {n - 1}")
    chain = toy.get("chain")
    if chain is None:
        return
    if set(toy.get("formats", ())) != {"hop"}:
        raise UserError(f"{where}.chain: a chain toy trains on hop prompts alone; set formats: [hop]")
    if not chain["freeze_below"] < len(toy["layout"]):
        raise UserError(
            f"{where}.chain.freeze_below: {chain['freeze_below']} freezes all {len(toy['layout'])} layers; "
            "freeze the layers up to the first lookup's reader, fewer than the layout has"
        )


def check_from(name: str, models: dict):
    """Raise UserError when toy `name`'s `from` names no toy of the registry `models`, leads back to itself, or
    names one of another family or architecture: the toy continues training the parent's weights."""
    chain = [name]
    while "from" in _toy(models[chain[-1]]):
        child, parent = chain[-1], _toy(models[chain[-1]])["from"]
        where = f"config models.{child}.source.toy.from"
        if parent not in models or not _toy(models[parent]):
            toys = ", ".join(sorted(m for m in models if _toy(models[m]) and m != child))
            fix = f"name one of its toys ({toys})" if toys else "add the toy it starts from to models"
            raise UserError(f"{where}: {parent} is not a toy of the registry; {fix}")
        if parent in chain:
            raise UserError(f"{where}: {' -> '.join([*chain, parent])} starts from itself; break the cycle")
        chain.append(parent)
    if len(chain) == 1:
        return
    parent, where = chain[1], f"config models.{name}"
    if models[parent]["family"] != models[name]["family"]:
        family = models[parent]["family"]
        raise UserError(f"{where}.family: {parent}, whose weights it starts from, is a {family} toy; set {family}")
    mine, theirs = ToySpec.of(_toy(models[name])).architecture(), ToySpec.of(_toy(models[parent])).architecture()
    for key in ARCHITECTURE:
        if mine[key] != theirs[key]:
            raise UserError(
                f"{where}.source.toy.{key}: {_shown(mine[key])} where {parent}, whose weights it starts from, has "
                f"{_shown(theirs[key])}; set it to {parent}'s"
            )


def _shown(value) -> str:
    return "unset" if value is None else json.dumps(value) if isinstance(value, dict) else str(value)


def _toy(entry: dict) -> dict | None:
    source = entry["source"]
    return source.get("toy") if isinstance(source, dict) else None


def check_trained_format(section: str, models_key: str, fmt: str, trained: dict) -> None:
    """Raise UserError when an analysis asks a toy in a format it was not trained on. A toy answers little or
    nothing of another format (granite_toy, trained on chat and list, retrieves 0.08 of rev prompts), so the
    analysis would measure a mechanism the toy does not have. trained: toy name -> its training formats."""
    for name, formats in trained.items():
        if fmt not in formats:
            raise UserError(
                f"config {section}.format: {name} was trained on {', '.join(formats)}, not {fmt}; set "
                f"{section}.format to a format it was trained on, or list in {section}.{models_key} only models "
                f"trained on {fmt}"
            )
