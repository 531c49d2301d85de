# Scale tables across sizes, smallest first (rule scale_tables).
from hybridlens.runlog import script_log

with script_log(snakemake):
    import json

    import pandas as pd

    models, out = snakemake.params.models, snakemake.output
    sizes = []
    for m, f in zip(models, snakemake.input.summary, strict=True):
        with open(f) as fh:
            s = json.load(fh)
        sizes.append({"model": m, **{k: v for k, v in s.items() if not isinstance(v, (dict, list))}})
        sizes[-1]["readers"] = " ".join(s["readers"])
        sizes[-1]["groups"] = " ".join("-".join(map(str, g)) for g in s["groups"])
    pd.DataFrame(sizes).to_csv(out.sizes, sep="\t", index=False)
    for kind in ("profile", "transplant", "blocking"):
        frames = [pd.read_csv(f).assign(model=m) for m, f in zip(models, snakemake.input[kind], strict=True)]
        pd.concat(frames).to_csv(out[kind], sep="\t", index=False)
