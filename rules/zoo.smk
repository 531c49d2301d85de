# The toy zoo: train each toy model of the registry, gate it on held-out retrieval, ship it, plot the zoo.


rule train_toy:
    input:
        unpack(parent_input),
    output:
        config="results/models/{model}/config.json",
        weights="results/models/{model}/model.safetensors",
        tokenizer="results/models/{model}/tokenizer.json",
        curve="results/models/{model}/curve.csv",
    log:
        "logs/train_toy/{model}.log",
    benchmark:
        "benchmarks/train_toy/{model}.tsv"
    # Build a toy model of the configured family and train it on the retrieval tasks.
    wildcard_constraints:
        model=names_regex(toy_models()),
    # Training gates every experiment on its model: start it before the independent HLA jobs, and
    # the toys with the most experiments waiting first.
    priority: training_priority
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=res("runtime", 30),
    params:
        training=training_params,
    script:
        "../workflow_scripts/train_toy.py"


rule evaluate_toy:
    input:
        config=rules.train_toy.output.config,
        weights=rules.train_toy.output.weights,
    output:
        json="results/models/{model}/eval.json",
    log:
        "logs/evaluate_toy/{model}.log",
    benchmark:
        "benchmarks/evaluate_toy/{model}.tsv"
    # Held-out retrieval / language / persona; fails below the accuracy gate.
    wildcard_constraints:
        model=names_regex(toy_models()),
    priority: training_priority
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        source=lambda wc: f"results/models/{wc.model}",
        zoo=canonical(config["zoo"]),
        gate=lambda wc: toy_of(wc.model).gate,
        formats=lambda wc: trained_formats(wc.model),
        eval_pairs=eval_pairs,
    script:
        "../workflow_scripts/evaluate_toy.py"


rule zoo_tables:
    # Held-out retrieval, language and persona fidelity of every toy, with intervals (no model needed).
    input:
        evals=[f"{d}/eval.json" for d in zoo_members().values()],
    output:
        tsv="results/tables/zoo_eval.tsv",
    log:
        "logs/zoo_tables/tables.log",
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        members={name: f"{d}/eval.json" for name, d in zoo_members().items()},
    script:
        "../workflow_scripts/zoo_tables.py"


rule plot_zoo:
    # Training curves and the evaluation table of the whole zoo.
    input:
        tsv=rules.zoo_tables.output.tsv,
        curves=[f"{d}/curve.csv" for d in zoo_members().values()],
    output:
        curves=report("results/figures/zoo_training.pdf", category="Toy zoo"),
        table=report("results/figures/zoo_eval.pdf", category="Toy zoo"),
    log:
        "logs/plot_zoo/plot_zoo.log",
    benchmark:
        "benchmarks/plot_zoo/plot_zoo.tsv"
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        curves={name: f"{d}/curve.csv" for name, d in zoo_members().items()},
    script:
        "../workflow_scripts/plot_zoo.py"


rule ship_toy:
    input:
        config=rules.train_toy.output.config,
        weights=rules.train_toy.output.weights,
        tokenizer=rules.train_toy.output.tokenizer,
        curve=rules.train_toy.output.curve,
        eval=rules.evaluate_toy.output.json,
    output:
        manifest="zoo/{model}/manifest.json",
    log:
        "logs/ship_toy/{model}.log",
    # A trained, gated toy as a checkpoint to commit: its files, the training spec it was trained from,
    # and a manifest of their sha256 with the commit, library versions and machine it was trained on.
    wildcard_constraints:
        model=names_regex(toy_models()),
    conda:
        "../environment.yml"
    threads: 1
    params:
        training=training_params,
        name=lambda wc: wc.model,
        margin=config["zoo"]["margin"],
    script:
        "../workflow_scripts/ship_toy.py"


rule ship_zoo:
    # `make zoo`: every toy of the config trained, gated and copied to zoo/, with the from-scratch HLA models.
    input:
        expand("zoo/{model}/manifest.json", model=toy_models()),
        []
        if config["hla"].get("source")
        else expand(
            "zoo/hla/{mode}_s{seed}/manifest.json",
            mode=config["hla"]["modes"],
            seed=config["hla"]["seeds"],
        ),
