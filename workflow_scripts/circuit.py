# Encode–Address circuit on one model: localization, query and state transplants (rule circuit).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json

    import pandas as pd
    import torch

    from hybridlens.experiments.circuit import (
        ITEM_COLUMNS,
        SUMMARY_COLUMNS,
        localize_reference,
        summarize,
        transplant_all,
    )
    from hybridlens.models.adapter import load_model
    from hybridlens.tables import write_table
    from hybridlens.tasks import triples
    from hybridlens.validation import write_checks

    torch.set_num_threads(snakemake.threads)
    s = snakemake.params.settings
    hm = load_model(**snakemake.params.model)
    circuit, ablation, readers = localize_reference(hm, s)
    log.info(
        "encode %s, address %s, reader %s", circuit["encode"]["layers"], circuit["address"]["layers"], circuit["reader"]
    )
    rows, checks = [], {}
    if circuit["address"]["group"] is not None:
        for seed in s["seeds"]:
            items = triples(hm, seed, s["n"], s["n_pairs"], s["format"])
            rows += transplant_all(hm, items, circuit, s["batch_size"], checks)
    pd.DataFrame(ablation).to_csv(snakemake.output.ablation, index=False)
    pd.DataFrame(readers).to_csv(snakemake.output.readers, index=False)
    why = f"no Address group: no linear group precedes the reader (layer {circuit['reader']['layer']})"
    write_table(snakemake.output.rows, rows, ITEM_COLUMNS, why)
    write_table(snakemake.output.transplant, summarize(rows) if rows else [], SUMMARY_COLUMNS, why)
    with open(snakemake.output.circuit, "w") as f:
        json.dump(circuit, f, indent=1)
    # Measured here, judged by rule validate_circuit: a failed check keeps every table above.
    write_checks(snakemake.output.validation, list(checks.values()))
