# Evaluate a trained toy model on held-out prompts and apply the accuracy gate (rule evaluate_toy).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json

    import torch

    from hybridlens.experiments.zoo import check_gate, evaluate_model
    from hybridlens.models.adapter import load_model

    torch.set_num_threads(snakemake.threads)
    zoo, gate = snakemake.params.zoo, snakemake.params.gate
    hm = load_model(snakemake.params.source)
    rows = evaluate_model(hm, zoo["eval_seed"], zoo["eval_n"], snakemake.params.eval_pairs, zoo["n_languages"])
    log.info("eval %s: %s", snakemake.wildcards.model, rows)
    check_gate(snakemake.wildcards.model, rows, gate, zoo["formats"])
    with open(snakemake.output.json, "w") as f:
        json.dump(
            {"model": snakemake.wildcards.model, "gate": gate, "gated_formats": zoo["formats"], "rows": rows},
            f,
            indent=1,
        )
