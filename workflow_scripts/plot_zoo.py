# Zoo figures from the training curves and evaluation files (rule plot_zoo).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import json
    from pathlib import Path

    import pandas as pd

    from hybridlens.plots import use_models
    from hybridlens.plots.zoo import eval_table, plot_eval, plot_training

    use_models(snakemake.config["models"])  # every figure colours a model the same way

    names = snakemake.params.names
    curves = {n: pd.read_csv(f) for n, f in zip(names, snakemake.input.curves, strict=True)}
    evals = {n: json.loads(Path(f).read_text()) for n, f in zip(names, snakemake.input.evals, strict=True)}
    table = eval_table(evals)
    table.to_csv(snakemake.output.tsv, sep="\t", index=False)
    plot_training(curves, snakemake.output.curves)
    plot_eval(table, snakemake.output.table)
