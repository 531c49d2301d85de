# Circuit figure from the per-model tables (rule plot_circuit).
from hybridlens.runlog import script_log


def read(path, model):
    try:
        return pd.read_csv(path).assign(model=model)
    except pd.errors.EmptyDataError:  # a model without an Address block has no transplant rows
        return pd.DataFrame({"model": []})


with script_log(snakemake):
    import json

    import pandas as pd

    from hybridlens.plots.circuit import plot_circuit

    models = snakemake.params.models
    circuits = {}
    for m, f in zip(models, snakemake.input.circuit, strict=True):
        with open(f) as fh:
            circuits[m] = json.load(fh)
    ablation = pd.concat([read(f, m) for m, f in zip(models, snakemake.input.ablation, strict=True)])
    transplant = pd.concat([read(f, m) for m, f in zip(models, snakemake.input.transplant, strict=True)])
    transplant.to_csv(snakemake.output.tsv, sep="\t", index=False)
    plot_circuit(circuits, ablation, transplant, snakemake.output.pdf)
