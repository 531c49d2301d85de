"""Tasks: where items come from. One module per task, one line each in TASKS, as models/families/ holds the
families. The experiments see items (tasks.items) and token positions; the workflow asks this registry for a
configured task's settings (at parse time, without torch) and its items.

TASKS     kind -> the module that makes its items: DEFAULTS (its config keys; None = required),
          check(settings, where) and items(hm, settings) -> (items, counts); the model says how many
          toy languages it has (HybridModel.n_languages)
          (a task that one experiment owns, like split-prefill's style, names its config SECTION)
kind_of   a config task's kind: `kind`, else jsonl where it names a `file`, else dictionary
settings  a config task with its kind's defaults, checked; a key of another kind is refused in one line
items_of  (items, counts) of a config task for one model
triples_of  the circuit's (donor, host, other) triples of a task that makes them (dictionary)
triples   the dictionary task's triples from its settings (seed, n, n_pairs, format)
require_partner  refuse a task whose items do not all carry the partner an experiment needs
check_user_items  refuse a user's JSONL task whose items an experiment cannot run (their entries, or what
          the task they replace checks of its items)
style_keys  the split_prefill section's keys that make its style task
"""

import importlib

TASKS = {
    "dictionary": "hybridlens.tasks.dictionary",  # the paper's key=value retrieval, generated from a seed
    "jsonl": "hybridlens.tasks.jsonl",  # a user's own prompts, one item per line of a file
    "style": "hybridlens.tasks.style",  # split-prefill's: content and style (language, persona) in one context
}


def kind_of(spec: dict) -> str:
    kind = spec.get("kind") or ("jsonl" if "file" in spec else "dictionary")
    if kind not in TASKS:
        raise ValueError(f"unknown task kind {kind!r}; use one of {sorted(TASKS)}")
    return kind


def module(kind: str):
    return importlib.import_module(TASKS[kind])


def settings(name: str, spec: dict, where: str = "") -> dict:
    """The task `name` of the config with its kind's defaults filled in, every key and value checked; messages
    name `where` (default: config tasks.<name>)."""
    kind = kind_of(spec)
    task = module(kind)
    if not where and getattr(task, "SECTION", None):
        raise ValueError(f"config tasks.{name}: a {kind} task is set in the config's {task.SECTION} section")
    where = where or f"config tasks.{name}"
    foreign = sorted(set(spec) - set(task.DEFAULTS) - {"kind"})
    if foreign:
        raise ValueError(f"{where}: key {foreign[0]!r} is not one of a {kind} task's keys {sorted(task.DEFAULTS)}")
    missing = [k for k, v in task.DEFAULTS.items() if v is None and k not in spec]
    if missing:
        raise ValueError(f"{where}: a {kind} task needs the key {missing[0]!r}")
    out = {k: v for k, v in task.DEFAULTS.items() if v is not None} | dict(spec) | {"kind": kind}
    task.check(out, where)
    return out


def require_partner(spec: dict, partner: str, who: str) -> None:
    """Refuse, in one line naming the item and the field, a task whose items do not all carry `partner`
    (parse time, no model): an experiment that pairs every item with one (`who`) cannot run on it."""
    if kind_of(spec) != "jsonl":
        raise ValueError(f"config {who}: a {kind_of(spec)} task makes its own partners; name a jsonl task here")
    for item in module("jsonl").load(spec["file"]):
        if partner not in item.partners:
            raise ValueError(f"{item.name}: field {partner!r} is missing; {who} needs it on every line")


def items_of(hm, spec: dict):
    """(items, counts) of a config task (settings()) for one model."""
    return module(kind_of(spec)).items(hm, spec)


def triples_of(hm, spec: dict):
    """The circuit's triples (tasks.items.Triple) of a config task whose kind makes them."""
    task = module(kind_of(spec))
    if not hasattr(task, "triples"):
        raise ValueError(f"a {kind_of(spec)} task makes no (donor, host, other) triples; use a dictionary task")
    return task.triples(hm, spec)


def triples(hm, seed: int, n: int, n_pairs: int, fmt: str = "chat", framing: str = "auto"):
    """The dictionary task's circuit triples from its settings: a notebook's and the workflow's shorthand."""
    spec = {"kind": "dictionary", "seed": seed, "n": n, "n_pairs": n_pairs, "format": fmt, "framing": framing}
    return triples_of(hm, settings("triples", spec))


def check_user_items(spec: dict, who: str, like: dict | None = None) -> None:
    """Refuse, at parse time, a user's JSONL task (settings()) whose items `who` cannot run: each must hold
    the entries its position sets read, or, with `like`, pass what the task it replaces checks of its items."""
    items = module("jsonl").load(spec["file"])
    if like is None:
        from hybridlens.tasks.items import require_entries

        require_entries(items, who)
    else:
        module(kind_of(like)).check_items(items, like, who)


def style_keys() -> set:
    """The split_prefill section's keys that make its style task (the seed comes from split_prefill.seeds)."""
    return set(module("style").DEFAULTS) - {"seed"}
