# Scale sweep on one model: readers, removal profile, group transplants, blocking, verdict (rule scale).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json

    import pandas as pd
    import torch

    from hybridlens import tasks
    from hybridlens.experiments import scale
    from hybridlens.experiments.circuit import localize_reference
    from hybridlens.models.adapter import load_model
    from hybridlens.tasks import triples
    from hybridlens.tasks.items import donor_triples

    torch.set_num_threads(snakemake.threads)
    s = snakemake.params.settings
    hm = load_model(**snakemake.params.model)
    circuit, _, reader_rows = localize_reference(hm, s)
    main = circuit["reader"]
    readers = scale.readers(reader_rows, main, s["reader_min"])
    log.info("groups %s, readers %s", hm.groups, readers)
    if snakemake.params.user_task:  # a user's items, each with its donor
        items = donor_triples(tasks.items_of(hm, snakemake.params.user_task)[0])
    else:
        items = [t for seed in s["seeds"] for t in triples(hm, seed, s["n"], s["n_pairs"], s["format"])]
    profile, transplant, blocking = scale.sweep(hm, items, readers, main, s["batch_size"])
    transplant_summary = scale.summarize_transplant(transplant)
    summary = {
        "parameters": sum(p.numel() for p in hm.model.parameters()),
        "layers": hm.n_layers,
        "hidden_size": hm.d_model,
        "groups": hm.groups,
        "main_reader": f"r{main['layer']}.{main['head']}",
        "intact_accuracy": circuit["intact"]["accuracy"],
        "reader_attention": {f"r{r['layer']}.{r['head']}": r["attention_to_target"] for r in readers},
        **scale.verdict(transplant_summary, readers, s["redirect"]),
    }
    log.info("verdict %s", summary)
    pd.DataFrame(scale.summarize_profile(profile)).to_csv(snakemake.output.profile, index=False)
    pd.DataFrame(transplant_summary).to_csv(snakemake.output.transplant, index=False)
    pd.DataFrame(scale.summarize_blocking(blocking), columns=scale.BLOCKING_COLUMNS).to_csv(
        snakemake.output.blocking, index=False
    )
    pd.concat(
        [pd.DataFrame(profile).assign(kind="removal"), pd.DataFrame(transplant).assign(kind="transplant")]
    ).to_csv(snakemake.output.rows, index=False)
    with open(snakemake.output.summary, "w") as f:
        json.dump(summary, f, indent=1)
