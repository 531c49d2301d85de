# Validation, wildcard constraints, input functions and the final-output list.
import sys
from pathlib import Path
from types import SimpleNamespace

from snakemake.utils import validate

from hybridlens.config import (
    HLA_TRAINING_KEYS,
    TOY_TRAINING_KEYS,
    check_config,
    check_relations,
    load_config,
)
from hybridlens.errors import UserError
from hybridlens.experiments.circuit import VALIDATIONS as CIRCUIT_VALIDATIONS
from hybridlens.experiments.circuit import reference_task
from hybridlens.experiments.zoo import check_from, check_toy, check_trained_format
from hybridlens.models.adapter import tokenizer_view
from hybridlens.models.families import FAMILIES, check_family
from hybridlens.models.realshape import publisher
from hybridlens.models.source import (
    MANIFEST,
    check_source,
    has_chat_template,
    read_config,
)
from hybridlens.runlock import describe as describe_run
from hybridlens.runlock import hold, holder
from hybridlens.tasks import items_of, require_partner
from hybridlens.tasks import settings as task_settings
from hybridlens.tasks.items import require_entries
from hybridlens.tasks.style import DEFAULTS as STYLE_DEFAULTS
from hybridlens.tasks.style import check_items as check_style_items
from hybridlens.tasks.jsonl import load as load_task_items
from hybridlens.store import sweep_temporaries
from hybridlens.tables import changed as changed_tables

# Snakemake starts each job's script as "<python> <script>" without quoting either, so a space in a path
# fails every job (exit 127) after a clean dry run: refuse it before anything else.
for what, path in (
    ("the project", workflow.basedir),
    ("the working directory", Path.cwd()),
    ("this Python", sys.executable),
):
    if any(c.isspace() for c in str(path)):
        raise UserError(
            f"{what} is at {str(path)!r}, a path with a space, which snakemake's jobs do not quote; "
            "clone or move it (and its .venv) to a path without spaces"
        )

# Duplicate keys and syntax errors, named by file and line: snakemake's loader keeps the last duplicate
# and says only "not valid YAML" (a --configfile that does not parse fails before this line runs).
for path in workflow.overwrite_configfiles or ["config/config.yaml"]:
    load_config(path)

# A preset passed with --configfile is a whole config (it replaces the toy registry, not merges into it).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


# One line naming the offending key first; snakemake's validate then fills the defaults.
check_config(config, Path(workflow.basedir) / "config" / "schema.yaml")
validate(config, "../config/schema.yaml")
check_relations(config)
# Each task's kind fills its own defaults and checks its own keys (a JSONL task's file, line by line).
config["tasks"] = {
    name: task_settings(name, spec) for name, spec in config["tasks"].items()
}
STYLE_KEYS = set(STYLE_DEFAULTS) - {"seed"}
# Split-prefill's items come from the style task, with its keys checked the same way.
SPLIT_TASK = task_settings(
    "split_prefill",
    {"kind": "style"}
    | {
        k: config["split_prefill"][k]
        for k in STYLE_KEYS
        if k in config["split_prefill"]
    },
    where="config split_prefill",
)


wildcard_constraints:
    model="|".join(config["models"]),
    a="|".join(config["models"]),
    b="|".join(config["models"]),
    receiver="|".join(config["models"]),
    mode="gdn|fixed|hla",
    seed=r"\d+",
    task="[A-Za-z0-9_]+",


# The circuit keys that only judge its validations (rule validate_circuit), so changing them reruns no circuit.
CIRCUIT_TOLERANCES = {key for _, _, key in CIRCUIT_VALIDATIONS.values()}


