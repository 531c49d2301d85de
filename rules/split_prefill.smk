# Split-prefill and state-swap: what the KV cache and the recurrent state each carry.


rule split_prefill:
    # Every cache condition on every item of every seed; per-item rows, retention, swap table, samples.
    input:
        model_input,
        user_items=[PLAN.split_user_task["file"]] if PLAN.split_user_task else [],
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
        task=canonical(PLAN.split_task),
        user_task=PLAN.split_user_task,
    script:
        "../workflow_scripts/split_prefill.py"


rule split_prefill_tables:
    # Across models: retention per condition and property, the state-swap attribution matrix, and sample
    # generations per condition (shown in the report).
    input:
        retention=split_files("retention"),
        swap=split_files("swap"),
        samples=split_files("samples"),
    output:
        retention="results/tables/split_prefill_retention.tsv",
        swap="results/tables/state_swap.tsv",
        samples=report(
            "results/tables/split_prefill_samples.tsv",
            category="Split-prefill",
            caption="../report/split_prefill_samples.rst",
        ),
    log:
        "logs/split_prefill_tables/tables.log",
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/split_prefill_tables.py"


rule plot_split_retention:
    # Retention of retrieval, language and persona per condition and model.
    input:
        tsv=rules.split_prefill_tables.output.retention,
    output:
        pdf=report(
            "results/figures/split_prefill_retention.pdf", category="Split-prefill"
        ),
    log:
        "logs/plot_split_retention/plot.log",
    benchmark:
        "benchmarks/plot_split_retention.tsv"
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/plot_split_prefill.py"


rule plot_state_swap:
    # The state-swap attribution matrix per model: content source x style source.
    input:
        tsv=rules.split_prefill_tables.output.swap,
    output:
        pdf=report("results/figures/state_swap.pdf", category="Split-prefill"),
    log:
        "logs/plot_state_swap/plot.log",
    benchmark:
        "benchmarks/plot_state_swap.tsv"
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/plot_split_prefill.py"
