# Train one toy model and save it with save_pretrained (snakemake rule train_toy).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json
    import time
    from pathlib import Path

    import pandas as pd
    import torch

    from hybridlens.store import git_commit, machine
    from hybridlens.zoo import train_and_save

    torch.set_num_threads(snakemake.threads)
    t, out_dir = snakemake.params.training, Path(snakemake.output.config).parent
    start = time.perf_counter()
    parent = Path(snakemake.input.parent).parent if "from" in t["toy"] else None
    curve = train_and_save(t["family"], t["toy"], t["zoo"], out_dir=out_dir, parent=parent)
    pd.DataFrame(curve).to_csv(snakemake.output.curve, index=False)
    # Training is a plateau escape whose timing depends on float rounding: record where it ran (ship_toy ships it).
    seconds, steps = round(time.perf_counter() - start, 1), curve[-1]["step"] + 1
    trained_on = machine() | {"commit": git_commit(), "seconds": seconds, "steps": steps}
    (out_dir / "trained_on.json").write_text(json.dumps(trained_on, indent=1) + "\n")
    log.info("trained %s: final loss %.4f", snakemake.wildcards.model, curve[-1]["loss"])
