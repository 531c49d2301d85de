# Real-shape checkpoints: random weights with a published model's structure, for proving the real path.


rule build_realshape:
    input:
        published=lambda wc: realshape_config(wc.model),
    output:
        config="results/models/{model}/config.json",
        index="results/models/{model}/model.safetensors.index.json",
        tokenizer="results/models/{model}/tokenizer.json",
    log:
        "logs/build_realshape/{model}.log",
    benchmark:
        "benchmarks/build_realshape/{model}.tsv"
    # Scale a published config down (depth by whole periods, width, vocabulary, experts) and save it
    # as the hub stores checkpoints: sharded safetensors, index, tokenizer with the real chat template.
    wildcard_constraints:
        model=names_regex(realshape_models()),
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        spec=lambda wc: canonical(
            {
                k: v
                for k, v in config["models"][wc.model]["source"]["realshape"].items()
                if k != "config"
            }
        ),
    script:
        "../workflow_scripts/build_realshape.py"
