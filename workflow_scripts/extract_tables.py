# One task's logit-lens summary across models (rule extract_tables).
from hybridlens.runlog import script_log

with script_log(snakemake):
    from pathlib import Path

    import pandas as pd

    from hybridlens.plots.lens import lens_summary

    # lens files are results/activations/{model}/{task}.lens.tsv
    frames = {Path(f).parent.name: pd.read_csv(f, sep="\t") for f in snakemake.input.lens}
    lens_summary(frames).to_csv(snakemake.output.tsv, sep="\t", index=False)