def canonical(value):
    """Dicts with sorted keys, recursively. Snakemake compares params by their text, so reordering
    keys in a config file must not look like a change (and rerun training)."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def is_toy(model):
    return (
        isinstance(config["models"][model]["source"], dict)
        and "toy" in config["models"][model]["source"]
    )


def is_realshape(model):
    source = config["models"][model]["source"]
    return isinstance(source, dict) and "realshape" in source


def names_regex(names):
    """A wildcard constraint that matches exactly these registry names (none: nothing)."""
    return "|".join(names) or "(?!)"


def toy_models():
    return [m for m in config["models"] if is_toy(m)]


def realshape_models():
    return [m for m in config["models"] if is_realshape(m)]


def realshape_config(model):
    """The published config a real-shape entry names: a file of config/real-configs/, or a path."""
    name = config["models"][model]["source"]["realshape"]["config"]
    path = (
        Path(name) if len(Path(name).parts) > 1 else Path("config/real-configs") / name
    )
    return str(path)


def check_sources():
    """Every registry entry's source, before any job runs: a toy's layout must use its family's letters, a
    real-shape entry's published config must exist and be of its family, and a real checkpoint must be one
    (config, family, every shard, every header, a tokenizer). A hub id is asked of the hub, once, by the main
    process.
    """
    for name, entry in config["models"].items():
        where = f"config models.{name}.source"
        family = FAMILIES[entry["family"]]
        layout = entry["source"]["toy"]["layout"] if is_toy(name) else ""
        if set(layout) - set(family.letters):
            raise ValueError(
                f"{where}.toy.layout: {layout!r} has layers family {family.name} does not build; "
                f"use only the letters {family.letters!r}"
            )
        if is_toy(name):
            check_toy(entry["source"]["toy"], f"{where}.toy")
            check_from(name, config["models"])
        if is_realshape(name):
            path = Path(realshape_config(name))
            if not path.is_file():
                raise ValueError(
                    f"{where}.realshape.config: {path} does not exist; "
                    "name a file of config/real-configs/ or a path to a published config.json"
                )
            model_type = read_config(path, f"{where}.realshape.config").get(
                "model_type"
            )
            check_family(model_type, entry["family"], f"config models.{name} ({path})")
            if (
                entry["source"]["realshape"].get("tokenizer") == "qwen"
                and publisher(path) != "Qwen"
            ):
                raise ValueError(
                    f"{where}.realshape.tokenizer: qwen is Qwen's tokenizer and {path.name} is not a Qwen "
                    "model; use tokenizer: trained"
                )
        elif not is_toy(name):
            hub = not Path(entry["source"]).expanduser().exists()
            if hub and not workflow.is_main_process:
                continue
            for note in check_source(entry["source"], entry["family"], where):
                print(f"hybridlens: {note}", file=sys.stderr)
            path = Path(entry["source"]).expanduser()
            # Our shipped toys (with a manifest) read the toy rendering by design; any other checkpoint
            # without a template reads every prompt unframed, which the user should hear before any job.
            if (
                workflow.is_main_process
                and entry.get("prompts", "chat") == "chat"
                and path.is_dir()
                and not (path / MANIFEST).is_file()
                and not has_chat_template(path)
            ):
                print(
                    f"hybridlens: config models.{name}: {path} has no chat template, so its prompts are read "
                    "as plain text, unframed; set prompts: raw in its entry if that is intended",
                    file=sys.stderr,
                )


check_sources()


def shipped(model):
    """The manifest of a local checkpoint that has one (a toy shipped to zoo/), else None."""
    source = config["models"][model]["source"]
    manifest = Path(source) / "manifest.json" if isinstance(source, str) else None
    return str(manifest) if manifest is not None and manifest.is_file() else None


def model_input(wildcards):
    """A toy model comes from train_toy (after its accuracy gate), a real-shape one from build_realshape;
    a shipped one is its manifest, so that `make zoo` reruns what reads it; a real one is loaded by source.
    """
    if is_toy(wildcards.model):
        return f"results/models/{wildcards.model}/eval.json"
    if is_realshape(wildcards.model):
        return f"results/models/{wildcards.model}/config.json"
    return shipped(wildcards.model) or []


def task_files(wildcards):
    """The files a task reads (a JSONL task's prompts, a long format's filler), so that editing one reruns it."""
    task = config["tasks"][wildcards.task]
    return [f for f in (task.get("file"), task.get("filler_file")) if f]


def zoo_members():
    """Registry name -> directory holding curve.csv and eval.json: toys trained here and shipped toys."""
    members = {m: f"results/models/{m}" for m in toy_models()}
    for m in config["models"]:
        if m not in members and shipped(m):
            directory = Path(shipped(m)).parent
            if (directory / "curve.csv").is_file() and (
                directory / "eval.json"
            ).is_file():
                members[m] = str(directory)
    return members


def toy_spec(wildcards):
    return config["models"][wildcards.model]["source"]["toy"]


def parent_input(wildcards):
    """A `from` toy's parent: the weights it starts from. Only new weights retrain the toy; a new evaluation of
    the same ones (another gate) does not, as training_params leaves the gate out."""
    parent = toy_spec(wildcards).get("from")
    return {"parent": f"results/models/{parent}/model.safetensors"} if parent else {}


def trained_formats(model):
    """The formats a toy trains on and is gated on: its spec's, else the zoo's."""
    return config["models"][model]["source"]["toy"].get(
        "formats", config["zoo"]["formats"]
    )


def eval_pairs(wildcards):
    """Held-out dictionary size: zoo.eval_pairs, or the toy's largest curriculum size if smaller."""
    stages = toy_spec(wildcards).get("stages", config["zoo"]["stages"])
    return min(config["zoo"]["eval_pairs"], max(stages))


