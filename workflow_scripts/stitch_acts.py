# Residual streams at both models' block boundaries on the fit and the test split's prompts, one HDF5 store each
# per model and split (rule stitch_acts).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json

    import torch

    from hybridlens import tasks
    from hybridlens.experiments import stitch
    from hybridlens.models.adapter import load_model
    from hybridlens.store import provenance, write_store

    torch.set_num_threads(snakemake.threads)
    dictionary = tasks.module("dictionary")  # stitching runs on the dictionary task's key splits
    s, seed = snakemake.params.settings, int(snakemake.wildcards.seed)
    models = {side: load_model(**snakemake.params.models[side]) for side in ("a", "b")}
    split = dictionary.split_keys(models["a"], models["b"], seed, s["test_keys"], s["n_pairs"])
    log.info("keys: %d fit, %d test; %d values", len(split[0]), len(split[1]), len(split[2]))
    for side, hm in models.items():
        with open(snakemake.input[f"circuit_{side}"]) as f:
            spans = stitch.blocks(json.load(f))
        store = snakemake.params.stores[getattr(snakemake.wildcards, side)]
        attrs = provenance(store["source"], store["config"], hm.tokenizer, seed, hm.model.dtype)
        for part, output in (("fit", side), ("test", f"{side}_test")):
            prompts = dictionary.run_prompts(split, seed, s, part)
            data = stitch.collect(hm, prompts, spans, s["batch_size"])
            log.info("%s, %s prompts: blocks %s, %d token rows", hm.source, part, spans, len(data["prompt"]))
            meta = attrs | {"blocks": json.dumps(spans), "split": part}
            write_store(snakemake.output[output], data, meta, "stitch_acts")
