# Split-prefill's tables across models: retention, the state-swap matrix, sample generations
# (rule split_prefill_tables).
from hybridlens.runlog import script_log

with script_log(snakemake):
    from hybridlens.tables import gather

    for kind in ("retention", "swap", "samples"):
        gather(snakemake.input[kind], sep="\t").to_csv(snakemake.output[kind], sep="\t", index=False)
