# Evaluate one from-scratch long-context model on the suite at every length (rule hla_scratch).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    from pathlib import Path

    import pandas as pd
    import torch

    from hybridlens.experiments.long_context import evaluate, load_shipped, router_gates

    torch.set_num_threads(snakemake.threads)
    t, e = snakemake.params.training, snakemake.params.evaluation
    model, sym = load_shipped(Path(snakemake.input[0]).parent, t, snakemake.params.device)
    lengths = [t["train_length"] * m for m in e["length_multipliers"]]
    rows = evaluate(model, sym, lengths, e["eval_n"], seed=1000 + t["seed"])
    router = t["router"] if t["mode"] == "hla" else ""
    pd.DataFrame(rows).assign(mode=t["mode"], seed=t["seed"], router=router).to_csv(snakemake.output.table, index=False)
    gates = pd.DataFrame(router_gates(model, sym, lengths, 16, seed=2000 + t["seed"]))
    columns = ["layer", "length", "chunk", "gate", "count"]
    gates.reindex(columns=columns).assign(mode=t["mode"], seed=t["seed"]).to_csv(snakemake.output.gates, index=False)
    log.info("evaluated %s seed %d at lengths %s", t["mode"], t["seed"], lengths)
