# Accuracy-by-length tables and figures (rules plot_hla and plot_hla_adapt).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import pandas as pd

    from hybridlens.plots.hla import length_table, plot_adapt, plot_length

    rows = pd.concat([pd.read_csv(f) for f in snakemake.input])
    if snakemake.rule == "plot_hla_adapt":  # one "mode" per phase of each adapted model
        rows["mode"] = rows["mode"] + ":" + rows["phase"]
    table = length_table(rows)
    table.to_csv(snakemake.output.tsv, sep="\t", index=False)
    (plot_adapt if snakemake.rule == "plot_hla_adapt" else plot_length)(table, snakemake.output.pdf)
