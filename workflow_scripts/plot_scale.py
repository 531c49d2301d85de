# One scale figure from the tables across sizes (rule plot_scale).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import pandas as pd

    from hybridlens.plots.scale import FIGURES

    tables = {
        name: pd.read_csv(path, sep="\t")
        for name, path in zip(("sizes", "profile", "transplant", "blocking"), snakemake.input, strict=True)
    }
    FIGURES[snakemake.wildcards.figure](tables, snakemake.output.pdf)
