# Split-prefill figures from its tables (rules plot_split_retention, plot_state_swap).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import pandas as pd

    from hybridlens.plots.split_prefill import plot_retention, plot_state_swap

    draw = plot_retention if snakemake.rule == "plot_split_retention" else plot_state_swap
    draw(pd.read_csv(snakemake.input.tsv, sep="\t"), snakemake.output.pdf)
