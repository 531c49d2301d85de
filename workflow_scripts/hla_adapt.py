# Adapt a trained Qwen3.5-architecture model to HLA and evaluate before and after (rule hla_adapt).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import pandas as pd
    import torch

    from hybridlens.experiments.long_context import adapt
    from hybridlens.models.adapter import load_model
    from hybridlens.tasks import longbench

    torch.set_num_threads(snakemake.threads)
    s = snakemake.params.settings
    lb = s.get("longbench", {})
    # Read (and check) LongBench-V2 first, so a bad path fails in seconds, not after training.
    items = longbench.load(lb["path"], lb.get("n", 0)) if lb.get("path") else []
    hm = load_model(**snakemake.params.model)
    rows, curve, lb_rows, ruler_rows = adapt(hm, s, items, lb.get("max_tokens", 32000), log)
    pd.DataFrame(curve).to_csv(snakemake.output.curve, index=False)
    columns = ["phase", "_id", "difficulty", "length", "tokens", "answer", "pred", "correct"]
    pd.DataFrame(lb_rows, columns=columns).to_csv(snakemake.output.longbench, index=False)
    columns = ["phase", "task", "length", "tokens", "score", "prediction"]
    pd.DataFrame(ruler_rows, columns=columns).to_csv(snakemake.output.ruler, index=False)
    table = pd.DataFrame(rows).assign(mode=snakemake.wildcards.model, seed=0)
    # The router of the converted phases; the GDN phases have none.
    table["router"] = table["phase"].map(lambda phase: s["router"] if phase in ("converted", "after") else "")
    table.to_csv(snakemake.output.table, index=False)
