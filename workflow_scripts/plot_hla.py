# Accuracy-by-length figures from HLA's tables (rules plot_hla and plot_hla_adapt).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import pandas as pd

    from hybridlens.plots.hla import plot_adapt, plot_length

    draw = plot_adapt if snakemake.rule == "plot_hla_adapt" else plot_length
    draw(pd.read_csv(snakemake.input.tsv, sep="\t"), snakemake.output.pdf)