def training_priority(wildcards):
    """Toys that more experiments wait on train first (qwen_toy's chain is the default run's longest)."""
    users = [
        selected("extract", "models", config["models"]),
        selected("split_prefill", "models", config["models"]),
        selected("circuit", "models", config["models"]),
        config["scale"]["models"],
        [m for pair in config["stitch"]["pairs"] for m in pair],
        config["hla"]["adapt_models"],
    ]
    return 10 + sum(wildcards.model in names for names in users)


def training_params(wildcards):
    """What training a toy model depends on (not its gate or evaluation), so changing those keeps the weights;
    a `from` toy's includes its parent's, so that a shipped one says how to train it again.
    """
    toy = {k: v for k, v in toy_spec(wildcards).items() if k != "gate"}
    zoo = {k: config["zoo"][k] for k in TOY_TRAINING_KEYS}
    params = {
        "family": config["models"][wildcards.model]["family"],
        "toy": toy,
        "zoo": zoo,
    }
    if "from" in toy:
        params["parent"] = training_params(SimpleNamespace(model=toy["from"]))
    return canonical(params)


def model_source(wildcards):
    if is_toy(wildcards.model) or is_realshape(wildcards.model):
        return f"results/models/{wildcards.model}"
    return config["models"][wildcards.model]["source"]


def model_params(wildcards):
    """What load_model needs: source, family, dtype, device, device_map (and prompts, when raw)."""
    m = config["models"][wildcards.model]
    return {
        "source": model_source(wildcards),
        "family": m["family"],
        "dtype": m.get("dtype", "float32"),
        "device": m.get("device", "cpu"),
        "device_map": canonical(m.get("device_map")),
    } | ({"prompts": "raw"} if m.get("prompts") == "raw" else {})


def store_config(model, **settings):
    """What a store of one model depends on, hashed into it and checked by its readers: the registry entry
    (what a job is given, memory or GPUs, does not change what it computes) and the rule's settings.
    """
    entry = {k: v for k, v in config["models"][model].items() if k != "resources"}
    return canonical({"model": entry, **settings})


def pair_stores(wildcards):
    """Per model of a stitching pair: the source and config its activation stores are written for."""
    return {
        m: {
            "source": model_source(SimpleNamespace(model=m)),
            "config": store_config(m, stitch=stitch_settings()),
        }
        for m in (wildcards.a, wildcards.b)
    }


def res(key, default):
    """A per-model resource from the registry, as a rule-level callable (SLURM requests follow it)."""
    return (
        lambda wildcards: config["models"][wildcards.model]
        .get("resources", {})
        .get(key, default)
    )


def hla_settings(keep=None, exclude=()):
    """The hla section's keys a rule depends on, so that editing another key does not rerun it."""
    return canonical(
        {
            k: v
            for k, v in config["hla"].items()
            if (keep is None or k in keep) and k not in exclude
        }
    )


def hla_training(wildcards):
    """What training one from-scratch HLA model depends on: the hla keys that shape or train it."""
    return canonical(
        {"mode": wildcards.mode, "seed": int(wildcards.seed)}
        | {k: config["hla"][k] for k in HLA_TRAINING_KEYS}
    )


def hla_model_input(wildcards):
    """A from-scratch model trained in this run, or the manifest of one shipped under hla.source."""
    run = f"{wildcards.mode}_s{wildcards.seed}"
    if config["hla"].get("source"):
        return f"{config['hla']['source']}/{run}/manifest.json"
    return f"results/hla/models/{run}/model.safetensors"


