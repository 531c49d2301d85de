# Cross-architecture stitching: ridge maps between two models' hidden spaces, blocks swapped through them.


rule stitch_acts:
    # The residual stream at both models' block boundaries on the fit and the test split's prompts.
    input:
        unpack(stitch_inputs),
    output:
        a="results/stitch/{a}--{b}/acts/{a}_s{seed}.h5",
        b="results/stitch/{a}--{b}/acts/{b}_s{seed}.h5",
        a_test="results/stitch/{a}--{b}/acts/{a}_s{seed}_test.h5",
        b_test="results/stitch/{a}--{b}/acts/{b}_s{seed}_test.h5",
    log:
        "logs/stitch/{a}--{b}/acts_s{seed}.log",
    benchmark:
        "benchmarks/stitch/{a}--{b}/acts_s{seed}.tsv"
    conda:
        "../environment.yml"
    threads: pair_res("cpus", 1)
    resources:
        mem_mb=pair_res("mem_mb", 2000),
        runtime=pair_res("runtime", 20),
        gpu=pair_res("gpus", 0),
    params:
        models=pair_params,
        stores=pair_stores,
        settings=stitch_settings(),
    script:
        "../workflow_scripts/stitch_acts.py"


rule stitch_fit:
    # Every map of both directions, fitted once on the fit stores and reused by both swap jobs; scored on
    # the test stores too.
    input:
        a="results/stitch/{a}--{b}/acts/{a}_s{seed}.h5",
        b="results/stitch/{a}--{b}/acts/{b}_s{seed}.h5",
        a_test="results/stitch/{a}--{b}/acts/{a}_s{seed}_test.h5",
        b_test="results/stitch/{a}--{b}/acts/{b}_s{seed}_test.h5",
    output:
        maps="results/stitch/{a}--{b}/maps_s{seed}.h5",
        fit="results/stitch/{a}--{b}/fit_s{seed}.json",
    log:
        "logs/stitch/{a}--{b}/fit_s{seed}.log",
    benchmark:
        "benchmarks/stitch/{a}--{b}/fit_s{seed}.tsv"
    conda:
        "../environment.yml"
    threads: 1
    params:
        stores=pair_stores,
        lambdas=config["stitch"]["lambdas"],
    script:
        "../workflow_scripts/stitch_fit.py"


rule stitch_swap:
    # The three transfers into one receiver, with controls, on the test split's prompts.
    input:
        unpack(stitch_inputs),
        maps="results/stitch/{a}--{b}/maps_s{seed}.h5",
        donor_test=lambda w: (
            f"results/stitch/{w.a}--{w.b}/acts/"
            f"{w.b if w.receiver == w.a else w.a}_s{w.seed}_test.h5"
        ),
    output:
        rows="results/stitch/{a}--{b}/items_{receiver}_s{seed}.csv",
    log:
        "logs/stitch/{a}--{b}/swap_{receiver}_s{seed}.log",
    benchmark:
        "benchmarks/stitch/{a}--{b}/swap_{receiver}_s{seed}.tsv"
    conda:
        "../environment.yml"
    threads: pair_res("cpus", 1)
    resources:
        mem_mb=pair_res("mem_mb", 2000),
        runtime=pair_res("runtime", 20),
        gpu=pair_res("gpus", 0),
    params:
        models=pair_params,
        stores=pair_stores,
        settings=stitch_settings(),
    script:
        "../workflow_scripts/stitch_swap.py"


rule stitch_tables:
    # Rates with bootstrap intervals per direction, transfer and condition, the maps' fit report, and what
    # each model's Address write at the final token holds.
    input:
        rows=lambda w: expand(
            "results/stitch/{a}--{b}/items_{receiver}_s{seed}.csv",
            a=w.a,
            b=w.b,
            receiver=[w.a, w.b],
            seed=config["stitch"]["seeds"],
        ),
        fits=lambda w: expand(
            "results/stitch/{a}--{b}/fit_s{seed}.json",
            a=w.a,
            b=w.b,
            seed=config["stitch"]["seeds"],
        ),
    output:
        summary="results/stitch/{a}--{b}/summary.tsv",
        fit="results/stitch/{a}--{b}/fit.tsv",
        query_content="results/stitch/{a}--{b}/query_content.tsv",
    log:
        "logs/stitch/{a}--{b}/tables.log",
    conda:
        "../environment.yml"
    threads: 1
    params:
        models=lambda w: [w.a, w.b],
    script:
        "../workflow_scripts/stitch_tables.py"


rule plot_stitch:
    # Accuracy restored per direction and transfer, with the controls and intervals.
    input:
        summary="results/stitch/{a}--{b}/summary.tsv",
    output:
        pdf=report("results/figures/stitch_{a}--{b}.pdf", category="Stitching"),
    log:
        "logs/plot_stitch/{a}--{b}.log",
    conda:
        "../environment.yml"
    threads: 1
    script:
        "../workflow_scripts/plot_stitch.py"
