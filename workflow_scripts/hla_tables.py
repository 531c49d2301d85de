# HLA's tables: accuracy by length across the from-scratch models and their router gates (rule hla_tables),
# or across the adapted models' phases with RULER's scores (rule hla_adapt_tables).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import pandas as pd

    from hybridlens.plots.hla import length_table, ruler_table
    from hybridlens.tables import gather

    rows = pd.concat([pd.read_csv(f) for f in snakemake.input.evals])
    if snakemake.rule == "hla_adapt_tables":  # one "mode" per phase of each adapted model
        rows["mode"] = rows["mode"] + ":" + rows["phase"]
        ruler = gather(snakemake.input.ruler) if snakemake.input.ruler else pd.DataFrame()
        columns = ["model", "phase", "task", "length", "score", "prompts"]
        (ruler_table(ruler) if len(ruler) else pd.DataFrame(columns=columns)).to_csv(
            snakemake.output.ruler, sep="\t", index=False
        )
    else:
        pd.concat([pd.read_csv(f) for f in snakemake.input.gates]).to_csv(snakemake.output.gates, sep="\t", index=False)
    length_table(rows).to_csv(snakemake.output.tsv, sep="\t", index=False)
