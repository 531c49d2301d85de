# The localized circuit's transplants on a task's own items (rule circuit_task).
from hybridlens.runlog import script_log

with script_log(snakemake) as log:
    import json

    import torch

    from hybridlens.experiments.circuit import TASK_COLUMNS, task_transplant
    from hybridlens.models.adapter import load_model
    from hybridlens.tables import write_table
    from hybridlens.tasks import items_of

    torch.set_num_threads(snakemake.threads)
    hm = load_model(**snakemake.params.model)
    with open(snakemake.input.circuit) as f:
        circuit = json.load(f)
    items, counts = items_of(hm, snakemake.params.task)
    log.info("task %s: %s", snakemake.wildcards.task, counts)
    rows = [
        {"task": snakemake.wildcards.task, **r}
        for r in task_transplant(hm, items, circuit, snakemake.params.batch_size)
    ]
    write_table(snakemake.output.rows, rows, TASK_COLUMNS, "no items")
