# Stitching tables of one pair: rates with intervals, and the maps' fit report (rule stitch_tables).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import json

    import pandas as pd

    from hybridlens.experiments import stitch

    rows = pd.concat([pd.read_csv(f) for f in snakemake.input.rows]).to_dict("records")
    pd.DataFrame(stitch.summarize(rows)).to_csv(snakemake.output.summary, sep="\t", index=False)
    fits, contents = [], []
    for path in snakemake.input.fits:
        with open(path) as f:
            report = json.load(f)
        fits += [{"seed": report["seed"], **m} for m in report["maps"]]
        contents += [{"seed": report["seed"], **c} for c in report["query_content"]]
    pd.DataFrame(fits).to_csv(snakemake.output.fit, sep="\t", index=False)
    pd.DataFrame(contents).to_csv(snakemake.output.query_content, sep="\t", index=False)
