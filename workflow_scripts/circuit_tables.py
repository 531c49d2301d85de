# The circuit's tables across models: localization, ablation, transplants, validations (rule circuit_tables).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import json
    from pathlib import Path

    import pandas as pd

    from hybridlens.experiments.circuit import localization_row
    from hybridlens.tables import gather

    inp, out = snakemake.input, snakemake.output
    pd.DataFrame(
        [localization_row(json.loads(Path(f).read_text())) | {"model": Path(f).parent.name} for f in inp.circuit]
    ).to_csv(out.localization, sep="\t", index=False)
    gather(inp.ablation).to_csv(out.ablation, sep="\t", index=False)
    gather(inp.transplant).to_csv(out.transplant, sep="\t", index=False)
    verdicts = [{"model": Path(f).parent.name, **v} for f in inp.validated for v in json.loads(Path(f).read_text())]
    columns = ["model", "name", "a", "b", "dtype", "max_abs_diff", "magnitude", "n", "ulps", "allowed_ulps"]
    pd.DataFrame(verdicts, columns=[*columns, "tolerance", "passed", "key"]).to_csv(
        out.validations, sep="\t", index=False
    )
