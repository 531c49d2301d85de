# A study's claims with their numbers filled from the run's tables (rule findings).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    from pathlib import Path

    from hybridlens.findings import render

    claims = Path(snakemake.input.claims)
    Path(snakemake.output[0]).write_text(render(claims.read_text(), where=str(claims)))
    log.info("filled %s from %s", claims, list(snakemake.input.tables))