def check_hla_source():
    """Shipped from-scratch models are not retrained by a normal run: every (mode, seed) must be there."""
    source = config["hla"].get("source")
    runs = [f"{m}_s{s}" for m in config["hla"]["modes"] for s in config["hla"]["seeds"]]
    missing = [
        r for r in runs if source and not Path(source, r, "manifest.json").is_file()
    ]
    if missing:
        raise ValueError(
            f"config hla.source: {source} has no shipped model {', '.join(missing)}; "
            "choose modes and seeds it has, or set hla.source: null to train them in the run"
        )


check_hla_source()


def hla_resource(key, default):
    """What one from-scratch HLA job asks for (hla.resources; toy defaults)."""
    return config["hla"].get("resources", {}).get(key, default)


def selected(section, key, universe):
    chosen = config[section][key] or list(universe)
    unknown = sorted(set(chosen) - set(universe))
    if unknown:
        raise ValueError(
            f"config {section}.{key}: unknown names {unknown}; choose from {sorted(universe)}"
        )
    return chosen


def check_analysed_formats():
    """Every toy an analysis asks is asked in a format it was trained on, before any job runs."""
    sections = {
        "circuit": ("models", selected("circuit", "models", config["models"])),
        "split_prefill": (
            "models",
            selected("split_prefill", "models", config["models"]),
        ),
        "scale": ("models", config["scale"]["models"]),
        "stitch": ("pairs", [m for pair in config["stitch"]["pairs"] for m in pair]),
    }
    for section, (key, names) in sections.items():
        trained = {
            m: trained_formats(m)
            for m in names
            if m in config["models"]
            and is_toy(m)  # unknown names are refused where they are used
        }
        check_trained_format(section, key, config[section]["format"], trained)


check_analysed_formats()


def check_circuit_tasks():
    """A task the circuit transplants on is configured, and each of its items names a donor."""
    for name in config["circuit"]["tasks"]:
        if name not in config["tasks"]:
            raise ValueError(
                f"config circuit.tasks: {name!r} is not under tasks: ({sorted(config['tasks'])})"
            )
        require_partner(config["tasks"][name], "donor", "circuit.tasks")


check_circuit_tasks()


def split_prefill_items():
    """The JSONL task split-prefill runs on instead of the style task, checked line by line; None if none."""
    name = config["split_prefill"]["task"]
    if not name:
        return None
    if name not in config["tasks"]:
        raise ValueError(
            f"config split_prefill.task: {name!r} is not under tasks: ({sorted(config['tasks'])})"
        )
    require_partner(config["tasks"][name], "swap", "split_prefill.task")
    check_style_items(
        load_task_items(config["tasks"][name]["file"]), SPLIT_TASK, "split_prefill.task"
    )
    return config["tasks"][name]


SPLIT_USER_TASK = split_prefill_items()


def scale_items():
    """The JSONL task the scale sweep transplants on instead of the dictionary task, checked; None if none."""
    name = config["scale"]["task"]
    if not name:
        return None
    if name not in config["tasks"]:
        raise ValueError(
            f"config scale.task: {name!r} is not under tasks: ({sorted(config['tasks'])})"
        )
    require_partner(config["tasks"][name], "donor", "scale.task")
    require_entries(load_task_items(config["tasks"][name]["file"]), "scale.task")
    return config["tasks"][name]


SCALE_USER_TASK = scale_items()


def check_tokenizers():
    """What each experiment's items ask of a local checkpoint's tokenizer (keys, values and languages that stay
    single tokens where they stand), once, before any job: tokenizers are small and the weights need not load
    (models.adapter.tokenizer_view), so a tokenizer too small for a task fails here, not in every job. Our
    shipped toys (with a manifest) and models built in the run are not read here."""
    n_languages = config["zoo"]["n_languages"]
    split = SPLIT_USER_TASK or SPLIT_TASK | {
        "seed": config["split_prefill"]["seeds"][0]
    }
    needs = [
        ("extract", f"extract.tasks {t}", config["tasks"][t])
        for t in (
            selected("extract", "tasks", config["tasks"]) if config["tasks"] else []
        )
    ]
    needs += [
        ("circuit", "circuit", reference_task(config["circuit"])),
        ("scale", "scale", SCALE_USER_TASK or reference_task(config["scale"])),
        ("split_prefill", "split_prefill", split),
    ]
    runs_on = {
        section: selected(section, "models", config["models"])
        for section in ("extract", "circuit", "split_prefill")
    } | {
        "scale": config["scale"]["models"]
    }  # the sweep's [] is no sweep
    for name, entry in config["models"].items():
        path = Path(str(entry["source"])).expanduser()
        if (
            is_toy(name)
            or is_realshape(name)
            or not path.is_dir()
            or (path / MANIFEST).is_file()
        ):
            continue
        asked = [
            (who, spec) for section, who, spec in needs if name in runs_on[section]
        ]
        if not asked:
            continue
        view = tokenizer_view(path, entry["family"], entry.get("prompts", "chat"))
        for who, spec in asked:
            try:
                items_of(view, spec, n_languages)
            except ValueError as err:
                raise ValueError(f"config {who} on models.{name}: {err}") from None


