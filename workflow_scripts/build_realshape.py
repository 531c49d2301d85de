# Write a random-weight checkpoint with a published model's structure (rule build_realshape).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    from pathlib import Path

    from hybridlens.models.realshape import build_realshape

    model, tokenizer = build_realshape(
        snakemake.input.published, Path(snakemake.output.config).parent, **snakemake.params.spec
    )
    n = sum(p.numel() for p in model.parameters())
    log.info(
        "%s: %s, %.2f M parameters, %d tokens", snakemake.wildcards.model, type(model).__name__, n / 1e6, len(tokenizer)
    )
