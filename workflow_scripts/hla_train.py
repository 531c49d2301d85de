# Train one from-scratch long-context model and save its weights (rule hla_train).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json
    import time
    from pathlib import Path

    import pandas as pd
    import torch

    from hybridlens.experiments.long_context import build_from_spec, save_model, train
    from hybridlens.store import git_commit, machine

    torch.set_num_threads(snakemake.threads)
    t = snakemake.params.training
    model, sym = build_from_spec(t, snakemake.params.device)
    log.info("%s seed %d: %d parameters", t["mode"], t["seed"], sum(p.numel() for p in model.parameters()))
    start = time.perf_counter()
    args = t["train_length"], t["steps"], t["batch_size"], t["lr"], t["seed"]
    curve = train(model, sym, *args, reg=t["reg"], reg_warmup=t["reg_warmup"])
    seconds = round(time.perf_counter() - start, 1)
    out_dir = Path(snakemake.output.weights).parent
    pd.DataFrame(curve).to_csv(snakemake.output.curve, index=False)
    trained_on = machine() | {"commit": git_commit(), "seconds": seconds, "steps": t["steps"]}
    (out_dir / "trained_on.json").write_text(json.dumps(trained_on, indent=1) + "\n")
    save_model(model, snakemake.output.weights)