if workflow.is_main_process:
    check_tokenizers()


def split_tables(name):
    """Per-model split-prefill tables of one kind, for the plotting rules."""
    return expand(
        "results/split_prefill/{model}/{name}.tsv",
        model=selected("split_prefill", "models", config["models"]),
        name=name,
    )


def circuit_tables(name):
    """Per-model circuit outputs of one kind, for the plotting rule."""
    return expand(
        "results/circuit/{model}/{name}",
        model=selected("circuit", "models", config["models"]),
        name=name,
    )


SCALE_FIGURES = ["redirect", "removal", "chain", "groups_needed"]


def scale_tables(name):
    """Per-size scale outputs of one kind, smallest first."""
    return expand(
        "results/scale/{model}/{name}", model=config["scale"]["models"], name=name
    )


def check_scale_models():
    unknown = [m for m in config["scale"]["models"] if m not in config["models"]]
    if unknown:
        raise ValueError(
            f"config scale.models: unknown names {unknown}; choose from {sorted(config['models'])}"
        )


check_scale_models()


def check_adapt_models():
    """HLA replaces Gated DeltaNet mixers: only registry entries of a family with them can be adapted."""
    for name in config["hla"]["adapt_models"]:
        family = FAMILIES.get(config["models"].get(name, {}).get("family"))
        if family is None or not family.hla:
            raise ValueError(
                f"config hla.adapt_models: {name!r} is not a registry model with Gated DeltaNet mixers; "
                f"HLA replaces them, so list models of the families {[f for f in FAMILIES if FAMILIES[f].hla]}"
            )


check_adapt_models()


def stitch_pairs():
    """Pairs of config stitch.pairs as "a--b" directory names, after checking them."""
    names = []
    for pair in config["stitch"]["pairs"]:
        unknown = [m for m in pair if m not in config["models"]]
        if unknown or len(set(pair)) != 2:
            raise ValueError(
                f"config stitch.pairs: {pair} must be two different registry names"
                + (
                    f"; unknown {unknown}, choose from {sorted(config['models'])}"
                    if unknown
                    else ""
                )
            )
        names.append("--".join(pair))
    return names


stitch_pairs()


def stitch_inputs(wildcards):
    """Both models (trained and gated, if toys) and their circuits (Encode and Address blocks)."""
    out = {}
    for side in ("a", "b"):
        model = getattr(wildcards, side)
        out[f"model_{side}"] = model_input(SimpleNamespace(model=model))
        out[f"circuit_{side}"] = f"results/circuit/{model}/circuit.json"
        out[f"validated_{side}"] = f"results/circuit/{model}/validated.json"
    return out


def pair_params(wildcards):
    return {
        side: model_params(SimpleNamespace(model=getattr(wildcards, side)))
        for side in ("a", "b")
    }


def pair_res(key, default):
    """A resource for a job that holds both models of a pair: host memory adds up; GPUs, time and cores
    are the larger request (both models load on the device their entries name)."""
    combine = sum if key == "mem_mb" else max
    return lambda wildcards: combine(
        config["models"][getattr(wildcards, side)]
        .get("resources", {})
        .get(key, default)
        for side in ("a", "b")
    )


def stitch_settings():
    return canonical({k: v for k, v in config["stitch"].items() if k != "pairs"})


