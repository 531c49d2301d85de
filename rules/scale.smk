# Scale sweep: one job per Qwen3.5 size (registry resources), then figures across sizes.


rule scale:
    # Readers, per-group removal profile, group transplants, chain analysis and verdict for one size.
    input:
        model_input,
        user_items=[PLAN.scale_user_task["file"]] if PLAN.scale_user_task else [],
    output:
        summary="results/scale/{model}/summary.json",
        profile="results/scale/{model}/profile.csv",
        transplant="results/scale/{model}/transplant.csv",
        blocking="results/scale/{model}/blocking.csv",
        rows="results/scale/{model}/items.csv.gz",
    log:
        "logs/scale/{model}.log",
    benchmark:
        "benchmarks/scale/{model}.tsv"
    conda:
        "../environment.yml"
    threads: res("cpus", 1)
    resources:
        mem_mb=res("mem_mb", 2000),
        runtime=res("runtime", 20),
        gpu=res("gpus", 0),
    params:
        model=model_params,
        settings=canonical({k: v for k, v in config["scale"].items() if k != "models"}),
        user_task=PLAN.scale_user_task,
    script:
        "../workflow_scripts/scale.py"


rule scale_tables:
    # One table per kind across sizes, smallest first.
    input:
        summary=scale_files("summary.json"),
        profile=scale_files("profile.csv"),
        transplant=scale_files("transplant.csv"),
        blocking=scale_files("blocking.csv"),
    output:
        sizes="results/scale/sizes.tsv",
        profile="results/scale/profile.tsv",
        transplant="results/scale/transplant.tsv",
        blocking="results/scale/blocking.tsv",
    log:
        "logs/scale/tables.log",
    conda:
        "../environment.yml"
    threads: 1
    script:
        "../workflow_scripts/scale_tables.py"


rule plot_scale:
    # Each scale figure is its own target: heatmaps, the chain of the largest size, groups needed.
    input:
        rules.scale_tables.output,
    output:
        pdf=report("results/figures/scale_{figure}.pdf", category="Scale sweep"),
    log:
        "logs/plot_scale/{figure}.log",
    wildcard_constraints:
        figure="|".join(SCALE_FIGURES),
    conda:
        "../environment.yml"
    threads: 1
    script:
        "../workflow_scripts/plot_scale.py"
