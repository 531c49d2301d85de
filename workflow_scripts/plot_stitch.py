# Stitching figure of one pair (rule plot_stitch).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import pandas as pd

    from hybridlens.plots.stitch import plot_stitch

    plot_stitch(pd.read_csv(snakemake.input.summary, sep="\t"), snakemake.output.pdf)
