# Circuit figure from the per-model tables (rule plot_circuit).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import json

    import pandas as pd

    from hybridlens.plots.circuit import plot_circuit

    models = snakemake.params.models
    circuits = {}
    for m, f in zip(models, snakemake.input.circuit, strict=True):
        with open(f) as fh:
            circuits[m] = json.load(fh)
    ablation = pd.concat(
        [pd.read_csv(f).assign(model=m) for m, f in zip(models, snakemake.input.ablation, strict=True)]
    )
    transplant = pd.concat(
        [pd.read_csv(f).assign(model=m) for m, f in zip(models, snakemake.input.transplant, strict=True)]
    )
    transplant.to_csv(snakemake.output.tsv, sep="\t", index=False)
    verdicts = []
    for m, f in zip(models, snakemake.input.validated, strict=True):
        with open(f) as fh:
            verdicts += [{"model": m, **v} for v in json.load(fh)]
    columns = ["model", "name", "a", "b", "dtype", "max_abs_diff", "magnitude", "n", "ulps", "allowed_ulps"]
    pd.DataFrame(verdicts, columns=[*columns, "tolerance", "passed", "key"]).to_csv(
        snakemake.output.validations, sep="\t", index=False
    )
    plot_circuit(circuits, ablation, transplant, snakemake.output.pdf)