def final_outputs():
    outputs = []
    if zoo_members():
        outputs += ["results/figures/zoo_training.pdf", "results/figures/zoo_eval.pdf"]
    if config["tasks"]:
        outputs += expand(
            "results/figures/logit_lens_{task}.pdf",
            task=selected("extract", "tasks", config["tasks"]),
        )
    if selected("split_prefill", "models", config["models"]):
        outputs += [
            "results/figures/split_prefill_retention.pdf",
            "results/figures/state_swap.pdf",
            "results/tables/split_prefill_samples.tsv",
        ]
    if selected("circuit", "models", config["models"]):
        outputs.append("results/figures/circuit.pdf")
        outputs += expand(
            "results/tables/circuit_task_{task}.tsv", task=config["circuit"]["tasks"]
        )
    if config["scale"]["models"]:
        outputs += expand("results/figures/scale_{figure}.pdf", figure=SCALE_FIGURES)
    outputs += [f"results/figures/stitch_{pair}.pdf" for pair in stitch_pairs()]
    if config["hla"]["modes"]:
        outputs.append("results/figures/hla_length.pdf")
    if config["hla"]["adapt_models"]:
        outputs.append("results/figures/hla_adapt.pdf")
    return outputs + ["results/summary.md"]


def summary_tables(wildcards=None):
    """The headline table of every experiment this config runs, by summary section."""
    tables = {
        "zoo": bool(zoo_members()) and "results/tables/zoo_eval.tsv",
        "circuit": selected("circuit", "models", config["models"])
        and "results/tables/circuit_transplant.tsv",
        "circuit_validations": selected("circuit", "models", config["models"])
        and "results/tables/circuit_validations.tsv",
        "circuit_tasks": selected("circuit", "models", config["models"])
        and [
            f"results/tables/circuit_task_{task}.tsv"
            for task in config["circuit"]["tasks"]
        ],
        "split_prefill": selected("split_prefill", "models", config["models"])
        and "results/tables/split_prefill_retention.tsv",
        "scale": config["scale"]["models"] and "results/scale/sizes.tsv",
        "stitch": [f"results/stitch/{pair}/summary.tsv" for pair in stitch_pairs()],
        "stitch_query": [
            f"results/stitch/{pair}/query_content.tsv" for pair in stitch_pairs()
        ],
        "hla_length": config["hla"]["modes"] and "results/tables/hla_length.tsv",
        "hla_gates": config["hla"]["modes"] and "results/tables/hla_gates.tsv",
        "hla_adapt": config["hla"]["adapt_models"] and "results/tables/hla_adapt.tsv",
        "hla_ruler": config["hla"]["adapt_models"]
        and config["hla"]["adapt"].get("ruler", {}).get("lengths")
        and "results/tables/hla_ruler.tsv",
    }
    return {section: path for section, path in tables.items() if path}


def check_live_run():
    """Name a run that is live in this directory, once, before snakemake's own lock check: its locks look the
    same whether their run is alive or was killed. Unlocking under a live run is refused outright.
    """
    live = holder(".") if workflow.is_main_process else None
    if live is None:
        return False
    if "--unlock" in sys.argv:
        raise ValueError(
            f"another run is live in this directory ({describe_run(live)}): its locks are not a killed "
            "run's; wait for it to finish, or stop it, instead of unlocking"
        )
    print(
        f"hybridlens: another run is live in this directory ({describe_run(live)}); wait for it to finish "
        "or stop it: a second run here is refused (a dry run, -n, is safe)",
        file=sys.stderr,
    )
    return True


LIVE_RUN_NAMED = check_live_run()

# Tables that later jobs read are sealed by the job that wrote them (tables.seal); one changed since is refused
# before any job, as its readers would fail on it or copy a changed number into every table built from it.
if workflow.is_main_process:
    CHANGED = changed_tables("results")
    if CHANGED:
        more = (
            f" (and {len(CHANGED) - 1} more changed tables)" if len(CHANGED) > 1 else ""
        )
        raise UserError(CHANGED[0] + more)


# After snakemake's locks are taken and before the first job: hold the directory for this run's life (a
# second run on other targets passes snakemake's per-file locks), then remove what writers killed in an
# earlier run left behind, which is safe only while no other run writes.
onstart:
    try:
        hold(".")
    except UserError as err:
        if not LIVE_RUN_NAMED:
            print(f"hybridlens: {err}", file=sys.stderr)
        sys.exit(1)
    for path in sweep_temporaries("results"):
        print(f"hybridlens: removed {path}, left by a killed run", file=sys.stderr)
