# The run's headline numbers in one page, from the experiments' tables.


rule summary:
    input:
        unpack(summary_tables),
    output:
        report("results/summary.md", category="Summary"),
    log:
        "logs/summary/summary.log",
    conda:
        "../environment.yml"
    threads: 1
    resources:
        mem_mb=1000,
    params:
        # Sorted, so that reordering the registry or a spec reruns nothing.
        models=lambda wc: canonical(
            {
                name: {"family": m["family"], "source": m["source"]}
                for name, m in config["models"].items()
            }
        ),
    script:
        "../workflow_scripts/summary.py"


if config.get("study"):

    rule findings:
        input:
            claims=study_claims,
            tables=study_tables,
        output:
            f"studies/{config['study']}/findings.md",
        log:
            "logs/summary/findings.log",
        conda:
            "../environment.yml"
        threads: 1
        resources:
            mem_mb=1000,
        script:
            "../workflow_scripts/findings.py"
