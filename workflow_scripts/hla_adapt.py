# Adapt a trained Qwen3.5-architecture model to HLA and evaluate the suite before and after (rule hla_adapt).
import copy

import pandas as pd
import torch

from hybridlens.experiments.long_context import Symbols, evaluate, train
from hybridlens.models.adapter import load_model
from hybridlens.models.hla import to_hla
from hybridlens.runlog import script_log

with script_log(snakemake.log[0]) as log:
    torch.set_num_threads(snakemake.threads)
    s, a = snakemake.params.settings, snakemake.params.settings["adapt"]
    hm = load_model(**snakemake.params.model)
    sym = Symbols.for_model(hm)
    lengths = [a["length"] * m for m in s["length_multipliers"]]
    n = a["eval_n"]
    rows = [r | {"phase": "before"} for r in evaluate(hm.model, sym, lengths, n, seed=2000)]
    # Control: the same fine-tuning with the GDN mixers kept, so a gain can be told from fine-tuning alone.
    control = copy.deepcopy(hm.model)
    train(control, sym, a["length"], a["steps"], a["batch_size"], a["lr"], seed=0)
    rows += [r | {"phase": "gdn_finetuned"} for r in evaluate(control, sym, lengths, n, seed=2000)]
    del control
    # Gates start near 1 (bias gate_bias), so the converted model starts as the original.
    to_hla(hm.model, "hla", chunk=s["chunk"], bucket=s["bucket"], gate_bias=a["gate_bias"])
    rows += [r | {"phase": "converted"} for r in evaluate(hm.model, sym, lengths, n, seed=2000)]
    curve = train(hm.model, sym, a["length"], a["steps"], a["batch_size"], a["lr"], seed=0, reg=s["reg"])
    rows += [r | {"phase": "after"} for r in evaluate(hm.model, sym, lengths, n, seed=2000)]
    log.info("fine-tuned %d steps at length %d", a["steps"], a["length"])
    pd.DataFrame(curve).to_csv(snakemake.output.curve, index=False)
    pd.DataFrame(rows).assign(mode=snakemake.wildcards.model, seed=0).to_csv(snakemake.output.table, index=False)
