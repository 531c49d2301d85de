# Encode–Address circuit: localization, query transplant and state transplant.


# The circuit keys that only judge its validations (rule validate_circuit), so changing them reruns no circuit.
rule circuit:
    # Find Encode / Address / reader from the model itself, then transplant with controls and intervals.
    input:
        model_input,
    output:
        circuit="results/circuit/{model}/circuit.json",
        ablation="results/circuit/{model}/ablation.csv",
        readers="results/circuit/{model}/readers.csv",
        transplant="results/circuit/{model}/transplant.csv",
        rows="results/circuit/{model}/items.csv",
        validation="results/circuit/{model}/validation.json",
    log:
        "logs/circuit/{model}.log",
    benchmark:
        "benchmarks/circuit/{model}.tsv"
    conda:
        "../environment.yml"
    threads: res("cpus", 1)
    resources:
        mem_mb=res("mem_mb", 2000),
        runtime=res("runtime", 20),
        gpu=res("gpus", 0),
    params:
        model=model_params,
        settings=canonical(
            {
                k: v
                for k, v in config["circuit"].items()
                if k not in {"models", "tasks", *CIRCUIT_TOLERANCES}
            }
        ),
    script:
        "../workflow_scripts/circuit.py"


rule circuit_task:
    # The localized circuit's query and state transplants on a task's own items, each with a donor partner.
    input:
        model_input,
        task_files,
        circuit="results/circuit/{model}/circuit.json",
        validated="results/circuit/{model}/validated.json",
    output:
        rows="results/circuit/{model}/task_{task}.csv",
    log:
        "logs/circuit_task/{model}/{task}.log",
    benchmark:
        "benchmarks/circuit_task/{model}/{task}.tsv"
    conda:
        "../environment.yml"
    threads: res("cpus", 1)
    resources:
        mem_mb=res("mem_mb", 2000),
        runtime=res("runtime", 20),
        gpu=res("gpus", 0),
    params:
        model=model_params,
        task=lambda wc: canonical(config["tasks"][wc.task]),
        batch_size=config["circuit"]["batch_size"],
    script:
        "../workflow_scripts/circuit_task.py"


rule circuit_task_table:
    # Rates and mean D of a task's transplants per model and condition, with intervals.
    input:
        rows=lambda wc: circuit_files(f"task_{wc.task}.csv"),
    output:
        tsv="results/tables/circuit_task_{task}.tsv",
    log:
        "logs/circuit_task_table/{task}.log",
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/circuit_task_table.py"


rule validate_circuit:
    # Judge the circuit's built-in checks. A failure stops what reads the circuit and keeps its tables; a new
    # tolerance judges again without recomputing them.
    input:
        "results/circuit/{model}/validation.json",
    output:
        "results/circuit/{model}/validated.json",
    log:
        "logs/validate_circuit/{model}.log",
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=500,
    params:
        allowed={
            name: {"key": f"circuit.{key}", "ulps": config["circuit"][key]}
            for name, (_, _, key) in CIRCUIT_VALIDATIONS.items()
        },
    script:
        "../workflow_scripts/validate.py"


rule circuit_tables:
    # Across models: what localization found, the group ablations, the transplants with their intervals, and
    # the built-in validations' verdicts.
    input:
        circuit=circuit_files("circuit.json"),
        validated=circuit_files("validated.json"),
        ablation=circuit_files("ablation.csv"),
        transplant=circuit_files("transplant.csv"),
    output:
        localization="results/tables/circuit_localization.tsv",
        ablation="results/tables/circuit_ablation.tsv",
        transplant="results/tables/circuit_transplant.tsv",
        validations="results/tables/circuit_validations.tsv",
    log:
        "logs/circuit_tables/tables.log",
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/circuit_tables.py"


rule plot_circuit:
    # Group ablation and transplant redirect rates per model, with intervals.
    input:
        rules.circuit_tables.output.localization,
        rules.circuit_tables.output.ablation,
        rules.circuit_tables.output.transplant,
    output:
        pdf=report("results/figures/circuit.pdf", category="Encode-Address circuit"),
    log:
        "logs/plot_circuit/plot.log",
    benchmark:
        "benchmarks/plot_circuit.tsv"
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    script:
        "../workflow_scripts/plot_circuit.py"
