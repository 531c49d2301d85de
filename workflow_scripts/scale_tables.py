# Scale tables across sizes, smallest first (rule scale_tables).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import json
    from pathlib import Path

    import pandas as pd

    from hybridlens.tables import gather

    out, sizes = snakemake.output, []
    for f in snakemake.input.summary:  # results/scale/{model}/summary.json, in scale.models' order
        s = json.loads(Path(f).read_text())
        sizes.append({"model": Path(f).parent.name, **{k: v for k, v in s.items() if not isinstance(v, (dict, list))}})
        sizes[-1]["readers"] = " ".join(s["readers"])
        sizes[-1]["groups"] = " ".join("-".join(map(str, g)) for g in s["groups"])
    pd.DataFrame(sizes).to_csv(out.sizes, sep="\t", index=False)
    for kind in ("profile", "transplant", "blocking"):
        gather(snakemake.input[kind]).to_csv(out[kind], sep="\t", index=False)
