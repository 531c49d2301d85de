# Accuracy-by-length tables and figures (rules plot_hla and plot_hla_adapt).
from hybridlens.runlog import script_log

with script_log(snakemake):
    from pathlib import Path

    import pandas as pd

    from hybridlens.plots.hla import length_table, plot_adapt, plot_length, ruler_table

    evals = snakemake.input.get("evals", snakemake.input)
    rows = pd.concat([pd.read_csv(f) for f in evals])
    if snakemake.rule == "plot_hla_adapt":  # one "mode" per phase of each adapted model
        rows["mode"] = rows["mode"] + ":" + rows["phase"]
        ruler = [pd.read_csv(f).assign(model=Path(f).parent.name) for f in snakemake.input.ruler]
        ruler = pd.concat(ruler) if ruler else pd.DataFrame()
        columns = ["model", "phase", "task", "length", "score", "prompts"]
        (ruler_table(ruler) if len(ruler) else pd.DataFrame(columns=columns)).to_csv(
            snakemake.output.ruler, sep="\t", index=False
        )
    else:
        gates = pd.concat([pd.read_csv(f) for f in snakemake.input.gates])
        gates.to_csv(snakemake.output.gates, sep="\t", index=False)
    table = length_table(rows)
    table.to_csv(snakemake.output.tsv, sep="\t", index=False)
    (plot_adapt if snakemake.rule == "plot_hla_adapt" else plot_length)(table, snakemake.output.pdf)
