"""The run plan: what a validated config asks of the workflow, checked before any job runs.

check_paths  refuse a project, working directory or Python at a path with a space
RunPlan   the registry by kind (toys, real-shape, shipped), each experiment's models, the tasks with their
          defaults, split-prefill's and the scale sweep's items, and the lines to print before any job
plan_run  build it from a config whose schema defaults are filled, raising the one-line refusals (UserError)

The workflow (rules/common.smk) calls plan_run once and asks the plan; nothing here knows a rule or a path
under results/. Checks that read files (a checkpoint, a tokenizer, a user's prompts) run here too, so that a
notebook can plan a config the way a run does: `plan_run(config)`.
"""

import dataclasses
from pathlib import Path

from hybridlens.errors import UserError
from hybridlens.models.families import FAMILIES, check_family
from hybridlens.models.source import MANIFEST, check_source, has_chat_template, read_config
from hybridlens.zoo.spec import ToySpec, check_from, check_toy, check_trained_format


def check_paths(paths: dict) -> None:
    """Snakemake starts each job's script as "<python> <script>" without quoting either, so a space in a path
    fails every job after a clean dry run: refuse it before anything else. paths: what -> where."""
    for what, path in paths.items():
        if any(c.isspace() for c in str(path)):
            raise UserError(
                f"{what} is at {str(path)!r}, a path with a space, which snakemake's jobs do not quote; "
                "clone or move it (and its .venv) to a path without spaces"
            )


EXPERIMENTS = ("extract", "circuit", "split_prefill")  # the sections whose `models: []` means every model


@dataclasses.dataclass(frozen=True)
class RunPlan:
    toys: list
    realshape: list
    shipped: dict  # registry name -> manifest path of a local checkpoint shipped with one (zoo/)
    runs_on: dict  # experiment -> the registry names it runs on
    extract_tasks: list
    stitch_pairs: list  # (a, b) pairs
    tasks: dict  # config task name -> its settings, defaults filled
    split_task: dict  # split-prefill's style task, from its section's keys
    split_user_task: dict | None  # a JSONL task split-prefill runs on instead
    scale_user_task: dict | None  # a JSONL task the scale sweep transplants on instead
    notes: list  # lines the user should read before any job

    def pair_names(self) -> list:
        return [f"{a}--{b}" for a, b in self.stitch_pairs]


def _source(entry):
    return entry["source"] if isinstance(entry["source"], dict) else {}


def realshape_path(source: dict) -> Path:
    """The published config a real-shape entry names: a file of config/real-configs/, or a path."""
    name = source["realshape"]["config"]
    return Path(name) if len(Path(name).parts) > 1 else Path("config/real-configs") / name


def selected(config: dict, section: str, key: str, universe) -> list:
    """`config[section][key]`, every name checked against `universe`; empty means all of it."""
    chosen = config[section][key] or list(universe)
    unknown = sorted(set(chosen) - set(universe))
    if unknown:
        raise UserError(f"config {section}.{key}: unknown names {unknown}; choose from {sorted(universe)}")
    return chosen


