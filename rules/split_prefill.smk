# Split-prefill and state-swap: what the KV cache and the recurrent state each carry.


rule split_prefill:
    # Every cache condition on every item of every seed; per-item rows, retention, swap table, samples.
    input:
        model_input,
        user_items=[SPLIT_USER_TASK["file"]] if SPLIT_USER_TASK else [],
    output:
        rows="results/split_prefill/{model}/items.tsv",
        retention="results/split_prefill/{model}/retention.tsv",
        swap="results/split_prefill/{model}/swap.tsv",
        samples="results/split_prefill/{model}/samples.tsv",
    log:
        "logs/split_prefill/{model}.log",
    benchmark:
        "benchmarks/split_prefill/{model}.tsv"
    conda:
        "../environment.yml"
    threads: res("cpus", 1)
    resources:
        mem_mb=res("mem_mb", 2000),
        runtime=res("runtime", 20),
        gpu=res("gpus", 0),
    params:
        model=model_params,
        settings=canonical(
            {k: v for k, v in config["split_prefill"].items() if k != "models"}
        ),
        task=canonical(SPLIT_TASK),
        user_task=SPLIT_USER_TASK,
        n_languages=config["zoo"]["n_languages"],
    script:
        "../workflow_scripts/split_prefill.py"


rule plot_split_retention:
    # Retention of retrieval / language / persona per condition and model, with intervals.
    input:
        split_tables("retention"),
    output:
        pdf=report(
            "results/figures/split_prefill_retention.pdf", category="Split-prefill"
        ),
        tsv="results/tables/split_prefill_retention.tsv",
    log:
        "logs/plot_split_retention/plot.log",
    benchmark:
        "benchmarks/plot_split_retention.tsv"
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        models=runs_on("split_prefill"),
    script:
        "../workflow_scripts/plot_split_prefill.py"


rule plot_state_swap:
    # The state-swap attribution matrix per model: content source x style source.
    input:
        split_tables("swap"),
    output:
        pdf=report("results/figures/state_swap.pdf", category="Split-prefill"),
        tsv="results/tables/state_swap.tsv",
    log:
        "logs/plot_state_swap/plot.log",
    benchmark:
        "benchmarks/plot_state_swap.tsv"
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        models=runs_on("split_prefill"),
    script:
        "../workflow_scripts/plot_split_prefill.py"


rule split_prefill_samples:
    # Sample generations per condition and model, as a table in the report.
    input:
        split_tables("samples"),
    output:
        tsv=report(
            "results/tables/split_prefill_samples.tsv",
            category="Split-prefill",
            caption="../report/split_prefill_samples.rst",
        ),
    log:
        "logs/split_prefill_samples/table.log",
    benchmark:
        "benchmarks/split_prefill_samples.tsv"
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        models=runs_on("split_prefill"),
    script:
        "../workflow_scripts/plot_split_prefill.py"
