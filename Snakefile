# hybridlens: causal experiments on hybrid language models. `snakemake --cores all` builds every
# figure for the configured models; `snakemake results/figures/NAME.pdf` rebuilds one.


include: "rules/common.smk"
include: "rules/zoo.smk"
include: "rules/realshape.smk"
include: "rules/extract.smk"
include: "rules/split_prefill.smk"
include: "rules/circuit.smk"
include: "rules/scale.smk"
include: "rules/stitch.smk"
include: "rules/hla.smk"
include: "rules/summary.smk"


report: "report/workflow.rst"


rule all:
    default_target: True
    input:
        final_outputs(),
