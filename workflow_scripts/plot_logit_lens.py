# Logit-lens figure from its table (rule plot_logit_lens).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import pandas as pd

    from hybridlens.plots.lens import plot_logit_lens

    plot_logit_lens(pd.read_csv(snakemake.input.tsv, sep="\t"), snakemake.output.pdf)