def _check_sources(config: dict, main_process: bool) -> list:
    """Every registry entry's source: a toy's layout uses its family's letters and trains as asked, a real-shape
    entry's published config exists and is of its family, a real checkpoint is one (config, family, every shard,
    every header, a tokenizer). A hub id is asked of the hub once, by the main process. Returns the notes."""
    from hybridlens.models.realshape import publisher

    notes = []
    for name, entry in config["models"].items():
        where, source = f"config models.{name}.source", _source(entry)
        family = FAMILIES[entry["family"]]
        if "toy" in source:
            layout = source["toy"]["layout"]
            if set(layout) - set(family.letters):
                raise UserError(
                    f"{where}.toy.layout: {layout!r} has layers family {family.name} does not build; "
                    f"use only the letters {family.letters!r}"
                )
            check_toy(source["toy"], f"{where}.toy")
            check_from(name, config["models"])
        elif "realshape" in source:
            path = realshape_path(source)
            if not path.is_file():
                raise UserError(
                    f"{where}.realshape.config: {path} does not exist; "
                    "name a file of config/real-configs/ or a path to a published config.json"
                )
            model_type = read_config(path, f"{where}.realshape.config").get("model_type")
            check_family(model_type, entry["family"], f"config models.{name} ({path})")
            if source["realshape"].get("tokenizer") == "qwen" and publisher(path) != "Qwen":
                raise UserError(
                    f"{where}.realshape.tokenizer: qwen is Qwen's tokenizer and {path.name} is not a Qwen "
                    "model; use tokenizer: trained"
                )
        else:
            path = Path(entry["source"]).expanduser()
            if not path.exists() and not main_process:
                continue
            notes += check_source(entry["source"], entry["family"], where)
            # Our shipped toys (with a manifest) read the toy rendering by design; any other checkpoint
            # without a template reads every prompt unframed, which the user should hear before any job.
            if (
                main_process
                and entry.get("prompts", "chat") == "chat"
                and path.is_dir()
                and not (path / MANIFEST).is_file()
                and not has_chat_template(path)
            ):
                notes.append(
                    f"config models.{name}: {path} has no chat template, so its prompts are read as plain text, "
                    "unframed; set prompts: raw in its entry if that is intended"
                )
    return notes


def _check_hla(config: dict) -> None:
    """Shipped from-scratch HLA models are not retrained: every (mode, seed) must be there. HLA replaces Gated
    DeltaNet mixers, so only models of a family with them can be adapted."""
    hla = config["hla"]
    source = hla.get("source")
    runs = [f"{m}_s{s}" for m in hla["modes"] for s in hla["seeds"]]
    missing = [r for r in runs if source and not Path(source, r, "manifest.json").is_file()]
    if missing:
        raise UserError(
            f"config hla.source: {source} has no shipped model {', '.join(missing)}; "
            "choose modes and seeds it has, or set hla.source: null to train them in the run"
        )
    for name in hla["adapt_models"]:
        family = FAMILIES.get(config["models"].get(name, {}).get("family"))
        if family is None or not family.hla:
            raise UserError(
                f"config hla.adapt_models: {name!r} is not a registry model with Gated DeltaNet mixers; "
                f"HLA replaces them, so list models of the families {[f for f in FAMILIES if FAMILIES[f].hla]}"
            )


def _stitch_pairs(config: dict) -> list:
    pairs = []
    for pair in config["stitch"]["pairs"]:
        unknown = [m for m in pair if m not in config["models"]]
        if unknown or len(set(pair)) != 2:
            more = f"; unknown {unknown}, choose from {sorted(config['models'])}" if unknown else ""
            raise UserError(f"config stitch.pairs: {pair} must be two different registry names{more}")
        pairs.append(tuple(pair))
    return pairs


def _user_task(config: dict, section: str, partner: str, like=None):
    """The JSONL task an experiment runs on instead of its own items, checked line by line; None if none."""
    from hybridlens import tasks

    name = config[section]["task"]
    if not name:
        return None
    if name not in config["tasks"]:
        raise UserError(f"config {section}.task: {name!r} is not under tasks: ({sorted(config['tasks'])})")
    tasks.require_partner(config["tasks"][name], partner, f"{section}.task")
    tasks.check_user_items(config["tasks"][name], f"{section}.task", like)
    return config["tasks"][name]


