# Logit-lens figure from the per-model lens tables (rule plot_logit_lens).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import pandas as pd

    from hybridlens.plots.lens import lens_summary, plot_logit_lens

    frames = {m: pd.read_csv(f, sep="\t") for m, f in zip(snakemake.params.models, snakemake.input.lens, strict=True)}
    summary = lens_summary(frames)
    summary.to_csv(snakemake.output.tsv, sep="\t", index=False)
    plot_logit_lens(summary, snakemake.output.pdf)
