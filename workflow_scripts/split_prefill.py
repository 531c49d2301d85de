# Split-prefill and state-swap on one model (rule split_prefill).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import pandas as pd
    import torch

    from hybridlens import tasks
    from hybridlens.experiments.split_prefill import attribution, retention, run_items, samples
    from hybridlens.models.adapter import load_model

    torch.set_num_threads(snakemake.threads)
    s, task = snakemake.params.settings, snakemake.params.task
    user, style = snakemake.params.user_task, tasks.module("style")
    hm = load_model(**snakemake.params.model)
    if user and task["lexicon"] == "auto":  # a user's items are real text
        task = task | {"lexicon": "text"}
    lexicon = style.lexicon(hm, task)
    n_new = s["n_new"] or lexicon.n_new
    rows = []
    for seed in s["seeds"][:1] if user else s["seeds"]:  # a user's items are one set, not drawn per seed
        if user:
            loaded, counts = tasks.items_of(hm, user)
            items = style.from_items(loaded)
        else:
            items, counts = tasks.items_of(hm, task | {"seed": seed})
        rows += run_items(hm, items, n_new, lexicon, seed, s["batch_size"])
        log.info("seed %d: %d items (%s lexicon, %s) under every condition", seed, len(items), lexicon.kind, counts)
    rows = pd.DataFrame(rows)
    rows.to_csv(snakemake.output.rows, sep="\t", index=False)
    records = rows.to_dict("records")
    pd.DataFrame(retention(records)).to_csv(snakemake.output.retention, sep="\t", index=False)
    pd.DataFrame(attribution(records)).to_csv(snakemake.output.swap, sep="\t", index=False)
    pd.DataFrame(samples(records, s["n_samples"])).to_csv(snakemake.output.samples, sep="\t", index=False)