def _check_tokenizers(config: dict, plan: RunPlan, reference_task) -> None:
    """What each experiment's items ask of a local checkpoint's tokenizer (keys, values and languages that stay
    single tokens where they stand), once: tokenizers are small and the weights need not load
    (models.adapter.tokenizer_view), so a tokenizer too small for a task fails here, not in every job. Our
    shipped toys (with a manifest) and models built in the run are not read here."""
    from hybridlens.models.adapter import tokenizer_view
    from hybridlens.tasks import items_of

    split = plan.split_user_task or plan.split_task | {"seed": config["split_prefill"]["seeds"][0]}
    needs = [("extract", f"extract.tasks {t}", config["tasks"][t]) for t in plan.extract_tasks]
    needs += [
        ("circuit", "circuit", reference_task(config["circuit"])),
        ("scale", "scale", plan.scale_user_task or reference_task(config["scale"])),
        ("split_prefill", "split_prefill", split),
    ]
    for name, entry in config["models"].items():
        path = Path(str(entry["source"])).expanduser()
        if _source(entry) or not path.is_dir() or (path / MANIFEST).is_file():
            continue
        asked = [(who, spec) for section, who, spec in needs if name in plan.runs_on[section]]
        if not asked:
            continue
        view = tokenizer_view(path, entry["family"], entry.get("prompts", "chat"))
        for who, spec in asked:
            try:
                items_of(view, spec)
            except ValueError as err:
                raise UserError(f"config {who} on models.{name}: {err}") from None


def plan_run(config: dict, main_process: bool = True) -> RunPlan:
    """The plan of a validated config (schema defaults filled): every check that can fail before a job runs
    raises UserError here, in one line naming the key and the fix. main_process: also ask the hub about hub
    ids and read local tokenizers (a SLURM job's own parse skips both). The config is not changed: the plan's
    `tasks` are its tasks with their defaults filled."""
    from hybridlens import tasks
    from hybridlens.experiments.circuit import reference_task

    models = config["models"]
    config = config | {"tasks": {name: tasks.settings(name, spec) for name, spec in config["tasks"].items()}}
    split_task = tasks.settings(
        "split_prefill",
        {"kind": "style"} | {k: v for k, v in config["split_prefill"].items() if k in tasks.style_keys()},
        where="config split_prefill",
    )
    notes = _check_sources(config, main_process)
    _check_hla(config)
    runs_on = {section: selected(config, section, "models", models) for section in EXPERIMENTS}
    unknown = [m for m in config["scale"]["models"] if m not in models]
    if unknown:
        raise UserError(f"config scale.models: unknown names {unknown}; choose from {sorted(models)}")
    runs_on["scale"] = config["scale"]["models"]  # the sweep's [] is no sweep
    runs_on["hla_adapt"] = config["hla"]["adapt_models"]
    pairs = _stitch_pairs(config)
    runs_on["stitch"] = list(dict.fromkeys(m for pair in pairs for m in pair))
    toys = [m for m in models if "toy" in _source(models[m])]
    formats = {m: ToySpec.of(_source(models[m])["toy"], config["zoo"]).formats for m in toys}
    for section in ("circuit", "split_prefill", "scale", "stitch"):  # a toy is asked in a format it trained on
        trained = {m: formats[m] for m in runs_on[section] if m in toys}
        check_trained_format(section, "pairs" if section == "stitch" else "models", config[section]["format"], trained)
    for name in config["circuit"]["tasks"]:
        if name not in config["tasks"]:
            raise UserError(f"config circuit.tasks: {name!r} is not under tasks: ({sorted(config['tasks'])})")
        tasks.require_partner(config["tasks"][name], "donor", "circuit.tasks")
    shipped = {}
    for m, entry in models.items():
        manifest = Path(entry["source"]) / MANIFEST if isinstance(entry["source"], str) else None
        if manifest is not None and manifest.is_file():
            shipped[m] = str(manifest)
    plan = RunPlan(
        toys=toys,
        realshape=[m for m in models if "realshape" in _source(models[m])],
        shipped=shipped,
        runs_on=runs_on,
        extract_tasks=selected(config, "extract", "tasks", config["tasks"]) if config["tasks"] else [],
        stitch_pairs=pairs,
        tasks=config["tasks"],
        split_task=split_task,
        split_user_task=_user_task(config, "split_prefill", "swap", like=split_task),
        scale_user_task=_user_task(config, "scale", "donor"),
        notes=notes,
    )
    if main_process:
        _check_tokenizers(config, plan, reference_task)
    return plan
