# Encode–Address circuit on one model: localization, query and state transplants (rule circuit).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json

    import pandas as pd
    import torch

    from hybridlens.experiments.circuit import (
        ITEM_COLUMNS,
        SUMMARY_COLUMNS,
        identity_error,
        localize_reference,
        summarize,
        transplant_all,
        triples,
    )
    from hybridlens.models.adapter import load_model
    from hybridlens.tables import write_table

    torch.set_num_threads(snakemake.threads)
    s, n_languages = snakemake.params.settings, snakemake.params.n_languages
    hm = load_model(**snakemake.params.model)
    circuit, ablation, readers = localize_reference(hm, s, n_languages)
    log.info(
        "encode %s, address %s, reader %s", circuit["encode"]["layers"], circuit["address"]["layers"], circuit["reader"]
    )
    rows = []
    if circuit["address"]["group"] is not None:
        for seed in s["seeds"]:
            items = triples(hm, seed, s["n"], s["n_pairs"], s["format"], n_languages)
            rows += transplant_all(hm, items, circuit, n_languages, s["batch_size"])
    circuit["identity_max_abs_d_change"] = identity_error(rows) if rows else None
    pd.DataFrame(ablation).to_csv(snakemake.output.ablation, index=False)
    pd.DataFrame(readers).to_csv(snakemake.output.readers, index=False)
    why = f"no Address group: no linear group precedes the reader (layer {circuit['reader']['layer']})"
    write_table(snakemake.output.rows, rows, ITEM_COLUMNS, why)
    write_table(snakemake.output.transplant, summarize(rows) if rows else [], SUMMARY_COLUMNS, why)
    # Built-in validation: an identity transplant must leave D unchanged (the rule fails otherwise).
    err = circuit["identity_max_abs_d_change"]
    tol = s["identity_tolerance"] if hm.model.dtype == torch.float32 else s["identity_tolerance_16bit"]
    if err is not None and not err <= tol:
        raise RuntimeError(
            f"identity transplant changed D by {err:.2e} > {tol} ({hm.model.dtype}): patching is not exact"
        )
    with open(snakemake.output.circuit, "w") as f:
        json.dump(circuit, f, indent=1)
