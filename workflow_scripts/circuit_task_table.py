# Per model and condition: a task's transplant rates and mean D with intervals (rule circuit_task_table).
from hybridlens.runlog import script_log

with script_log(snakemake):
    from pathlib import Path

    import pandas as pd

    from hybridlens.experiments.circuit import TASK_SUMMARY_COLUMNS, summarize_task

    rows = []
    for path in snakemake.input.rows:  # results/circuit/{model}/task_{task}.csv
        model, items = Path(path).parent.name, pd.read_csv(path, keep_default_na=False)
        task = snakemake.wildcards.task
        rows += [{"model": model, "task": task, **r} for r in summarize_task(items.to_dict("records"))]
    pd.DataFrame(rows, columns=TASK_SUMMARY_COLUMNS).to_csv(snakemake.output.tsv, sep="\t", index=False)
