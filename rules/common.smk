# Validation, the run plan, wildcard constraints and the input functions every experiment shares; each
# experiment's own are in its rule file, the final-output list in summary.smk.
import sys
from pathlib import Path
from types import SimpleNamespace

from snakemake.utils import validate

from hybridlens.config import (
    HLA_TRAINING_KEYS,
    canonical,
    TOY_TRAINING_KEYS,
    check_config,
    check_relations,
    check_study,
    load_config,
    resolve_recipes,
)
from hybridlens.errors import UserError
from hybridlens.experiments.circuit import VALIDATIONS as CIRCUIT_VALIDATIONS
from hybridlens.findings import tables as findings_tables
from hybridlens.plan import check_paths, plan_run, realshape_path
from hybridlens.runlock import hold, name_live_run
from hybridlens.store import sweep_temporaries
from hybridlens.tables import refuse_changed
from hybridlens.zoo.spec import ToySpec

check_paths(
    {
        "the project": workflow.basedir,
        "the working directory": Path.cwd(),
        "this Python": sys.executable,
    }
)

# Duplicate keys and syntax errors, named by file and line: snakemake's loader keeps the last duplicate
# and says only "not valid YAML" (a --configfile that does not parse fails before this line runs).
for path in workflow.overwrite_configfiles or ["config/config.yaml"]:
    load_config(path)

# A preset passed with --configfile is a whole config (it replaces the toy registry, not merges into it).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


# A study's {recipe: STUDY} entries become that study's models before anything reads the registry.
config.update(resolve_recipes(config, workflow.basedir))
# One line naming the offending key first; snakemake's validate then fills the defaults.
check_config(config, Path(workflow.basedir) / "config" / "schema.yaml")
validate(config, "../config/schema.yaml")
check_relations(config)
check_study(config, workflow.basedir)
# The library plans the run: every check that can fail before a job runs, one line each (hybridlens.plan).
PLAN = plan_run(config, workflow.is_main_process)
config["tasks"] = PLAN.tasks  # each with its kind's defaults filled
for note in PLAN.notes:
    print(f"hybridlens: {note}", file=sys.stderr)


wildcard_constraints:
    model="|".join(config["models"]),
    a="|".join(config["models"]),
    b="|".join(config["models"]),
    receiver="|".join(config["models"]),
    mode="gdn|fixed|hla",
    seed=r"\d+",
    task="[A-Za-z0-9_]+",


def is_toy(model):
    return model in PLAN.toys


def is_realshape(model):
    return model in PLAN.realshape


def names_regex(names):
    """A wildcard constraint that matches exactly these registry names (none: nothing)."""
    return "|".join(names) or "(?!)"


def toy_models():
    return PLAN.toys


def shipped(model):
    """The manifest of a local checkpoint that has one (a toy shipped to zoo/), else None."""
    return PLAN.shipped.get(model)


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


def res(key, default):
    """A per-model resource from the registry, as a rule-level callable (SLURM requests follow it)."""
    return (
        lambda wildcards: config["models"][wildcards.model]
        .get("resources", {})
        .get(key, default)
    )


def runs_on(section):
    """The registry names an experiment runs on (plan.RunPlan.runs_on)."""
    return PLAN.runs_on[section]


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


def toy_of(model):
    """The toy's spec with the zoo section filled in where it is silent."""
    return ToySpec.of(config["models"][model]["source"]["toy"], config["zoo"])


def trained_formats(model):
    """The formats a toy trains on and is gated on."""
    return list(toy_of(model).formats)


def eval_pairs(wildcards):
    """Held-out dictionary size: zoo.eval_pairs, or the toy's largest curriculum size if smaller."""
    return min(config["zoo"]["eval_pairs"], max(toy_of(wildcards.model).stages))


def training_priority(wildcards):
    """Toys that more experiments wait on train first (qwen_toy's chain is the default run's longest)."""
    users = [
        runs_on("extract"),
        runs_on("split_prefill"),
        runs_on("circuit"),
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


def realshape_models():
    return PLAN.realshape


def realshape_config(model):
    return str(realshape_path(config["models"][model]["source"]))


def split_files(name):
    """Per-model split-prefill tables of one kind, for the plotting rules."""
    return expand(
        "results/split_prefill/{model}/{name}.tsv",
        model=runs_on("split_prefill"),
        name=name,
    )


CIRCUIT_TOLERANCES = {key for _, _, key in CIRCUIT_VALIDATIONS.values()}


def circuit_files(name):
    """Per-model circuit outputs of one kind, for the plotting rule."""
    return expand(
        "results/circuit/{model}/{name}",
        model=runs_on("circuit"),
        name=name,
    )


SCALE_FIGURES = ["redirect", "removal", "chain", "groups_needed"]


def scale_files(name):
    """Per-size scale outputs of one kind, smallest first."""
    return expand(
        "results/scale/{model}/{name}", model=config["scale"]["models"], name=name
    )


def stitch_pairs():
    """Pairs of config stitch.pairs as "a--b" directory names."""
    return PLAN.pair_names()


def stitch_settings():
    return canonical({k: v for k, v in config["stitch"].items() if k != "pairs"})


def pair_stores(wildcards):
    """Per model of a stitching pair: the source and config its activation stores are written for."""
    return {
        m: {
            "source": model_source(SimpleNamespace(model=m)),
            "config": store_config(m, stitch=stitch_settings()),
        }
        for m in (wildcards.a, wildcards.b)
    }


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


def hla_resource(key, default):
    """What one from-scratch HLA job asks for (hla.resources; toy defaults)."""
    return config["hla"].get("resources", {}).get(key, default)


def final_outputs():
    outputs = []
    if zoo_members():
        outputs += ["results/figures/zoo_training.pdf", "results/figures/zoo_eval.pdf"]
    if config["tasks"]:
        outputs += expand(
            "results/figures/logit_lens_{task}.pdf",
            task=PLAN.extract_tasks,
        )
    if runs_on("split_prefill"):
        outputs += [
            "results/figures/split_prefill_retention.pdf",
            "results/figures/state_swap.pdf",
            "results/tables/split_prefill_samples.tsv",
        ]
    if runs_on("circuit"):
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
    if config.get("study"):
        outputs.append(f"studies/{config['study']}/findings.md")
    return outputs + ["results/summary.md"]


def study_claims(wildcards=None):
    """The study's claims template: sentences whose numbers the findings rule fills from the run's tables."""
    return f"studies/{config['study']}/claims.md"


def study_tables(wildcards=None):
    return findings_tables(Path(study_claims()).read_text())


def summary_tables(wildcards=None):
    """The headline table of every experiment this config runs, by summary section."""
    tables = {
        "zoo": bool(zoo_members()) and "results/tables/zoo_eval.tsv",
        "circuit": runs_on("circuit") and "results/tables/circuit_transplant.tsv",
        "circuit_validations": runs_on("circuit")
        and "results/tables/circuit_validations.tsv",
        "circuit_tasks": runs_on("circuit")
        and [
            f"results/tables/circuit_task_{task}.tsv"
            for task in config["circuit"]["tasks"]
        ],
        "split_prefill": runs_on("split_prefill")
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


# A live run is named once, before snakemake's own lock check; a changed table is refused before any job.
LIVE_RUN_NAMED = workflow.is_main_process and name_live_run(".", "--unlock" in sys.argv)
if workflow.is_main_process:
    refuse_changed("results")


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
