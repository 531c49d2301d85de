# Train one toy model and save it with save_pretrained (snakemake rule train_toy).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import pandas as pd
    import torch

    from hybridlens.experiments.zoo import train_and_save

    torch.set_num_threads(snakemake.threads)
    t = snakemake.params.training
    curve = train_and_save(t["family"], t["toy"], t["zoo"], out_dir=snakemake.output.config.rsplit("/", 1)[0])
    pd.DataFrame(curve).to_csv(snakemake.output.curve, index=False)
    log.info("trained %s: final loss %.4f", snakemake.wildcards.model, curve[-1]["loss"])
