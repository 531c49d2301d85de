# Zoo figures from the training curves and the evaluation table (rule plot_zoo).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import pandas as pd

    from hybridlens.plots import use_models
    from hybridlens.plots.zoo import plot_eval, plot_training

    use_models(snakemake.config["models"])  # every figure colours a model the same way
    curves = {name: pd.read_csv(f) for name, f in snakemake.params.curves.items()}
    plot_training(curves, snakemake.output.curves)
    plot_eval(pd.read_csv(snakemake.input.tsv, sep="\t"), snakemake.output.table)
