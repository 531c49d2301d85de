# The three transfers into one receiver, with controls, on the test split (rule stitch_swap).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json

    import pandas as pd
    import torch

    from hybridlens import tasks
    from hybridlens.experiments import stitch
    from hybridlens.models.adapter import load_model
    from hybridlens.store import expected, read_store, tokenizer_hash

    torch.set_num_threads(snakemake.threads)
    dictionary = tasks.module("dictionary")  # stitching runs on the dictionary task's key splits
    w, s = snakemake.wildcards, snakemake.params.settings
    seed = int(w.seed)
    models = {side: load_model(**snakemake.params.models[side]) for side in ("a", "b")}
    receiver_side = "a" if w.receiver == w.a else "b"
    donor_side = "b" if receiver_side == "a" else "a"
    receiver, donor = models[receiver_side], models[donor_side]
    want = {"kind": "stitch_maps", "seed": seed}
    for side, hm in models.items():
        m, store = getattr(w, side), snakemake.params.stores[getattr(w, side)]
        acts = expected("stitch_acts", store["source"], store["config"])
        want |= {f"{k}.{m}": acts[k] for k in ("model_source", "config_hash")}
        want[f"tokenizer_hash.{m}"] = tokenizer_hash(hm.tokenizer)
    data, attrs = read_store(snakemake.input.maps, expect=want)
    donor_store = snakemake.params.stores[getattr(w, donor_side)]
    donor_test, _ = read_store(
        snakemake.input.donor_test, expect=expected("stitch_acts", donor_store["source"], donor_store["config"], seed)
    )
    spans = {m: {k: tuple(v) for k, v in b.items()} for m, b in json.loads(attrs["spans"]).items()}
    donor_name = getattr(w, donor_side)
    maps = {
        name: stitch.RidgeMap(
            *(data[f"{w.receiver}.{name}.{part}"] for part in ("mean_in", "mean_out", "weight")), lam=0.0, r2=0.0
        )
        for name in json.loads(attrs["map_names"])
    }
    means = {k: data[f"{w.receiver}.mean_write.{k}"] for k in json.loads(attrs["mean_names"])}
    split = dictionary.split_keys(models["a"], models["b"], seed, s["test_keys"], s["n_pairs"])
    prompts = dictionary.run_prompts(split, seed, s, "test")
    both = {"receiver": spans[w.receiver], "donor": spans[donor_name]}
    # The donor's final-token writes on the test prompts are in its test store already (rule stitch_acts).
    writes = stitch.final_block_writes(donor_test, both["donor"]["address"])
    pairs = dictionary.donor_host(prompts, seed)  # the donors are the test prompts, in order
    rows = stitch.swap_rows(receiver, donor, both, maps, means, pairs, seed, s["batch_size"], writes)
    table = pd.DataFrame(rows).assign(receiver=w.receiver, donor=donor_name)
    log.info("%s", table.groupby(["transfer", "condition"])[["correct", "redirect"]].mean())
    table.to_csv(snakemake.output.rows, index=False)
