# One from-scratch long-context model: train, then evaluate the suite at every length (rule hla_scratch).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import pandas as pd
    import torch

    from hybridlens.experiments.long_context import Symbols, build, evaluate, train

    torch.set_num_threads(snakemake.threads)
    s, mode, seed = snakemake.params.settings, snakemake.wildcards.mode, int(snakemake.wildcards.seed)
    sym = Symbols.synthetic(s["symbols"], s["symbols"], 16)
    model = build(mode, sym, s["hidden"], s["layers"], s["heads"], seed, s["chunk"], s["bucket"]).to(s["device"])
    log.info("%s seed %d: %d parameters", mode, seed, sum(p.numel() for p in model.parameters()))
    curve = train(model, sym, s["train_length"], s["steps"], s["batch_size"], s["lr"], seed, s["reg"])
    pd.DataFrame(curve).to_csv(snakemake.output.curve, index=False)
    lengths = [s["train_length"] * m for m in s["length_multipliers"]]
    rows = evaluate(model, sym, lengths, s["eval_n"], seed=1000 + seed)
    pd.DataFrame(rows).assign(mode=mode, seed=seed).to_csv(snakemake.output.table, index=False)
