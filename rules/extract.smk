# Activation extraction into the HDF5 store, and the logit-lens figure built from it.


rule extract_activations:
    # Capture write sites at every layer for one prompt set; store them and the logit-lens table.
    input:
        model_input,
        task_files,
    output:
        h5="results/activations/{model}/{task}.h5",
        lens="results/activations/{model}/{task}.lens.tsv",
    log:
        "logs/extract_activations/{model}/{task}.log",
    benchmark:
        "benchmarks/extract_activations/{model}/{task}.tsv"
    conda:
        "../environment.yml"
    threads: res("cpus", 1)
    resources:
        mem_mb=res("mem_mb", 2000),
        runtime=res("runtime", 20),
        gpu=res("gpus", 0),
    params:
        model=model_params,
        task=lambda wc: canonical(config["tasks"][wc.task]),
        extract=canonical(
            {
                k: v
                for k, v in config["extract"].items()
                if k not in ("models", "tasks")
            }
        ),
        config_hash=lambda wc: store_config(wc.model, task=config["tasks"][wc.task]),
    script:
        "../workflow_scripts/extract_activations.py"


rule extract_tables:
    # One task's logit-lens summary across models: per layer, the answer's rank and the residual norm.
    input:
        lens=lambda wc: expand(
            "results/activations/{model}/{task}.lens.tsv",
            model=runs_on("extract"),
            task=wc.task,
        ),
    output:
        tsv="results/tables/logit_lens_{task}.tsv",
    log:
        "logs/extract_tables/{task}.log",
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/extract_tables.py"


rule plot_logit_lens:
    # Per-layer residual norm and logit-lens rank of the answer, one panel per model.
    input:
        tsv=rules.extract_tables.output.tsv,
    output:
        pdf=report("results/figures/logit_lens_{task}.pdf", category="Activations"),
    log:
        "logs/plot_logit_lens/{task}.log",
    benchmark:
        "benchmarks/plot_logit_lens/{task}.tsv"
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/plot_logit_lens.py"
