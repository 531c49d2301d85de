# Circuit figure from the circuit's tables (rule plot_circuit).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import pandas as pd

    from hybridlens.plots.circuit import plot_circuit

    localization, ablation, transplant = (pd.read_csv(f, sep="\t") for f in snakemake.input)
    plot_circuit(localization, ablation, transplant, snakemake.output.pdf)
