# Held-out evaluation of every toy of the zoo as one table (rule zoo_tables).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import json
    from pathlib import Path

    from hybridlens.plots.zoo import eval_table

    evals = {name: json.loads(Path(f).read_text()) for name, f in snakemake.params.members.items()}
    eval_table(evals).to_csv(snakemake.output.tsv, sep="\t", index=False)
