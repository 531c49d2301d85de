# HLA from scratch: GDN, fixed chunk mixing and HLA models of one size on the long-context suite.


rule hla_scratch:
    # Train one model (mode, seed) at the training length; evaluate the suite at every length.
    output:
        curve="results/hla/scratch/{mode}_s{seed}/curve.csv",
        table="results/hla/scratch/{mode}_s{seed}/eval.csv",
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
        settings=hla_settings(exclude=("resources", "adapt", "adapt_models")),
    script:
        "../workflow_scripts/hla_scratch.py"


rule plot_hla:
    # Accuracy against context length per model, macro over the suite and per task, with intervals.
    input:
        expand(
            "results/hla/scratch/{mode}_s{seed}/eval.csv",
            mode=config["hla"]["modes"],
            seed=config["hla"]["seeds"],
        ),
    output:
        pdf=report("results/figures/hla_length.pdf", category="HLA"),
        tsv="results/tables/hla_length.tsv",
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
            keep=("adapt", "chunk", "bucket", "reg", "length_multipliers")
        ),
    script:
        "../workflow_scripts/hla_adapt.py"


rule plot_hla_adapt:
    # Accuracy by length before and after the HLA adaptation, per adapted model.
    input:
        expand(
            "results/hla/adapt/{model}/eval.csv", model=config["hla"]["adapt_models"]
        ),
    output:
        pdf=report("results/figures/hla_adapt.pdf", category="HLA"),
        tsv="results/tables/hla_adapt.tsv",
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
