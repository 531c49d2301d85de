# Split-prefill and state-swap on one model (rule split_prefill).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import pandas as pd
    import torch

    from hybridlens.experiments.split_prefill import attribution, make_items, retention, run_items
    from hybridlens.models.adapter import load_model
    from hybridlens.tasks.vocab import PERSONAS

    torch.set_num_threads(snakemake.threads)
    s, n_languages = snakemake.params.settings, snakemake.params.n_languages
    markers = s["persona_markers"] or {p: [m] for p, m in PERSONAS.items()}
    hm = load_model(**snakemake.params.model)
    rows = []
    for seed in s["seeds"]:
        items = make_items(hm, seed, s["n"], s["n_pairs"], s["format"], n_languages)
        rows += run_items(hm, items, s["n_new"], markers, n_languages, s["batch_size"])
        log.info("seed %d: %d items under every condition", seed, len(items))
    rows = pd.DataFrame(rows)
    rows.to_csv(snakemake.output.rows, sep="\t", index=False)
    pd.DataFrame(retention(rows.to_dict("records"))).to_csv(snakemake.output.retention, sep="\t", index=False)
    pd.DataFrame(attribution(rows.to_dict("records"))).to_csv(snakemake.output.swap, sep="\t", index=False)
    first = rows[rows["seed"] == s["seeds"][0]]
    first[first["item"] < s["n_samples"]].to_csv(snakemake.output.samples, sep="\t", index=False)
