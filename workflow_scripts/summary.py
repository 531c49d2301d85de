# Each experiment's headline numbers with intervals, from its tables (rule summary).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    from hybridlens.summary import write_summary

    tables = dict(snakemake.input.items())
    if "stitch" in tables:  # one path per stitching pair, however many pairs there are
        tables["stitch"] = [tables["stitch"]] if isinstance(tables["stitch"], str) else list(tables["stitch"])
    write_summary(tables, snakemake.params.models, snakemake.output[0])
    log.info("summarized %s", sorted(tables))
