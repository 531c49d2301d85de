# Split-prefill figures and the sample table (rules plot_split_retention, plot_state_swap, split_prefill_samples).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import pandas as pd

    from hybridlens.plots.split_prefill import plot_retention, plot_state_swap

    models = snakemake.params.models
    table = pd.concat([pd.read_csv(f, sep="\t").assign(model=m) for m, f in zip(models, snakemake.input, strict=True)])
    table.to_csv(snakemake.output.tsv, sep="\t", index=False)
    if snakemake.rule == "plot_split_retention":
        plot_retention(table, snakemake.output.pdf)
    elif snakemake.rule == "plot_state_swap":
        plot_state_swap(table, snakemake.output.pdf)
