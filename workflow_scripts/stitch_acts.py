# Residual streams at both models' block boundaries on the fit split's prompts, one HDF5 store each (rule stitch_acts).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json

    import torch

    from hybridlens.experiments import stitch
    from hybridlens.models.adapter import load_model
    from hybridlens.store import provenance, write_store

    torch.set_num_threads(snakemake.threads)
    s, n_languages, seed = snakemake.params.settings, snakemake.params.n_languages, int(snakemake.wildcards.seed)
    models = {side: load_model(**snakemake.params.models[side]) for side in ("a", "b")}
    split = stitch.split_keys(models["a"], models["b"], seed, s["test_keys"], s["n_pairs"], n_languages)
    log.info("keys: %d fit, %d test; %d values", len(split[0]), len(split[1]), len(split[2]))
    prompts = stitch.split_prompts(split, seed, s["n_fit"], s["n_pairs"], s["format"], n_languages, "fit")
    for side, hm in models.items():
        with open(snakemake.input[f"circuit_{side}"]) as f:
            spans = stitch.blocks(json.load(f))
        data = stitch.collect(hm, prompts, spans, s["batch_size"])
        log.info("%s: blocks %s, %d token rows", hm.source, spans, len(data["prompt"]))
        store = snakemake.params.stores[getattr(snakemake.wildcards, side)]
        attrs = provenance(store["source"], store["config"], hm.tokenizer, seed, hm.model.dtype)
        write_store(snakemake.output[side], data, attrs | {"blocks": json.dumps(spans), "split": "fit"}, "stitch_acts")
