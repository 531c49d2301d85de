# Extract activations for one (model, prompt set) into HDF5, plus the logit-lens table.
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json

    import pandas as pd
    import torch

    from hybridlens.experiments.extract import extract, logit_lens
    from hybridlens.models.adapter import load_model
    from hybridlens.store import provenance, write_store
    from hybridlens.tasks import items_of

    torch.set_num_threads(snakemake.threads)
    task, cfg = snakemake.params.task, snakemake.params.extract
    hm = load_model(**snakemake.params.model)
    prompts, counts = items_of(hm, task)
    log.info("task %s: %s", snakemake.wildcards.task, counts)
    sites = [f"layers.{layer}.{s}" for layer in range(hm.n_layers) for s in cfg["sites"]]
    sites += [f"layers.{layer}.layer_out" for layer in range(hm.n_layers)]
    data = extract(hm, prompts, list(dict.fromkeys(sites)), cfg["position_set"], cfg["batch_size"])
    pd.DataFrame(logit_lens(hm, data)).to_csv(snakemake.output.lens, sep="\t", index=False)
    keep = {k: v for k, v in data.items() if not k.endswith("layer_out") or "layer_out" in cfg["sites"]}
    attrs = provenance(hm.source, snakemake.params.config_hash, hm.tokenizer, task.get("seed", 0), hm.model.dtype)
    attrs |= {"kinds": ",".join(hm.kinds), "task_counts": json.dumps(counts)}
    write_store(snakemake.output.h5, keep, attrs, "activations", cfg["dtype"])
    log.info("stored %d datasets for %d prompts", len(keep), len(prompts))
