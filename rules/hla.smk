# HLA from scratch: GDN, fixed chunk mixing and HLA models of one size on the long-context suite.


rule hla_train:
    # Train one from-scratch model (mode, seed) at the training length (make zoo ships it to zoo/hla).
    output:
        weights="results/hla/models/{mode}_s{seed}/model.safetensors",
        curve="results/hla/models/{mode}_s{seed}/curve.csv",
    log:
        "logs/hla_train/{mode}_s{seed}.log",
    benchmark:
        "benchmarks/hla_train/{mode}_s{seed}.tsv"
    conda:
        "../environment.yml"
    threads: hla_resource("cpus", 1)
    resources:
        mem_mb=hla_resource("mem_mb", 2000),
        runtime=hla_resource("runtime", 30),
        gpu=hla_resource("gpus", 0),
    params:
        training=hla_training,
        device=config["hla"]["device"],
    script:
        "../workflow_scripts/hla_train.py"


rule hla_scratch:
    # Evaluate one from-scratch model (trained here, or shipped under hla.source) at every length.
    input:
        hla_model_input,
    output:
        table="results/hla/scratch/{mode}_s{seed}/eval.csv",
        gates="results/hla/scratch/{mode}_s{seed}/gates.csv",
    log:
        "logs/hla_scratch/{mode}_s{seed}.log",
    benchmark:
        "benchmarks/hla_scratch/{mode}_s{seed}.tsv"
    conda:
        "../environment.yml"
    threads: hla_resource("cpus", 1)
    resources:
        mem_mb=hla_resource("mem_mb", 2000),
        runtime=hla_resource("runtime", 30),
        gpu=hla_resource("gpus", 0),
    params:
        training=hla_training,
        device=config["hla"]["device"],
        evaluation=hla_settings(keep=("length_multipliers", "eval_n")),
    script:
        "../workflow_scripts/hla_scratch.py"


# Only a run that trains its from-scratch models ships them (make zoo).
if not config["hla"].get("source"):

    rule ship_hla:
        # A trained from-scratch model as a checkpoint to commit, with its training spec and manifest.
        input:
            weights=rules.hla_train.output.weights,
            curve=rules.hla_train.output.curve,
        output:
            manifest="zoo/hla/{mode}_s{seed}/manifest.json",
        log:
            "logs/ship_hla/{mode}_s{seed}.log",
        conda:
            "../environment.yml"
        threads: 1
        params:
            training=hla_training,
            name=lambda wc: f"hla/{wc.mode}_s{wc.seed}",
        script:
            "../workflow_scripts/ship_toy.py"


rule hla_tables:
    # Accuracy against context length per model, macro over the suite and per task, with intervals; the
    # router gates of every chunk-mixing model.
    input:
        evals=expand(
            "results/hla/scratch/{mode}_s{seed}/eval.csv",
            mode=config["hla"]["modes"],
            seed=config["hla"]["seeds"],
        ),
        gates=expand(
            "results/hla/scratch/{mode}_s{seed}/gates.csv",
            mode=config["hla"]["modes"],
            seed=config["hla"]["seeds"],
        ),
    output:
        tsv="results/tables/hla_length.tsv",
        gates="results/tables/hla_gates.tsv",
    log:
        "logs/hla_tables/tables.log",
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/hla_tables.py"


rule plot_hla:
    # Accuracy against context length per model, macro over the suite and per task.
    input:
        tsv=rules.hla_tables.output.tsv,
    output:
        pdf=report("results/figures/hla_length.pdf", category="HLA"),
    log:
        "logs/plot_hla/plot.log",
    benchmark:
        "benchmarks/plot_hla.tsv"
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/plot_hla.py"


rule hla_adapt:
    # Convert a trained Qwen3.5-architecture model's GDN mixers to HLA, fine-tune briefly, evaluate before and after.
    input:
        model_input,
    output:
        curve="results/hla/adapt/{model}/curve.csv",
        table="results/hla/adapt/{model}/eval.csv",
        longbench="results/hla/adapt/{model}/longbench.csv",
        ruler="results/hla/adapt/{model}/ruler.csv",
    log:
        "logs/hla_adapt/{model}.log",
    benchmark:
        "benchmarks/hla_adapt/{model}.tsv"
    conda:
        "../environment.yml"
    threads: res("cpus", 1)
    resources:
        mem_mb=res("mem_mb", 2000),
        runtime=res("runtime", 30),
        gpu=res("gpus", 0),
    params:
        model=model_params,
        settings=hla_settings(
            keep=(
                "adapt",
                "chunk",
                "bucket",
                "router",
                "reg",
                "length_multipliers",
                "longbench",
            )
        ),
    script:
        "../workflow_scripts/hla_adapt.py"


rule hla_adapt_tables:
    # Accuracy by length before and after the HLA adaptation, per adapted model; RULER's scores per phase.
    input:
        evals=expand(
            "results/hla/adapt/{model}/eval.csv", model=config["hla"]["adapt_models"]
        ),
        ruler=expand(
            "results/hla/adapt/{model}/ruler.csv", model=config["hla"]["adapt_models"]
        ),
    output:
        tsv="results/tables/hla_adapt.tsv",
        ruler="results/tables/hla_ruler.tsv",
    log:
        "logs/hla_adapt_tables/tables.log",
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/hla_tables.py"


rule plot_hla_adapt:
    # Accuracy by length before and after the HLA adaptation, per adapted model.
    input:
        tsv=rules.hla_adapt_tables.output.tsv,
    output:
        pdf=report("results/figures/hla_adapt.pdf", category="HLA"),
    log:
        "logs/plot_hla_adapt/plot.log",
    benchmark:
        "benchmarks/plot_hla_adapt.tsv"
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/plot_hla.py"
