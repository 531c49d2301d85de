# Evaluate a trained toy model on held-out prompts and apply the accuracy gate (rule evaluate_toy).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json

    import torch

    from hybridlens.models.adapter import load_model
    from hybridlens.tasks.retrieval import FORMATS
    from hybridlens.zoo import check_gate, evaluate_model

    torch.set_num_threads(snakemake.threads)
    zoo, gate, gated = snakemake.params.zoo, snakemake.params.gate, snakemake.params.formats
    hm = load_model(snakemake.params.source)
    formats = list(dict.fromkeys([*FORMATS, *gated]))
    rows = evaluate_model(hm, zoo["eval_seed"], zoo["eval_n"], snakemake.params.eval_pairs, formats)
    log.info("eval %s: %s", snakemake.wildcards.model, rows)
    check_gate(snakemake.wildcards.model, rows, gate, gated)
    with open(snakemake.output.json, "w") as f:
        json.dump(
            {"model": snakemake.wildcards.model, "gate": gate, "gated_formats": gated, "rows": rows},
            f,
            indent=1,
        )
